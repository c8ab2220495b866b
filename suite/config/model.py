"""One ``[models.NAME]`` table into a ``ModelConfig``: its keys, what it inherits from ``[defaults]``, and the
combinations that contradict each other (a batch outside batch_sizes, int8 without calibration data, ...).

Why a module of its own: a model's entry is the largest table and the one most checks are about; its inputs
(shapes.py), its excuses (excuses.py) and its overridable tables (overrides.py) are read by their own modules.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.inputs import DISTRIBUTIONS, AxisRange, InputSpec
from engines.base import ONNX_EXPORTERS, PRECISIONS
from metrics import AccuracyThreshold, Tolerance
from suite.config.excuses import _parse_known_failures, _parse_unsupported
from suite.config.overrides import _check_engine_options, _merge_precision, _parse_int8
from suite.config.schema import (
    ENGINES,
    ConfigError,
    Int8Options,
    LatencyShape,
    ModelConfig,
)
from suite.config.shapes import _parse_axes, _parse_input, _parse_latency_shapes
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

#: A model name: ASCII letters, digits, _ . and -, not starting with - (it starts every test id, NAME-ENGINE-
#: PRECISION, and is a --models value; pytest escapes other characters in ids, so they would match no model).
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")
_MODEL_KEYS = {
    "factory", "inputs", "outputs", "batch_sizes", "latency_batch_sizes", "opt_batch", "reference_batch", "precisions",
    "engines", "accuracy_dataset", "parity_dataset", "calibration_dataset", "min_top1", "min_top5",
    "parity_samples", "precision", "int8", "engine_options", "description", "known_failures", "axes",
    "latency_shapes", "export", "static_batch", "unsupported",
}
#: [models.NAME.export]: the torch -> ONNX export options (engines/onnx/export.py), keyed into the export's cache.
_EXPORT_KEYS = {"opset", "exporter", "sample_batch"}
#: The oldest opset torch.onnx exports (torch.onnx._constants.ONNX_MIN_OPSET); the newest is the installed onnx's.
MIN_OPSET = 7
#: The most one batch of a model's inputs may take at its largest batch (each named axis at its max): a batch
#: size beyond it is a typo (10000000000) that fails every latency case with "Unable to allocate 4.66 TiB".
MAX_BATCH_INPUT_BYTES = 16 * 2**30


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

    factory = read_ref(f"{where}.factory", entry["factory"])
    axes, inputs, outputs = _parse_io(where, entry)
    batches = _parse_batches(where, entry, defaults, axes, inputs)
    precisions = (read_choice_list(f"{where}.precisions", entry["precisions"], PRECISIONS) if "precisions" in entry
                  else defaults.get("precisions", ("fp32",)))
    engines = (read_choice_list(f"{where}.engines", entry["engines"], ENGINES) if "engines" in entry
               else defaults.get("engines", ("torch", "onnxruntime")))
    parity_samples = (read_int(f"{where}.parity_samples", entry["parity_samples"], lo=1) if "parity_samples" in entry
                      else defaults.get("parity_samples", 64))

    datasets = {key: read_ref(f"{where}.{key}", entry[key]) if key in entry else None
                for key in ("accuracy_dataset", "parity_dataset", "calibration_dataset")}
    min_top1, min_top5 = _parse_accuracy_floors(where, entry, datasets["accuracy_dataset"])
    description = read_string(f"{where}.description", entry["description"], allow_empty=True) \
        if "description" in entry else ""
    tolerances, generated, accuracy = _parse_thresholds(where, entry, precision_defaults, outputs, min_top1, min_top5)

    int8 = _parse_int8(f"{where}.int8", entry.get("int8", {}), int8_defaults)
    if "int8" in entry and "int8" not in precisions:
        raise ConfigError(f"{where}.int8: set, but the model's precisions {list(precisions)} have no int8, so it "
                          "would never be used; add int8 to precisions or delete the table")
    engine_options = _parse_engine_options(where, entry, engine_defaults, engines, precisions)

    if "int8" in precisions and not datasets["calibration_dataset"]:
        raise ConfigError(f"{where}: precision int8 needs calibration_dataset (data drawn from the model's dataset)")
    static_batch = read_bool(f"{where}.static_batch", entry["static_batch"]) if "static_batch" in entry else False
    if static_batch and "int8" in precisions:
        raise ConfigError(f"{where}.static_batch: true, but precisions has int8, which has no static-batch graph "
                          "(calibration runs the graph on chunks of any size); drop one of them")
    export = _parse_export(f"{where}.export", entry.get("export", {}), batches.batch_sizes, static_batch)
    known = _parse_known_failures(f"{where}.known_failures", entry.get("known_failures", {}), engines, precisions,
                                  datasets["accuracy_dataset"], outputs, datasets["parity_dataset"])
    unsupported = _parse_unsupported(f"{where}.unsupported", entry.get("unsupported", {}), engines, precisions)
    return ModelConfig(
        name=name,
        factory=factory,
        inputs=inputs,
        outputs=outputs,
        batch_sizes=batches.batch_sizes,
        latency_batch_sizes=batches.latency_batch_sizes,
        opt_batch=batches.opt_batch,
        reference_batch=batches.reference_batch,
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
        latency_shapes=batches.latency_shapes,
        export=export,
        static_batch=static_batch,
        unsupported=unsupported,
    )


def _parse_io(where: str, entry: Mapping[str, Any]) -> tuple[dict[str, AxisRange], tuple[InputSpec, ...],
                                                              tuple[str, ...]]:
    """A model's named axes, its inputs (whose shapes name those axes, each at least once) and its outputs."""
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
    return axes, inputs, outputs


@dataclass(frozen=True)
class _Batches:
    """A model's batch sizes and the batches its latency cases, shape profile and reference run at."""

    batch_sizes: tuple[int, ...]
    latency_batch_sizes: tuple[int, ...]
    latency_shapes: tuple[LatencyShape, ...]
    opt_batch: int | None
    reference_batch: int | None


def _parse_batches(where: str, entry: Mapping[str, Any], defaults: Mapping[str, Any], axes: dict[str, AxisRange],
                   inputs: tuple[InputSpec, ...]) -> _Batches:
    """batch_sizes, then the latency cases' batches (or shapes), opt_batch and reference_batch, each within
    batch_sizes' range; a value inherited from [defaults] is blamed on [defaults]."""

    def origin(key: str) -> str:
        """Where a value came from: the model's own key, or [defaults] when it inherited one."""
        return f"{where}.{key}" if key in entry or key not in defaults else f"[defaults].{key} (used by {where})"

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
    reference_batch = read_int(f"{where}.reference_batch", entry["reference_batch"], lo=1) \
        if "reference_batch" in entry else defaults.get("reference_batch")
    if reference_batch is not None and not lo <= reference_batch <= hi:
        raise ConfigError(f"{origin('reference_batch')}: reference_batch {reference_batch} is outside batch_sizes "
                          f"{list(batch_sizes)} (range {lo}..{hi}); the reference runs every feed at that batch")
    return _Batches(batch_sizes, latency_batches, latency_shapes, opt_batch, reference_batch)


def _parse_accuracy_floors(where: str, entry: Mapping[str, Any],
                           accuracy_dataset: str | None) -> tuple[float | None, float | None]:
    """min_top1 and min_top5: a floor of 0 judges nothing, and a floor without an accuracy_dataset is never checked."""
    min_top1 = read_number(f"{where}.min_top1", entry["min_top1"], 0.0, 1.0) if "min_top1" in entry else None
    min_top5 = read_number(f"{where}.min_top5", entry["min_top5"], 0.0, 1.0) if "min_top5" in entry else None
    for key in ("min_top1", "min_top5"):
        if key in entry and entry[key] == 0:
            raise ConfigError(f"{where}.{key}: 0 cannot fail (any model's accuracy is >= 0): a floor that passes any "
                              "model judges nothing; set the accuracy the model must reach")
        if key in entry and accuracy_dataset is None:
            raise ConfigError(f"{where}.{key}: set, but the model has no accuracy_dataset, so it would never "
                              "be checked")
    return min_top1, min_top5


def _parse_thresholds(where: str, entry: Mapping[str, Any], precision_defaults: Mapping[str, dict[str, Any]],
                      outputs: tuple[str, ...], min_top1: float | None, min_top5: float | None) -> tuple[
                          dict[str, Tolerance], dict[str, tuple[str, ...]], dict[str, AccuracyThreshold]]:
    """Each precision's parity tolerance, generated feeds and accuracy threshold: [precision.P] merged with the
    model's own [models.NAME.precision.P]."""
    tables = copy.deepcopy(dict(precision_defaults))
    for prec, table in read_table(f"{where}.precision", entry.get("precision", {})).items():
        check_choice(f"{where}.precision", prec, PRECISIONS)
        _merge_precision(tables[prec], table, f"{where}.precision.{prec}", prec)
    try:
        tolerances = {p: Tolerance(**tables[p]["parity"]) for p in PRECISIONS}
        generated = {p: tuple(tables[p].get("generated", DISTRIBUTIONS)) for p in PRECISIONS}
        accuracy = {p: AccuracyThreshold(min_top1=min_top1, min_top5=min_top5, **tables[p]["accuracy"])
                    for p in PRECISIONS}
    except (TypeError, ValueError) as exc:  # unreachable after the per-key checks; kept as a clear error
        raise ConfigError(f"{where}: bad threshold ({exc})") from exc
    for prec, tol in tolerances.items():
        unknown = [n for n in tol.approximate_outputs if n not in outputs]
        if unknown:
            raise ConfigError(f"{where}: precision {prec}'s parity.approximate_outputs names {unknown}, not among the "
                              f"model's outputs {list(outputs)}")
    return tolerances, generated, accuracy


def _parse_engine_options(where: str, entry: Mapping[str, Any], engine_defaults: Mapping[str, Mapping[str, Any]],
                          engines: tuple[str, ...], precisions: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Each engine's options: [engine_options.ENGINE] updated by the model's own, only for an engine it runs."""
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
    return engine_options


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
