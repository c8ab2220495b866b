"""Reading ``suite.toml`` into a ``SuiteConfig``: every table and key, checked where it is written.

Why a module of its own: this is the one place that knows the file's layout (which keys each table takes, which
are inherited from ``[defaults]``, which combinations are contradictions) and turns it into the dataclasses of
schema.py; the typed values come from validate.py, the starting thresholds from defaults.py.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core.inputs import DISTRIBUTIONS, INPUT_ROLES, AxisRange, InputSpec
from engines.base import BATCH_AXIS, ONNX_EXPORTERS, PRECISIONS
from metrics import AccuracyThreshold, Tolerance
from metrics.parity_report import PARITY_METRICS
from suite.config.defaults import default_precision_tables
from suite.config.known_failures import (
    ACCURACY_METRICS,
    KNOWN_FAILURE_CANARIES,
    KNOWN_FAILURE_CHECKS,
    KNOWN_FAILURE_METRICS,
    KnownFailure,
)
from suite.config.schema import (
    CALIBRATION_METHODS,
    ENGINES,
    EXECUTION_PROVIDERS,
    INPUT_DTYPES,
    REQUIREMENTS,
    TRANSFORMER_FUSIONS,
    ConfigError,
    Int8Options,
    LatencyOptions,
    LatencyShape,
    ModelConfig,
    SuiteConfig,
)
from suite.config.validate import (
    check_choice,
    check_keys,
    read_batch_list,
    read_bool,
    read_choice_list,
    read_int,
    read_list,
    read_number,
    read_ref,
    read_string,
    read_table,
)
from suite.timing import PATHS
from suite.verdict import NotJudgedReasonError, check_reasons

#: A named axis: a letter, then letters, digits and underscores (it becomes a torch.export Dim and an ONNX dim).
_AXIS_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
#: A model name: ASCII letters, digits, _ . and -, not starting with - (it starts every test id, NAME-ENGINE-
#: PRECISION, and is a --models value; pytest escapes other characters in ids, so they would match no model).
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")

_TOP_KEYS = {"defaults", "precision", "int8", "latency", "engine_options", "models", "run"}
_DEFAULT_KEYS = {"batch_sizes", "latency_batch_sizes", "opt_batch", "precisions", "engines", "parity_samples"}
_MODEL_KEYS = {
    "factory", "inputs", "outputs", "batch_sizes", "latency_batch_sizes", "opt_batch", "precisions", "engines",
    "accuracy_dataset", "parity_dataset", "calibration_dataset", "min_top1", "min_top5",
    "parity_samples", "precision", "int8", "engine_options", "description", "known_failures", "axes",
    "latency_shapes", "export", "static_batch", "unsupported",
}
#: [models.NAME.export]: the torch -> ONNX export options (engines/onnx/export.py), keyed into the export's cache.
_EXPORT_KEYS = {"opset", "exporter", "sample_batch"}
#: The oldest opset torch.onnx exports (torch.onnx._constants.ONNX_MIN_OPSET); the newest is the installed onnx's.
MIN_OPSET = 7
_INPUT_KEYS = {"name", "shape", "dtype", "low", "high", "role"}
_AXIS_KEYS = {"min", "opt", "max"}
_PRECISION_KEYS = {"parity", "accuracy", "generated"}
_PARITY_KEYS = set(Tolerance.__dataclass_fields__)
# min_top1/min_top5 are per model (absolute floors), the rest per precision (relative to the reference).
_ACCURACY_KEYS = set(AccuracyThreshold.__dataclass_fields__) - {"min_top1", "min_top5"}
_INT8_KEYS = {"method", "samples", "percentile", "per_channel"}
_LATENCY_KEYS = {"rounds", "warmup_fraction"}
_RUN_KEYS = {"requires", "accept_not_judged"}
_KNOWN_FAILURE_KEYS = {"reason", "match", "checks", "outputs", "metrics"}
# What each backend reads from [engine_options.ENGINE] (README "Configuration reference"); a typo is an error,
# not an option silently ignored.
_ENGINE_OPTION_KEYS = {
    "torch": {"channels_last"},
    "onnxruntime": {"execution_provider", "intra_op_threads", "transformer_fusion"},
    "inductor": {"precisions", "cxx"},
    "tensorrt": {"workspace_mb", "builder_optimization_level"},
}
_KNOWN_FAILURE_FORM = ('{ reason = "what fails, measured how, since when", outputs = ["logits"], metrics = '
                       '["top1_agreement_pct"], match = "REGEX over the failure message", checks = ["parity"] }')
#: The most one batch of a model's inputs may take at its largest batch (each named axis at its max): a batch
#: size beyond it is a typo (10000000000) that fails every latency case with "Unable to allocate 4.66 TiB".
MAX_BATCH_INPUT_BYTES = 16 * 2**30


def load_config(path: Path | str) -> SuiteConfig:
    """The config file, parsed and checked. Errors name the file once: the plugin labels them 'suite config:'."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    return parse_config(raw, path)


def parse_config(raw: Mapping[str, Any], path: Path = Path("<memory>")) -> SuiteConfig:
    check_keys(str(path), raw, _TOP_KEYS)
    defaults = _parse_defaults(read_table("[defaults]", raw.get("defaults", {})))
    precision_defaults = default_precision_tables()
    for prec, table in read_table("[precision]", raw.get("precision", {})).items():
        check_choice("[precision]", prec, PRECISIONS)
        _merge_precision(precision_defaults[prec], table, f"[precision.{prec}]")
    int8_defaults = _parse_int8("[int8]", raw.get("int8", {}))
    latency = _parse_latency(raw.get("latency", {}))
    engine_defaults = read_table("[engine_options]", raw.get("engine_options", {}))
    # engine_options are passed to the backend as they are, and keyed into its cache entries.
    for eng, opts in engine_defaults.items():
        check_choice("[engine_options]", eng, ENGINES)
        _check_engine_options(f"[engine_options.{eng}]", eng, opts)
    models_raw = read_table("[models]", raw.get("models", {}))
    if not models_raw:
        raise ConfigError(f"{path}: no [models.NAME] entries")
    models = {
        name: _parse_model(name, entry, defaults, precision_defaults, int8_defaults, engine_defaults)
        for name, entry in models_raw.items()
    }
    requires, accept = _parse_run(raw.get("run", {}), models)
    return SuiteConfig(path, models, latency, requires, accept)


def _parse_defaults(table: Mapping[str, Any]) -> dict[str, Any]:
    """[defaults], checked where it is written: a model inheriting a bad value must not be blamed for it."""
    check_keys("[defaults]", table, _DEFAULT_KEYS)
    out: dict[str, Any] = {}
    for key in ("batch_sizes", "latency_batch_sizes"):
        if key in table:
            out[key] = read_batch_list(f"[defaults].{key}", table[key])
    if "opt_batch" in table:
        out["opt_batch"] = read_int("[defaults].opt_batch", table["opt_batch"], lo=1)
    if "precisions" in table:
        out["precisions"] = read_choice_list("[defaults].precisions", table["precisions"], PRECISIONS)
    if "engines" in table:
        out["engines"] = read_choice_list("[defaults].engines", table["engines"], ENGINES)
    if "parity_samples" in table:
        out["parity_samples"] = read_int("[defaults].parity_samples", table["parity_samples"], lo=1)
    return out


def _parse_latency(table: Any) -> LatencyOptions:
    table = read_table("[latency]", table)
    check_keys("[latency]", table, _LATENCY_KEYS)
    out = LatencyOptions()
    if "rounds" in table:
        out = dataclasses.replace(out, rounds=read_int("[latency].rounds", table["rounds"], lo=2))
    if "warmup_fraction" in table:
        out = dataclasses.replace(out, warmup_fraction=read_number("[latency].warmup_fraction",
                                                                   table["warmup_fraction"], 0.0, 1.0, hi_open=True))
    return out


def _parse_run(table: Any, models: Mapping[str, ModelConfig]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    table = read_table("[run]", table)
    check_keys("[run]", table, _RUN_KEYS)
    requires = read_choice_list("[run].requires", table.get("requires", []), REQUIREMENTS, allow_empty=True)
    used = {e for m in models.values() for e in m.engines}
    for i, name in enumerate(requires):
        if name != "cuda" and name not in used:
            raise ConfigError(f"[run].requires[{i}]: engine {name!r} is required but no model lists it in "
                              f"engines, so the requirement could never be checked")
    where = "[run].accept_not_judged"
    reasons = read_list(where, table.get("accept_not_judged", []), allow_empty=True)
    for i, reason in enumerate(reasons):
        read_string(f"{where}[{i}]", reason)
    named = [r.strip() for r in reasons]
    if "none" in named and len(named) > 1:
        raise ConfigError(f"{where} = {reasons!r}: 'none' means no reason and cannot be combined with others")
    try:
        accept = check_reasons(reasons, where)
    except NotJudgedReasonError as exc:
        raise ConfigError(str(exc)) from None
    return requires, accept


def _merge_precision(target: dict[str, Any], table: Any, where: str) -> None:
    table = read_table(where, table)
    check_keys(where, table, _PRECISION_KEYS)
    parity = read_table(f"{where}.parity", table.get("parity", {}))
    accuracy = read_table(f"{where}.accuracy", table.get("accuracy", {}))
    check_keys(f"{where}.parity", parity, _PARITY_KEYS)
    check_keys(f"{where}.accuracy", accuracy, _ACCURACY_KEYS)
    # Each threshold is checked alone by the class that enforces it, so its error names this key.
    for key, value in parity.items():
        _threshold(f"{where}.parity.{key}", Tolerance, key, value)
    for key, value in accuracy.items():
        _threshold(f"{where}.accuracy.{key}", AccuracyThreshold, key, value)
    if "generated" in table:
        target["generated"] = list(read_choice_list(f"{where}.generated", table["generated"], DISTRIBUTIONS))
    target["parity"].update(parity)
    target["accuracy"].update(accuracy)


def _threshold(where: str, cls: Any, key: str, value: Any) -> None:
    read_number(where, value)
    try:
        cls(**{key: value})
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _parse_int8(where: str, table: Any, base: Int8Options | None = None) -> Int8Options:
    table = read_table(where, table)
    check_keys(where, table, _INT8_KEYS)
    out = base or Int8Options()
    if "method" in table:
        check_choice(f"{where}.method", read_string(f"{where}.method", table["method"]), CALIBRATION_METHODS)
        out = dataclasses.replace(out, method=table["method"])
    if "samples" in table:
        out = dataclasses.replace(out, samples=read_int(f"{where}.samples", table["samples"], lo=1))
    if "percentile" in table:
        out = dataclasses.replace(out, percentile=read_number(f"{where}.percentile", table["percentile"], 0.0, 100.0,
                                                              lo_open=True))
    if "per_channel" in table:
        out = dataclasses.replace(out, per_channel=read_bool(f"{where}.per_channel", table["per_channel"]))
    return out


def _check_engine_options(where: str, engine: str, opts: Any) -> None:
    """Types and values of what each backend reads, checked here so a backend never sees a bad one."""
    opts = read_table(where, opts)
    check_keys(where, opts, _ENGINE_OPTION_KEYS[engine])
    for key, value in opts.items():
        at = f"{where}.{key}"
        if key == "channels_last":
            read_bool(at, value)
        elif key == "execution_provider":
            check_choice(at, read_string(at, value), EXECUTION_PROVIDERS)
        elif key == "intra_op_threads":
            read_int(at, value, lo=1)
        elif key == "transformer_fusion":
            check_choice(at, read_string(at, value), TRANSFORMER_FUSIONS)
        elif key == "precisions":
            read_choice_list(at, value, PRECISIONS)
        elif key == "cxx":
            read_string(at, value)
        elif key == "workspace_mb":
            read_int(at, value, lo=1)
        elif key == "builder_optimization_level":
            read_int(at, value, lo=0, hi=5)


def _check_model_name(name: str) -> None:
    """A name that fits in a test id: ``NAME-ENGINE-PRECISION`` must read back as this model's cell (the verdict,
    the gates and --models find a model by the start of its ids)."""
    if not _MODEL_NAME.match(name):
        raise ConfigError(f"[models.{name!r}]: a model name is ASCII letters, digits, '_', '.' and '-', not starting "
                          f"with '-' (it starts every test id, NAME-ENGINE-PRECISION); got {name!r}")
    cell = re.search(rf"(?:^|-)((?:{'|'.join(ENGINES)})-(?:{'|'.join(PRECISIONS)}))(?=-|$)", name)
    if cell is not None:
        raise ConfigError(f"[models.{name}]: the name holds {cell.group(1)!r}, an engine-precision pair, so its test "
                          f"ids ({name}-ENGINE-PRECISION) would read as another model's cell; rename the model")


def _parse_model(
    name: str,
    entry: Any,
    defaults: Mapping[str, Any],
    precision_defaults: Mapping[str, dict[str, Any]],
    int8_defaults: Int8Options,
    engine_defaults: Mapping[str, Mapping[str, Any]],
) -> ModelConfig:
    _check_model_name(name)
    where = f"[models.{name}]"
    entry = read_table(where, entry)
    check_keys(where, entry, _MODEL_KEYS)
    for required in ("factory", "inputs", "outputs"):
        if required not in entry:
            raise ConfigError(f"{where}: missing required key {required!r}")

    def origin(key: str) -> str:
        """Where a value came from: the model's own key, or [defaults] when it inherited one."""
        return f"{where}.{key}" if key in entry or key not in defaults else f"[defaults].{key} (used by {where})"

    factory = read_ref(f"{where}.factory", entry["factory"])
    axes = _parse_axes(f"{where}.axes", entry.get("axes", {}))
    inputs_raw = read_list(f"{where}.inputs", entry["inputs"])
    inputs = tuple(_parse_input(f"{where}.inputs[{i}]", spec, axes, f"{where}.axes")
                   for i, spec in enumerate(inputs_raw))
    names = [i.name for i in inputs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.inputs: duplicate input names {names}")
    unused = [a for a in axes if not any(a in i.axis_names for i in inputs)]
    if unused:
        raise ConfigError(f"{where}.axes: {unused} named by no input's shape; an axis no input has is never "
                          "checked (name it in a shape, e.g. shape = [\"seq\"], or delete it)")
    outputs = tuple(read_string(f"{where}.outputs[{i}]", o) for i, o in enumerate(read_list(f"{where}.outputs",
                                                                                            entry["outputs"])))
    if len(set(outputs)) != len(outputs):
        raise ConfigError(f"{where}.outputs: duplicate output names {list(outputs)}")

    batch_sizes = (read_batch_list(f"{where}.batch_sizes", entry["batch_sizes"]) if "batch_sizes" in entry
                   else defaults.get("batch_sizes", (1, 8, 32)))
    lo, hi = min(batch_sizes), max(batch_sizes)
    if "latency_batch_sizes" in entry and "latency_shapes" in entry:
        raise ConfigError(f"{where}: set latency_shapes or latency_batch_sizes, not both (latency_shapes names the "
                          "batch of each case)")
    if "latency_batch_sizes" in entry:
        latency_batches = read_batch_list(f"{where}.latency_batch_sizes", entry["latency_batch_sizes"])
    else:
        latency_batches = defaults.get("latency_batch_sizes", batch_sizes)
    if "latency_shapes" in entry:
        latency_shapes = _parse_latency_shapes(f"{where}.latency_shapes", entry["latency_shapes"], (lo, hi), axes)
        latency_batches = tuple(dict.fromkeys(shape.batch for shape in latency_shapes))
    outside = [b for b in latency_batches if not lo <= b <= hi]
    if outside:
        raise ConfigError(f"{origin('latency_batch_sizes')}: latency_batch_sizes {outside} fall outside "
                          f"batch_sizes {list(batch_sizes)} (range {lo}..{hi})")
    if "latency_shapes" not in entry:
        latency_shapes = tuple(LatencyShape(b, tuple((name, r.opt) for name, r in axes.items()))
                               for b in latency_batches)
    _check_batch_bytes(origin("batch_sizes"), hi, inputs)
    opt_batch = read_int(f"{where}.opt_batch", entry["opt_batch"], lo=1) if "opt_batch" in entry \
        else defaults.get("opt_batch")
    if opt_batch is not None and not lo <= opt_batch <= hi:
        raise ConfigError(f"{origin('opt_batch')}: opt_batch {opt_batch} is outside batch_sizes "
                          f"{list(batch_sizes)} (range {lo}..{hi}); the shape profile needs min <= opt <= max")
    precisions = (read_choice_list(f"{where}.precisions", entry["precisions"], PRECISIONS) if "precisions" in entry
                  else defaults.get("precisions", ("fp32",)))
    engines = (read_choice_list(f"{where}.engines", entry["engines"], ENGINES) if "engines" in entry
               else defaults.get("engines", ("torch", "onnxruntime")))
    parity_samples = (read_int(f"{where}.parity_samples", entry["parity_samples"], lo=1) if "parity_samples" in entry
                      else defaults.get("parity_samples", 64))

    datasets = {key: read_ref(f"{where}.{key}", entry[key]) if key in entry else None
                for key in ("accuracy_dataset", "parity_dataset", "calibration_dataset")}
    min_top1 = read_number(f"{where}.min_top1", entry["min_top1"], 0.0, 1.0) if "min_top1" in entry else None
    min_top5 = read_number(f"{where}.min_top5", entry["min_top5"], 0.0, 1.0) if "min_top5" in entry else None
    for key in ("min_top1", "min_top5"):
        if key in entry and datasets["accuracy_dataset"] is None:
            raise ConfigError(f"{where}.{key}: set, but the model has no accuracy_dataset, so it would never "
                              "be checked")
    description = read_string(f"{where}.description", entry["description"], allow_empty=True) \
        if "description" in entry else ""

    tables = copy.deepcopy(dict(precision_defaults))
    for prec, table in read_table(f"{where}.precision", entry.get("precision", {})).items():
        check_choice(f"{where}.precision", prec, PRECISIONS)
        _merge_precision(tables[prec], table, f"{where}.precision.{prec}")
    try:
        tolerances = {p: Tolerance(**tables[p]["parity"]) for p in PRECISIONS}
        generated = {p: tuple(tables[p].get("generated", DISTRIBUTIONS)) for p in PRECISIONS}
        accuracy = {p: AccuracyThreshold(min_top1=min_top1, min_top5=min_top5, **tables[p]["accuracy"])
                    for p in PRECISIONS}
    except (TypeError, ValueError) as exc:  # unreachable after the per-key checks; kept as a clear error
        raise ConfigError(f"{where}: bad threshold ({exc})") from exc

    int8 = _parse_int8(f"{where}.int8", entry.get("int8", {}), int8_defaults)
    if "int8" in entry and "int8" not in precisions:
        raise ConfigError(f"{where}.int8: set, but the model's precisions {list(precisions)} have no int8, so it "
                          "would never be used; add int8 to precisions or delete the table")
    engine_options = {e: dict(engine_defaults.get(e, {})) for e in ENGINES}
    for eng, opts in read_table(f"{where}.engine_options", entry.get("engine_options", {})).items():
        check_choice(f"{where}.engine_options", eng, ENGINES)
        _check_engine_options(f"{where}.engine_options.{eng}", eng, opts)
        if eng not in engines:
            raise ConfigError(f"{where}.engine_options.{eng}: set, but the model's engines {list(engines)} have no "
                              f"{eng}, so it would never be used; add {eng} to engines or delete the table")
        engine_options[eng].update(opts)
    if "inductor" in engines:
        _check_inductor_precisions(where, entry, engine_options["inductor"], precisions)

    if "int8" in precisions and not datasets["calibration_dataset"]:
        raise ConfigError(f"{where}: precision int8 needs calibration_dataset (data drawn from the model's dataset)")
    static_batch = read_bool(f"{where}.static_batch", entry["static_batch"]) if "static_batch" in entry else False
    if static_batch and "int8" in precisions:
        raise ConfigError(f"{where}.static_batch: true, but precisions has int8, which has no static-batch graph "
                          "(calibration runs the graph on chunks of any size); drop one of them")
    export = _parse_export(f"{where}.export", entry.get("export", {}), batch_sizes, static_batch)
    known = _parse_known_failures(f"{where}.known_failures", entry.get("known_failures", {}), engines, precisions,
                                  datasets["accuracy_dataset"], outputs)
    unsupported = _parse_unsupported(f"{where}.unsupported", entry.get("unsupported", {}), engines, precisions)
    return ModelConfig(
        name=name,
        factory=factory,
        inputs=inputs,
        outputs=outputs,
        batch_sizes=batch_sizes,
        latency_batch_sizes=latency_batches,
        opt_batch=opt_batch,
        precisions=precisions,
        engines=engines,
        accuracy_dataset=datasets["accuracy_dataset"],
        parity_dataset=datasets["parity_dataset"] or datasets["accuracy_dataset"],
        calibration_dataset=datasets["calibration_dataset"],
        min_top1=min_top1,
        min_top5=min_top5,
        parity_samples=parity_samples,
        parity_samples_set="parity_samples" in entry or "parity_samples" in defaults,
        tolerances=tolerances,
        accuracy_thresholds=accuracy,
        generated=generated,
        int8=int8,
        engine_options=engine_options,
        description=description,
        known_failures=known,
        axes=tuple(axes.items()),
        latency_shapes=latency_shapes,
        export=export,
        static_batch=static_batch,
        unsupported=unsupported,
    )


def _check_batch_bytes(where: str, batch: int, inputs: tuple[InputSpec, ...]) -> None:
    """One batch of inputs at the largest batch size, each named axis at its max, within MAX_BATCH_INPUT_BYTES."""
    row = sum(math.prod(d if isinstance(d, int) else spec.axis(d).max for d in spec.shape)
              * np.dtype(spec.dtype).itemsize for spec in inputs)
    if batch * row > MAX_BATCH_INPUT_BYTES:
        raise ConfigError(f"{where}: a batch of {batch} takes {_size(batch * row)} of inputs ({row} bytes a row, each "
                          f"named axis at its max), more than the {_size(MAX_BATCH_INPUT_BYTES)} a batch may take; "
                          "lower the largest batch size")


def _size(n: int) -> str:
    """Bytes for people: '16 GiB', '2.44 TiB'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _check_inductor_precisions(where: str, entry: Mapping[str, Any], options: Mapping[str, Any],
                               precisions: tuple[str, ...]) -> None:
    """inductor builds a package only for engine_options.inductor.precisions (default fp32); its other cells end
    not judged (unsupported). A precision listed there that the model does not run names a package nothing
    judges; none of the model's precisions listed there leaves inductor never judged, an 'unsupported' a config
    may accept, so a run could end green without it."""
    chosen = list(options.get("precisions", ["fp32"]))
    own = "precisions" in ((entry.get("engine_options") or {}).get("inductor") or {})
    at = f"{where}.engine_options.inductor.precisions" if own else \
        f"[engine_options.inductor].precisions (used by {where})"
    if own:
        for i, precision in enumerate(chosen):
            if precision not in precisions:
                raise ConfigError(f"{at}[{i}]: {precision!r} is not among the model's precisions {list(precisions)}, "
                                  f"so no inductor-{precision} cell exists to judge its package; add it to precisions "
                                  "or drop it here")
    if not any(p in precisions for p in chosen):
        raise ConfigError(f"{at}: {chosen} share no precision with the model's precisions {list(precisions)}, so "
                          "every inductor cell would end not judged (unsupported) and inductor would never be judged")


def _parse_export(where: str, table: Any, batch_sizes: tuple[int, ...], static_batch: bool) -> dict[str, Any]:
    """[models.NAME.export]: the way out for a model one exporter rejects (``exporter = "torchscript"``), an
    opset, a tracing batch; each checked here, so that the exporter never sees a value it would misread."""
    table = read_table(where, table)
    check_keys(where, table, _EXPORT_KEYS)
    out: dict[str, Any] = {}
    if "opset" in table:
        import onnx  # only where an opset is written: the newest one the installed onnx defines

        newest = int(onnx.defs.onnx_opset_version())
        value = table["opset"]
        if isinstance(value, bool) or not isinstance(value, int) or not MIN_OPSET <= value <= newest:
            raise ConfigError(f"{where}.opset: expected an opset (an integer) in [{MIN_OPSET}, {newest}] (from the "
                              f"oldest torch.onnx exports to the newest the installed onnx {onnx.__version__} "
                              f"defines), got {value!r}")
        out["opset"] = value
    if "exporter" in table:
        exporter = read_string(f"{where}.exporter", table["exporter"])
        check_choice(f"{where}.exporter", exporter, ONNX_EXPORTERS)
        out["exporter"] = exporter
    if "sample_batch" in table:
        batch = read_int(f"{where}.sample_batch", table["sample_batch"], lo=1, what="a batch size")
        lo, hi = min(batch_sizes), max(batch_sizes)
        if not lo <= batch <= hi:
            raise ConfigError(f"{where}.sample_batch: {batch} is outside batch_sizes {list(batch_sizes)} (range "
                              f"{lo}..{hi}); the export traces the model at this batch")
        if static_batch:
            raise ConfigError(f"{where}.sample_batch: set, but the model has static_batch = true, whose exports each "
                              "trace at their own batch; it would never be used")
        out["sample_batch"] = batch
    return out


def _parse_known_failures(where: str, table: Any, engines: tuple[str, ...], precisions: tuple[str, ...],
                          accuracy_dataset: str | None, outputs: tuple[str, ...] = ()) -> dict[str, KnownFailure]:
    """Each entry says what is expected to fail and how (which figures of which outputs, and the message's
    pattern), so that it cannot hide another failure."""
    out: dict[str, KnownFailure] = {}
    for cell_key, spec in read_table(where, table).items():
        at = f"{where}.{cell_key}"
        engine, _, precision = cell_key.partition("-")
        check_choice(f"{at} (engine)", engine, ENGINES)
        check_choice(f"{at} (precision)", precision, PRECISIONS)
        if engine not in engines or precision not in precisions:
            raise ConfigError(f"{at}: the model does not run {cell_key} (engines {list(engines)}, precisions "
                              f"{list(precisions)}); the entry would never apply")
        if isinstance(spec, str):
            raise ConfigError(f"{at} = {spec!r}: a plain reason is the old form, which hid any failure of the "
                              f"cell; write {cell_key} = {_KNOWN_FAILURE_FORM}")
        spec = read_table(at, spec)
        check_keys(at, spec, _KNOWN_FAILURE_KEYS)
        for required in ("reason", "match"):
            if required not in spec:
                raise ConfigError(f"{at}: missing required key {required!r}; the form is {_KNOWN_FAILURE_FORM}")
        missing = [k for k in ("outputs", "metrics") if k not in spec]
        if missing:
            raise ConfigError(f"{at}: missing {' and '.join(map(repr, missing))}: a known failure names the outputs "
                              "and the figures that fail on them, and absorbs no other failure of the cell (its match "
                              f"alone once absorbed another output's garbage); add outputs = [one or more of "
                              f"{list(outputs)}], metrics = [one or more of {', '.join(_metric_names())}]")
        reason = read_string(f"{at}.reason", spec["reason"])
        pattern = read_string(f"{at}.match", spec["match"])
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{at}.match = {pattern!r}: not a valid regular expression ({exc})") from None
        if compiled.search("") is not None:
            raise ConfigError(f"{at}.match = {pattern!r}: matches an empty message, so it would match any failure; "
                              "match text of the expected failure (e.g. the figure that fails)")
        canary = next((c for c in KNOWN_FAILURE_CANARIES if compiled.search(c) is not None), None)
        if canary is not None:
            raise ConfigError(f"{at}.match = {pattern!r}: matches {canary!r}, what a broken engine says in any cell, "
                              "so it would hide such a failure; match text of the expected failure (e.g. the figure "
                              "that fails)")
        checks = (read_choice_list(f"{at}.checks", spec["checks"], KNOWN_FAILURE_CHECKS) if "checks" in spec
                  else KNOWN_FAILURE_CHECKS)
        if "checks" in spec and "accuracy" in checks and accuracy_dataset is None:
            raise ConfigError(f"{at}.checks: 'accuracy' listed, but the model has no accuracy_dataset, so it has "
                              "no accuracy check")
        declared_outputs = read_choice_list(f"{at}.outputs", spec["outputs"], outputs)
        metrics = read_choice_list(f"{at}.metrics", spec["metrics"], _metric_names())
        for i, metric in enumerate(metrics):
            if not any(metric in KNOWN_FAILURE_METRICS[c] for c in checks):
                kinds = [c for c in KNOWN_FAILURE_CHECKS if metric in KNOWN_FAILURE_METRICS[c]]
                raise ConfigError(f"{at}.metrics[{i}]: {metric!r} is a figure of the {kinds[0]} check, which the entry "
                                  f"does not cover (checks {list(checks)}); figures of those: "
                                  f"{', '.join(m for c in checks for m in KNOWN_FAILURE_METRICS[c])}")
        out[cell_key] = KnownFailure(reason=reason, match=pattern, checks=checks, outputs=declared_outputs,
                                     metrics=metrics)
    return out


def _metric_names() -> tuple[str, ...]:
    """Every figure a known failure may name, parity's first."""
    return (*PARITY_METRICS, *ACCURACY_METRICS)


def _parse_unsupported(where: str, table: Any, engines: tuple[str, ...],
                       precisions: tuple[str, ...]) -> dict[str, str]:
    """``"onnxruntime-int8" = "why"`` or ``"onnxruntime-bf16-graph" = "why"``: each key names a cell (or one of its
    latency paths) the model runs, each reason is written out."""
    out: dict[str, str] = {}
    for key, reason in read_table(where, table).items():
        at = f"{where}.{key}"
        engine, precision, *rest = str(key).split("-")
        check_choice(f"{at} (engine)", engine, ENGINES)
        check_choice(f"{at} (precision)", precision, PRECISIONS)
        if len(rest) > 1 or (rest and rest[0] not in PATHS):
            raise ConfigError(f"{at}: write ENGINE-PRECISION or ENGINE-PRECISION-PATH, PATH one of "
                              f"{', '.join(PATHS)}")
        if engine not in engines or precision not in precisions:
            raise ConfigError(f"{at}: the model does not run {engine}-{precision} (engines {list(engines)}, "
                              f"precisions {list(precisions)}); the entry would never apply")
        text = read_string(at, reason).strip()
        if len(text) < 10:
            raise ConfigError(f"{at} = {reason!r}: say why the engine cannot do this by design (what was seen, "
                              "where, since when)")
        out[str(key)] = text
    return out


def _parse_axes(where: str, table: Any) -> dict[str, AxisRange]:
    """[models.NAME.axes]: ``seq = { min = 16, opt = 128, max = 256 }``, one per named axis (opt: default max)."""
    out: dict[str, AxisRange] = {}
    for name, spec in read_table(where, table).items():
        at = f"{where}.{name}"
        if not _AXIS_NAME.match(name) or name == BATCH_AXIS:
            raise ConfigError(f"{at}: {name!r} is not an axis name: a letter, then letters, digits or _, and not "
                              f"{BATCH_AXIS!r} (the batch axis is batch_sizes)")
        spec = read_table(at, spec)
        check_keys(at, spec, _AXIS_KEYS)
        for required in ("min", "max"):
            if required not in spec:
                raise ConfigError(f"{at}: missing required key {required!r}; the form is "
                                  f"{name} = {{ min = 16, opt = 128, max = 256 }}")
        lo = read_int(f"{at}.min", spec["min"], lo=1, what="a length")
        hi = read_int(f"{at}.max", spec["max"], lo=1, what="a length")
        opt = read_int(f"{at}.opt", spec["opt"], lo=1, what="a length") if "opt" in spec else hi
        if not lo <= opt <= hi:
            raise ConfigError(f"{at}: min {lo}, opt {opt}, max {hi}; the shape profile needs min <= opt <= max")
        out[name] = AxisRange(lo, opt, hi)
    return out


def _parse_latency_shapes(where: str, value: Any, batches: tuple[int, int],
                          axes: Mapping[str, AxisRange]) -> tuple[LatencyShape, ...]:
    """``[{ batch = 1, seq = 128 }, ...]``: every case names its batch and a length for each named axis, each
    within the profile (a shape outside it would time an engine that rejects it, or one rebuilt for it)."""
    form = "{ " + ", ".join(["batch = 1", *(f"{a} = {r.opt}" for a, r in axes.items())]) + " }"
    shapes: list[LatencyShape] = []
    for i, item in enumerate(read_list(where, value)):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: expected a table like {form}, got {item!r}")
        check_keys(at, item, {BATCH_AXIS, *axes})
        missing = [k for k in (BATCH_AXIS, *axes) if k not in item]
        if missing:
            raise ConfigError(f"{at}: missing {', '.join(missing)}; each latency shape names the batch and every "
                              f"axis: {form}")
        batch = read_int(f"{at}.batch", item[BATCH_AXIS], lo=1, what="a batch size")
        if not batches[0] <= batch <= batches[1]:
            raise ConfigError(f"{at}.batch: {batch} is outside batch_sizes' range {batches[0]}..{batches[1]}")
        dims = []
        for name, r in axes.items():
            length = read_int(f"{at}.{name}", item[name], lo=1, what="a length")
            if not r.min <= length <= r.max:
                raise ConfigError(f"{at}.{name}: {length} is outside axis {name!r}'s range {r.min}..{r.max}")
            dims.append((name, length))
        shapes.append(LatencyShape(batch, tuple(dims)))
    repeated = sorted({s.id for s in shapes if shapes.count(s) > 1})
    if repeated:
        raise ConfigError(f"{where}: {repeated} listed more than once")
    return tuple(shapes)


def _parse_input(where: str, spec: Any, axes: Mapping[str, AxisRange] | None = None,
                 axes_where: str = "axes") -> InputSpec:
    axes = axes or {}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a table like {{name=..., shape=[...]}}, got {spec!r}")
    check_keys(where, spec, _INPUT_KEYS)
    if "name" not in spec or "shape" not in spec:
        raise ConfigError(f"{where}: needs name and shape (without the batch axis)")
    name = read_string(f"{where}.name", spec["name"])
    shape = tuple(_dimension(f"{where}.shape[{j}]", d, axes, axes_where)
                  for j, d in enumerate(read_list(f"{where}.shape", spec["shape"], allow_empty=True)))
    dtype_name = read_string(f"{where}.dtype", spec.get("dtype", "float32"))
    try:
        dtype = np.dtype(dtype_name)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.name not in INPUT_DTYPES:
        raise ConfigError(f"{where}.dtype: unknown dtype {dtype_name!r}; valid: {', '.join(INPUT_DTYPES)}")
    low = read_number(f"{where}.low", spec.get("low", 0.0))
    high = read_number(f"{where}.high", spec.get("high", 1.0))
    if not low < high:
        raise ConfigError(f"{where}: low {low!r} must be below high {high!r} (synthetic inputs are drawn between)")
    if dtype.kind == "b":
        for key, value in (("low", low), ("high", high)):
            if value not in (0, 1):
                raise ConfigError(f"{where}.{key}: {value!r}; a bool input takes low = 0 and high = 1 (the default)")
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        for key, value in (("low", low), ("high", high)):
            if not float(value).is_integer() or not info.min <= value <= info.max:
                raise ConfigError(f"{where}.{key}: {value!r} is not an integer within {dtype.name} "
                                  f"[{info.min}, {info.max}]")
            # The bounds are held as floats (InputSpec.low/high, part of every cache key), exact up to 2**53: the
            # rounded bound must fit too (int64's max, 2**63 - 1, rounds to 2**63, past it).
            if not info.min <= float(value) <= info.max:
                usable = int(np.nextafter(float(info.max), 0.0))  # only a max can round past its type's range
                raise ConfigError(f"{where}.{key}: {value!r} is held as the float {float(value):.17g}, outside "
                                  f"{dtype.name} [{info.min}, {info.max}] (input bounds are floats, exact up to "
                                  f"2**53); use at most {usable}")
    else:
        limit = float(np.finfo(dtype).max)
        for key, value in (("low", low), ("high", high)):
            if abs(value) > limit:
                raise ConfigError(f"{where}.{key}: {value!r} does not fit in {dtype.name} (max {limit:g})")
        # Synthetic values are low + (high - low) * u, in float64: the width must be a finite number.
        if not math.isfinite(float(high) - float(low)):
            raise ConfigError(f"{where}: low {low!r} to high {high!r} is wider than a float64 can hold (high - low "
                              f"overflows, and synthetic inputs are drawn across it); narrow the range")
    role = read_string(f"{where}.role", spec.get("role", "values"))
    check_choice(f"{where}.role", role, INPUT_ROLES)
    if role == "attention_mask":
        if dtype.kind not in "iu" or (low, high) != (0, 1):
            raise ConfigError(f"{where}: role attention_mask needs an integer dtype and low = 0, high = 1 (its "
                              f"values are 1 for a token, 0 for padding), got {dtype.name} in [{low:g}, {high:g}]")
        if not shape or not isinstance(shape[-1], str):
            raise ConfigError(f"{where}.shape: role attention_mask needs its last axis named (the sequence, "
                              f"e.g. shape = [\"seq\"]), got {list(shape)}")
    named = tuple((d, axes[d]) for d in dict.fromkeys(d for d in shape if isinstance(d, str)))
    return InputSpec(name=name, shape=shape, dtype=dtype.name, low=float(low), high=float(high), axes=named,
                     role=role)


def _dimension(where: str, value: Any, axes: Mapping[str, AxisRange], axes_where: str) -> int | str:
    """A fixed dimension (an integer >= 1) or the name of an axis declared in [models.NAME.axes]."""
    if isinstance(value, str):
        if value not in axes:
            declared = ", ".join(axes) or "none"
            raise ConfigError(f"{where}: axis {value!r} is not declared in {axes_where} (declared: {declared}); "
                              f"add {value} = {{ min = ..., opt = ..., max = ... }} there")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        named = f" or a named axis of {axes_where} ({', '.join(axes)})" if axes else ""
        raise ConfigError(f"{where}: expected a dimension (an integer) >= 1{named}, got {value!r}")
    return value
