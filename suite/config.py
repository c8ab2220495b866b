"""``suite.toml``: the models, engines, precisions and thresholds under test, declared, not coded.

Why strict: a typo in a nightly gating config must not silently drop a model or loosen a threshold,
so every key is checked for its type and value when the file is read, and every mistake is one
``ConfigError`` that names the key (``[models.digits_cnn].batch_sizes[0]``), the value, and what is
valid; never a traceback from deep inside an engine, and never a setting that is read and ignored.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import math
import os
import re
import sysconfig
import tomllib
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.inputs import DISTRIBUTIONS, INPUT_ROLES, AxisRange, InputSpec
from engines.base import BATCH_AXIS, ONNX_EXPORTERS, PRECISIONS, ShapeProfile
from metrics import AccuracyThreshold, Tolerance
from metrics.parity import NONFINITE, PARITY_METRICS, failed_metric
from suite.timing import PATHS
from suite.verdict import NotJudgedReasonError, check_reasons

ENGINES: tuple[str, ...] = ("torch", "onnxruntime", "inductor", "tensorrt")
CALIBRATION_METHODS: tuple[str, ...] = ("minmax", "entropy", "percentile")
#: What ``[run] requires`` may name besides the engines.
REQUIREMENTS: tuple[str, ...] = ("cuda", *ENGINES)
#: The checks a known failure may cover (``checks``); the default is all of them.
KNOWN_FAILURE_CHECKS: tuple[str, ...] = ("accuracy", "parity")
EXECUTION_PROVIDERS: tuple[str, ...] = ("cpu", "cuda", "tensorrt")
#: ONNX Runtime transformer optimizer model types the onnxruntime backend applies (transformer_fusion).
TRANSFORMER_FUSIONS: tuple[str, ...] = ("bert",)
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
# Keys that existed once: say why they are gone instead of only "unknown".
_REMOVED_KEYS = {
    "min_time_s": "min_time_s was removed: it was never read (a latency case runs [latency].rounds rounds)",
}
_KNOWN_FAILURE_FORM = ('{ reason = "what fails, measured how, since when", outputs = ["logits"], metrics = '
                       '["top1_agreement_pct"], match = "REGEX over the failure message", checks = ["parity"] }')
#: The most one batch of a model's inputs may take at its largest batch (each named axis at its max): a batch
#: size beyond it is a typo (10000000000) that fails every latency case with "Unable to allocate 4.66 TiB".
MAX_BATCH_INPUT_BYTES = 16 * 2**30
# Input dtypes: numeric types torch, ONNX and TensorRT all take (synthetic data is drawn in [low, high]).
INPUT_DTYPES: tuple[str, ...] = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                                 "bool")


class ConfigError(ValueError):
    """A broken suite.toml; the message names the entry and what is valid."""


@dataclass(frozen=True)
class Int8Options:
    """Post-training quantization settings; every field is part of the calibration cache key."""

    method: str = "minmax"
    samples: int = 256
    percentile: float = 99.999
    per_channel: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "samples": self.samples, "percentile": self.percentile,
                "per_channel": self.per_channel}


@dataclass(frozen=True)
class LatencyOptions:
    rounds: int = 30
    warmup_fraction: float = 0.1


#: Failures no known failure may absorb, whatever its pattern: NaN/Inf in an output (metrics.parity,
#: metrics.accuracy) and an output of the wrong shape or dtype (engines.feeds). Each says the engine or the model
#: is broken, not that a figure moved.
NEVER_KNOWN = re.compile(r"\b(?:reference|engine)(?: output| logits)? ha(?:s|ve) [1-9]\d* (?:rows with )?NaN/Inf"
                         r"|\bOutput(?:Shape|Dtype)Error\b")
#: Messages of a broken engine in any cell: a known failure's ``match`` that finds one of them would hide such a
#: failure (``.`` matches them all), so the config refuses it.
KNOWN_FAILURE_CANARIES: tuple[str, ...] = (
    "",
    "EngineBuildError",
    "engine output has 3 NaN/Inf values",
    "reference logits have 3 rows with NaN/Inf (counted wrong)",
    "OutputShapeError: output 'out' has shape (1, 5), expected (4, 5)",
    "OutputDtypeError: output 'out' is float16, the reference's is float32",
)
#: The figures an accuracy check judges, named as in metrics.accuracy.AccuracyVerdict: ``top1`` (its floor, its
#: drop and its ratio against the reference) and ``top5`` (its floor and its drop).
ACCURACY_METRICS: tuple[str, ...] = ("top1", "top5")
#: The figures a known failure may name in ``metrics``, per kind of check.
KNOWN_FAILURE_METRICS: dict[str, tuple[str, ...]] = {"accuracy": ACCURACY_METRICS, "parity": PARITY_METRICS}
#: How each entry of ``AccuracyVerdict.failures`` starts (metrics.accuracy.judge_accuracy writes them).
_ACCURACY_FAILURE_STARTS: tuple[tuple[str, str], ...] = (
    ("engine logits have ", NONFINITE), ("reference logits have ", NONFINITE), ("top-1 ", "top1"), ("top-5 ", "top5"))
#: A parity failure's headline in a test's message (metrics.parity.ParityReport.explain's first line).
_PARITY_HEADLINE = re.compile(r"output '([^']*)' \([0-9, ]*\): (.+)$", re.M)


def accuracy_failed_metric(failure: str) -> str | None:
    """The figure one entry of ``AccuracyVerdict.failures`` is about (top1, top5 or NONFINITE); None for text
    judge_accuracy does not write."""
    return next((metric for start, metric in _ACCURACY_FAILURE_STARTS if failure.startswith(start)), None)


#: What failed in a check, figure by figure: (output, the figure's name, or None where it cannot be named).
FailedFigures = tuple[tuple[str, "str | None"], ...]


def parity_failures_in(message: str) -> FailedFigures:
    """The failed figures a parity message states, read from its headlines (``output 'x' (64, 5): cosine ...;
    isclose ...``). Only for a guess where no records are at hand (whether to localize a failure); the verdict
    reads the figures the test recorded (suite/plugin.py)."""
    return tuple((name, failed_metric(f)) for name, text in _PARITY_HEADLINE.findall(message) for f in text.split("; "))


@dataclass(frozen=True)
class KnownFailure:
    """A cell expected to fail in a stated way: named figures (``metrics``) failing on named ``outputs``, in one
    of ``checks``, with a message that matches ``match`` (a regular expression, searched). Only an assertion of
    failed figures, every one of them declared, is the known one; any other failure of the cell counts: another
    output or figure, an exception (a shape mismatch's ValueError, an engine that does not build), a NaN/Inf or an
    output of the wrong shape or dtype (``NEVER_KNOWN``), whatever ``match`` says."""

    reason: str
    match: str
    checks: tuple[str, ...] = KNOWN_FAILURE_CHECKS
    outputs: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()

    def covers(self, check: str, message: str, failed: FailedFigures | None = None,
               exception: str = "AssertionError") -> bool:
        """Is this failure, from this kind of check, the one declared? ``failed``: the figures that failed (by
        default read from a parity message); ``exception``: the name of the exception's type."""
        return self.refusal(check, message, failed, exception) is None

    def refusal(self, check: str, message: str, failed: FailedFigures | None = None,
                exception: str = "AssertionError") -> str | None:
        """Why this failure is not the known one (for its report), or None where it is."""
        if check not in self.checks:
            return f"the entry covers {', '.join(self.checks)}, not {check}"
        if exception != "AssertionError":
            return (f"it is an exception ({exception}), not a check's failed figures: a known failure absorbs only the "
                    "figures it names")
        never = NEVER_KNOWN.search(message)
        if failed is None:
            failed = parity_failures_in(message) if check == "parity" else ()
        if never is not None or any(metric == NONFINITE for _, metric in failed):
            what = never.group(0) if never is not None else "NaN/Inf"
            return f"it says {what!r}, which no known failure may absorb (a broken engine or model)"
        if not failed:
            return "it states no failed figure of an output, so it is not the declared failure"
        unnamed = sorted({output for output, metric in failed if metric is None})
        if unnamed:
            return f"it has a failure of output {unnamed[0]!r} that names no figure, which no known failure may absorb"
        other: dict[str, list[str]] = {}
        for output, metric in failed:
            if output not in self.outputs or metric not in self.metrics:
                other.setdefault(output, []).append(str(metric))
        if other:
            listed = "; ".join(f"output {o!r}: {', '.join(dict.fromkeys(ms))}" for o, ms in other.items())
            return (f"it has failed figures the entry does not declare ({listed}; declared: outputs "
                    f"{list(self.outputs)}, metrics {list(self.metrics)})")
        if re.search(self.match, message) is None:
            return f"it does not match /{self.match}/"
        return None

    def describe(self) -> str:
        """What the entry declares, for a report."""
        return (f"{', '.join(self.metrics)} on output(s) {', '.join(self.outputs)} in {', '.join(self.checks)}, "
                f"matching /{self.match}/")


@dataclass(frozen=True)
class LatencyShape:
    """One latency case's input shape: a batch size and, for a model with named axes, a length per axis.

    ``id`` is the stable case-name part: ``bs32`` for a model with a batch axis only (the historical
    form), ``bs32-seq128`` with named axes, in the order ``[models.NAME.axes]`` declares them.
    """

    batch: int
    dims: tuple[tuple[str, int], ...] = ()

    @property
    def id(self) -> str:
        return "-".join([f"bs{self.batch}", *(f"{name}{value}" for name, value in self.dims)])

    def dims_dict(self) -> dict[str, int]:
        """The lengths as ``synthetic_feed(..., dims=)`` and ``tile_to_batch(..., dims=)`` take them."""
        return dict(self.dims)


@dataclass(frozen=True)
class ModelConfig:
    name: str
    factory: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    latency_batch_sizes: tuple[int, ...]
    opt_batch: int | None
    precisions: tuple[str, ...]
    engines: tuple[str, ...]
    accuracy_dataset: str | None
    parity_dataset: str | None
    calibration_dataset: str | None
    min_top1: float | None
    min_top5: float | None
    parity_samples: int
    tolerances: Mapping[str, Tolerance]
    accuracy_thresholds: Mapping[str, AccuracyThreshold]
    generated: Mapping[str, tuple[str, ...]]
    int8: Int8Options
    engine_options: Mapping[str, Mapping[str, Any]]
    description: str = ""
    known_failures: Mapping[str, KnownFailure] = field(default_factory=dict)
    #: whether parity_samples was written (model or [defaults]) rather than the built-in 64: a data set with
    #: fewer rows than written is an error; the default takes what the data set has.
    parity_samples_set: bool = False
    #: [models.NAME.axes]: each named axis's range, in declared order (empty: a batch axis only).
    axes: tuple[tuple[str, AxisRange], ...] = ()
    #: The shapes tests/latency times: latency_shapes, else each latency batch size at every axis's opt.
    latency_shapes: tuple[LatencyShape, ...] = ()
    #: [models.NAME.export]: the export options set (opset, exporter, sample_batch); the rest are the defaults.
    export: Mapping[str, Any] = field(default_factory=dict)
    #: static_batch: ONNX Runtime and TensorRT build one engine per batch size, each with the batch axis fixed.
    static_batch: bool = False
    #: [models.NAME.unsupported]: what an engine cannot do by design for this model, declared with its reason:
    #: "ENGINE-PRECISION" (the whole cell) or "ENGINE-PRECISION-PATH" (one latency path) -> reason. Those checks end
    #: not judged (unsupported) before anything runs; nothing else becomes "unsupported" (issue 22).
    unsupported: Mapping[str, str] = field(default_factory=dict)

    def declared_unsupported(self, engine: str, precision: str, path: str | None = None) -> str | None:
        """The declared reason this cell (or its latency ``path``) cannot run, with where it is declared; None."""
        for key in (f"{engine}-{precision}", *((f"{engine}-{precision}-{path}",) if path else ())):
            if key in self.unsupported:
                return f"{self.unsupported[key]} (declared in [models.{self.name}.unsupported] {key!r})"
        return None

    @property
    def profile(self) -> ShapeProfile:
        return ShapeProfile.from_batch_sizes(self.batch_sizes, self.opt_batch, self.axes, self.static_batch)

    @property
    def attention_mask(self) -> InputSpec | None:
        """The input whose role is attention_mask (a sentence-embedding model's), or None."""
        return next((i for i in self.inputs if i.role == "attention_mask"), None)

    def tolerance(self, precision: str) -> Tolerance:
        return self.tolerances[precision]

    def accuracy_threshold(self, precision: str) -> AccuracyThreshold:
        return self.accuracy_thresholds[precision]


@dataclass(frozen=True)
class SuiteConfig:
    path: Path
    models: Mapping[str, ModelConfig]
    latency: LatencyOptions = field(default_factory=LatencyOptions)
    #: [run] requires: "cuda" and engine names this config cannot do without.
    requires: tuple[str, ...] = ()
    #: [run] accept_not_judged: reason codes (suite.verdict.REASONS) a green run may carry.
    accept_not_judged: tuple[str, ...] = ()

    def select(self, models: list[str] | None, engines: list[str] | None,
               precisions: list[str] | None) -> SuiteConfig:
        """Narrow to a subset; unknown names are errors listing what is valid."""
        _check_names("--models", models, list(self.models))
        _check_names("--engines", engines, list(ENGINES))
        _check_names("--precisions", precisions, list(PRECISIONS))
        chosen = {}
        for name, model in self.models.items():
            if models and name not in models:
                continue
            eng = tuple(e for e in model.engines if not engines or e in engines)
            prec = tuple(p for p in model.precisions if not precisions or p in precisions)
            chosen[name] = dataclasses.replace(model, engines=eng, precisions=prec)
        for option, given, attr in (("--engines", engines, "engines"), ("--precisions", precisions, "precisions")):
            if given and not any(getattr(m, attr) for m in chosen.values()):
                listed = "; ".join(f"{n}: {', '.join(getattr(self.models[n], attr))}" for n in chosen)
                raise ConfigError(f"{option} {','.join(given)}: no selected model runs any of them, so nothing would "
                                  f"be tested (the models' {attr}: {listed})")
        return dataclasses.replace(self, models=chosen)


def _check_names(option: str, given: list[str] | None, valid: list[str]) -> None:
    unknown = [g for g in given or [] if g not in valid]
    if unknown:
        close = [m for g in unknown for m in difflib.get_close_matches(g, valid, n=1, cutoff=0.8)]
        hint = f" (did you mean {', '.join(dict.fromkeys(close))}?)" if close else ""
        raise ConfigError(f"{option}: unknown {', '.join(map(repr, unknown))}{hint}; valid: {', '.join(valid)}")


def resolve(ref: str, what: str) -> Callable[..., Any]:
    """Import ``package.module:callable``; errors say which config entry pointed there."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what}: {ref!r} is not of the form 'package.module:callable'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import module {module_name!r} ({exc})") from exc
    except SyntaxError as exc:  # the module's own code (or a module it imports) does not parse
        at = f"{short_path(exc.filename)}:{exc.lineno}" if exc.filename else f"line {exc.lineno}"
        raise ConfigError(f"{what}: cannot import module {module_name!r}: {type(exc).__name__} at {at}: "
                          f"{exc.msg}") from exc
    except Exception as exc:  # raised by the module's top-level code while it was imported
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        where = where_in_user_code(exc)
        raise ConfigError(f"{what}: cannot import module {module_name!r}: importing it raised {type(exc).__name__}"
                          + (f": {lines[-1]}" if lines else "") + (f" ({where})" if where else "")) from exc
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
        raise ConfigError(f"{what}: {module_name} has no {attr!r}; callables there: {', '.join(public)}") from exc
    if not callable(obj):
        raise ConfigError(f"{what}: {ref!r} is not callable")
    return obj  # type: ignore[no-any-return]


_SUITE_ROOT = Path(__file__).resolve().parent.parent
#: Not the user's code: the suite's own packages, the standard library and installed packages (torch...).
_NOT_USER_CODE = tuple(sorted({os.path.realpath(p) + os.sep for p in (
    str(_SUITE_ROOT / "suite"), str(_SUITE_ROOT / "engines"),
    *(sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib"))) if p}))


def where_in_user_code(exc: BaseException) -> str | None:
    """``at FILE:LINE in FUNCTION`` of the innermost frame of ``exc``'s traceback in the user's own code (not the
    suite's, the standard library's or an installed package's): the line of theirs that led to the error."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename or frame.filename.startswith("<"):
            continue
        path = os.path.realpath(frame.filename)
        if not path.startswith(_NOT_USER_CODE):
            return f"at {short_path(path)}:{frame.lineno} in {frame.name}"
    return None


def short_path(path: str) -> str:
    """A file's name; with its directory's for a package's ``__init__.py``, which says nothing alone."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.name == "__init__.py" else p.name


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


# =========================================================================== command-line options


def parse_batch_sizes_option(text: str, models: Iterable[ModelConfig] | Mapping[str, ModelConfig],
                             option: str = "--latency-batch-sizes") -> tuple[int, ...]:
    """``--latency-batch-sizes=1,8``: positive integers, each inside at least one selected model's
    batch_sizes range, so that an option never silently selects nothing."""
    chosen = list(models.values()) if isinstance(models, Mapping) else list(models)
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"{option}: give at least one batch size, e.g. {option}=1,8")
    sizes: list[int] = []
    for part in parts:
        try:
            batch = int(part)
        except ValueError:
            raise ConfigError(f"{option}: {part!r} is not an integer batch size") from None
        if batch < 1:
            raise ConfigError(f"{option}: batch size {batch} must be >= 1")
        if batch not in sizes:
            sizes.append(batch)
    for batch in sizes:
        if not any(min(m.batch_sizes) <= batch <= max(m.batch_sizes) for m in chosen):
            ranges = ", ".join(f"{m.name} {min(m.batch_sizes)}..{max(m.batch_sizes)}" for m in chosen)
            raise ConfigError(f"{option}: batch size {batch} is outside the batch_sizes range of every selected "
                              f"model ({ranges or 'no model selected'}), so no latency case would run")
    return tuple(sizes)


def check_rounds_option(value: Any, option: str = "--latency-rounds") -> int:
    """``--latency-rounds``: an integer >= 2 (one round has no spread); 0 must not mean 'the default'."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ConfigError(f"{option}: {value!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{option}: expected an integer >= 2, got {value!r}")
    if value < 2:
        raise ConfigError(f"{option}: {value} rounds; a latency case needs at least 2 timed rounds")
    return value


# =========================================================================== parsing


def parse_config(raw: Mapping[str, Any], path: Path = Path("<memory>")) -> SuiteConfig:
    _check_keys(str(path), raw, _TOP_KEYS)
    defaults = _parse_defaults(_table("[defaults]", raw.get("defaults", {})))
    precision_defaults = _default_precision_tables()
    for prec, table in _table("[precision]", raw.get("precision", {})).items():
        _check_choice("[precision]", prec, PRECISIONS)
        _merge_precision(precision_defaults[prec], table, f"[precision.{prec}]")
    int8_defaults = _parse_int8("[int8]", raw.get("int8", {}))
    latency = _parse_latency(raw.get("latency", {}))
    engine_defaults = _table("[engine_options]", raw.get("engine_options", {}))
    # engine_options are passed to the backend as they are, and keyed into its cache entries.
    for eng, opts in engine_defaults.items():
        _check_choice("[engine_options]", eng, ENGINES)
        _check_engine_options(f"[engine_options.{eng}]", eng, opts)
    models_raw = _table("[models]", raw.get("models", {}))
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
    _check_keys("[defaults]", table, _DEFAULT_KEYS)
    out: dict[str, Any] = {}
    for key in ("batch_sizes", "latency_batch_sizes"):
        if key in table:
            out[key] = _batch_list(f"[defaults].{key}", table[key])
    if "opt_batch" in table:
        out["opt_batch"] = _int("[defaults].opt_batch", table["opt_batch"], lo=1)
    if "precisions" in table:
        out["precisions"] = _choice_list("[defaults].precisions", table["precisions"], PRECISIONS)
    if "engines" in table:
        out["engines"] = _choice_list("[defaults].engines", table["engines"], ENGINES)
    if "parity_samples" in table:
        out["parity_samples"] = _int("[defaults].parity_samples", table["parity_samples"], lo=1)
    return out


def _parse_latency(table: Any) -> LatencyOptions:
    table = _table("[latency]", table)
    _check_keys("[latency]", table, _LATENCY_KEYS)
    out = LatencyOptions()
    if "rounds" in table:
        out = dataclasses.replace(out, rounds=_int("[latency].rounds", table["rounds"], lo=2))
    if "warmup_fraction" in table:
        out = dataclasses.replace(out, warmup_fraction=_number("[latency].warmup_fraction", table["warmup_fraction"],
                                                               0.0, 1.0, hi_open=True))
    return out


def _parse_run(table: Any, models: Mapping[str, ModelConfig]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    table = _table("[run]", table)
    _check_keys("[run]", table, _RUN_KEYS)
    requires = _choice_list("[run].requires", table.get("requires", []), REQUIREMENTS, allow_empty=True)
    used = {e for m in models.values() for e in m.engines}
    for i, name in enumerate(requires):
        if name != "cuda" and name not in used:
            raise ConfigError(f"[run].requires[{i}]: engine {name!r} is required but no model lists it in "
                              f"engines, so the requirement could never be checked")
    where = "[run].accept_not_judged"
    reasons = _list(where, table.get("accept_not_judged", []), allow_empty=True)
    for i, reason in enumerate(reasons):
        _string(f"{where}[{i}]", reason)
    named = [r.strip() for r in reasons]
    if "none" in named and len(named) > 1:
        raise ConfigError(f"{where} = {reasons!r}: 'none' means no reason and cannot be combined with others")
    try:
        accept = check_reasons(reasons, where)
    except NotJudgedReasonError as exc:
        raise ConfigError(str(exc)) from None
    return requires, accept


def _default_precision_tables() -> dict[str, dict[str, Any]]:
    """Defaults per precision, documented in the README: loose enough for honest reduced precision,
    tight enough that a broken engine fails."""
    return {
        "fp32": {"parity": {"rtol": 1e-3, "atol": 1e-5, "min_isclose_pct": 99.0, "min_cosine": 0.99999,
                            "min_top1_agreement_pct": 99.0},
                 "accuracy": {"max_top1_drop": 0.005, "max_top5_drop": 0.005}},
        "tf32": {"parity": {"rtol": 1e-2, "atol": 1e-3, "min_isclose_pct": 95.0, "min_cosine": 0.9999,
                            "min_top1_agreement_pct": 98.0},
                 "accuracy": {"max_top1_drop": 0.01, "max_top5_drop": 0.01}},
        # Measured on CPU: EfficientNet-Lite0 fp16 (torch and ONNX Runtime) has cosine 0.99996-0.99997,
        # MAE 6e-3 to 1e-2 on logits of magnitude ~10 and isclose 68-85% at (1e-2, 1e-3..1e-2): fp16's
        # own rounding through 50 layers. Cosine and top-1 agreement carry the gate; isclose guards
        # against gross breakage (a broken engine lands far below 75%).
        "fp16": {"parity": {"rtol": 1e-2, "atol": 1e-2, "min_isclose_pct": 75.0, "min_cosine": 0.999,
                            "min_top1_agreement_pct": 95.0},
                 "accuracy": {"max_top1_drop": 0.01, "max_top5_drop": 0.01}},
        "bf16": {"parity": {"rtol": 5e-2, "atol": 5e-2, "min_isclose_pct": 60.0, "min_cosine": 0.995,
                            "min_top1_agreement_pct": 95.0},
                 "accuracy": {"max_top1_drop": 0.02, "max_top5_drop": 0.02}},
        # int8 moves most logits by more than any useful elementwise tolerance; isclose % is reported,
        # and the direction (cosine) and the decision (top-1 agreement) are what is gated.
        "int8": {"parity": {"rtol": 1e-1, "atol": 5e-2, "min_isclose_pct": 0.0, "min_cosine": 0.98,
                            "min_top1_agreement_pct": 90.0},
                 "accuracy": {"min_top1_ratio": 0.99},
                 # Saturated, near-binary inputs drive activations past the calibrated ranges, where
                 # int8 clips by design (cosine 0.956 on digits_cnn); they are left out of int8's
                 # generated-input parity. [precision.int8] generated = [...] puts them back.
                 "generated": ["uniform", "normal", "sparse"]},
    }


def _merge_precision(target: dict[str, Any], table: Any, where: str) -> None:
    table = _table(where, table)
    _check_keys(where, table, _PRECISION_KEYS)
    parity = _table(f"{where}.parity", table.get("parity", {}))
    accuracy = _table(f"{where}.accuracy", table.get("accuracy", {}))
    _check_keys(f"{where}.parity", parity, _PARITY_KEYS)
    _check_keys(f"{where}.accuracy", accuracy, _ACCURACY_KEYS)
    # Each threshold is checked alone by the class that enforces it, so its error names this key.
    for key, value in parity.items():
        _threshold(f"{where}.parity.{key}", Tolerance, key, value)
    for key, value in accuracy.items():
        _threshold(f"{where}.accuracy.{key}", AccuracyThreshold, key, value)
    if "generated" in table:
        target["generated"] = list(_choice_list(f"{where}.generated", table["generated"], DISTRIBUTIONS))
    target["parity"].update(parity)
    target["accuracy"].update(accuracy)


def _threshold(where: str, cls: Any, key: str, value: Any) -> None:
    _number(where, value)
    try:
        cls(**{key: value})
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _parse_int8(where: str, table: Any, base: Int8Options | None = None) -> Int8Options:
    table = _table(where, table)
    _check_keys(where, table, _INT8_KEYS)
    out = base or Int8Options()
    if "method" in table:
        _check_choice(f"{where}.method", _string(f"{where}.method", table["method"]), CALIBRATION_METHODS)
        out = dataclasses.replace(out, method=table["method"])
    if "samples" in table:
        out = dataclasses.replace(out, samples=_int(f"{where}.samples", table["samples"], lo=1))
    if "percentile" in table:
        out = dataclasses.replace(out, percentile=_number(f"{where}.percentile", table["percentile"], 0.0, 100.0,
                                                          lo_open=True))
    if "per_channel" in table:
        out = dataclasses.replace(out, per_channel=_bool(f"{where}.per_channel", table["per_channel"]))
    return out


def _check_engine_options(where: str, engine: str, opts: Any) -> None:
    """Types and values of what each backend reads, checked here so a backend never sees a bad one."""
    opts = _table(where, opts)
    _check_keys(where, opts, _ENGINE_OPTION_KEYS[engine])
    for key, value in opts.items():
        at = f"{where}.{key}"
        if key == "channels_last":
            _bool(at, value)
        elif key == "execution_provider":
            _check_choice(at, _string(at, value), EXECUTION_PROVIDERS)
        elif key == "intra_op_threads":
            _int(at, value, lo=1)
        elif key == "transformer_fusion":
            _check_choice(at, _string(at, value), TRANSFORMER_FUSIONS)
        elif key == "precisions":
            _choice_list(at, value, PRECISIONS)
        elif key == "cxx":
            _string(at, value)
        elif key == "workspace_mb":
            _int(at, value, lo=1)
        elif key == "builder_optimization_level":
            _int(at, value, lo=0, hi=5)


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
    entry = _table(where, entry)
    _check_keys(where, entry, _MODEL_KEYS)
    for required in ("factory", "inputs", "outputs"):
        if required not in entry:
            raise ConfigError(f"{where}: missing required key {required!r}")

    def origin(key: str) -> str:
        """Where a value came from: the model's own key, or [defaults] when it inherited one."""
        return f"{where}.{key}" if key in entry or key not in defaults else f"[defaults].{key} (used by {where})"

    factory = _ref(f"{where}.factory", entry["factory"])
    axes = _parse_axes(f"{where}.axes", entry.get("axes", {}))
    inputs_raw = _list(f"{where}.inputs", entry["inputs"])
    inputs = tuple(_parse_input(f"{where}.inputs[{i}]", spec, axes, f"{where}.axes")
                   for i, spec in enumerate(inputs_raw))
    names = [i.name for i in inputs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.inputs: duplicate input names {names}")
    unused = [a for a in axes if not any(a in i.axis_names for i in inputs)]
    if unused:
        raise ConfigError(f"{where}.axes: {unused} named by no input's shape; an axis no input has is never "
                          "checked (name it in a shape, e.g. shape = [\"seq\"], or delete it)")
    outputs = tuple(_string(f"{where}.outputs[{i}]", o) for i, o in enumerate(_list(f"{where}.outputs",
                                                                                     entry["outputs"])))
    if len(set(outputs)) != len(outputs):
        raise ConfigError(f"{where}.outputs: duplicate output names {list(outputs)}")

    batch_sizes = (_batch_list(f"{where}.batch_sizes", entry["batch_sizes"]) if "batch_sizes" in entry
                   else defaults.get("batch_sizes", (1, 8, 32)))
    lo, hi = min(batch_sizes), max(batch_sizes)
    if "latency_batch_sizes" in entry and "latency_shapes" in entry:
        raise ConfigError(f"{where}: set latency_shapes or latency_batch_sizes, not both (latency_shapes names the "
                          "batch of each case)")
    if "latency_batch_sizes" in entry:
        latency_batches = _batch_list(f"{where}.latency_batch_sizes", entry["latency_batch_sizes"])
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
    opt_batch = _int(f"{where}.opt_batch", entry["opt_batch"], lo=1) if "opt_batch" in entry \
        else defaults.get("opt_batch")
    if opt_batch is not None and not lo <= opt_batch <= hi:
        raise ConfigError(f"{origin('opt_batch')}: opt_batch {opt_batch} is outside batch_sizes "
                          f"{list(batch_sizes)} (range {lo}..{hi}); the shape profile needs min <= opt <= max")
    precisions = (_choice_list(f"{where}.precisions", entry["precisions"], PRECISIONS) if "precisions" in entry
                  else defaults.get("precisions", ("fp32",)))
    engines = (_choice_list(f"{where}.engines", entry["engines"], ENGINES) if "engines" in entry
               else defaults.get("engines", ("torch", "onnxruntime")))
    parity_samples = (_int(f"{where}.parity_samples", entry["parity_samples"], lo=1) if "parity_samples" in entry
                      else defaults.get("parity_samples", 64))

    datasets = {key: _ref(f"{where}.{key}", entry[key]) if key in entry else None
                for key in ("accuracy_dataset", "parity_dataset", "calibration_dataset")}
    min_top1 = _number(f"{where}.min_top1", entry["min_top1"], 0.0, 1.0) if "min_top1" in entry else None
    min_top5 = _number(f"{where}.min_top5", entry["min_top5"], 0.0, 1.0) if "min_top5" in entry else None
    for key in ("min_top1", "min_top5"):
        if key in entry and datasets["accuracy_dataset"] is None:
            raise ConfigError(f"{where}.{key}: set, but the model has no accuracy_dataset, so it would never "
                              "be checked")
    description = _string(f"{where}.description", entry["description"], allow_empty=True) \
        if "description" in entry else ""

    tables = copy.deepcopy(dict(precision_defaults))
    for prec, table in _table(f"{where}.precision", entry.get("precision", {})).items():
        _check_choice(f"{where}.precision", prec, PRECISIONS)
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
    for eng, opts in _table(f"{where}.engine_options", entry.get("engine_options", {})).items():
        _check_choice(f"{where}.engine_options", eng, ENGINES)
        _check_engine_options(f"{where}.engine_options.{eng}", eng, opts)
        if eng not in engines:
            raise ConfigError(f"{where}.engine_options.{eng}: set, but the model's engines {list(engines)} have no "
                              f"{eng}, so it would never be used; add {eng} to engines or delete the table")
        engine_options[eng].update(opts)
    if "inductor" in engines:
        _check_inductor_precisions(where, entry, engine_options["inductor"], precisions)

    if "int8" in precisions and not datasets["calibration_dataset"]:
        raise ConfigError(f"{where}: precision int8 needs calibration_dataset (data drawn from the model's dataset)")
    static_batch = _bool(f"{where}.static_batch", entry["static_batch"]) if "static_batch" in entry else False
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
    table = _table(where, table)
    _check_keys(where, table, _EXPORT_KEYS)
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
        exporter = _string(f"{where}.exporter", table["exporter"])
        _check_choice(f"{where}.exporter", exporter, ONNX_EXPORTERS)
        out["exporter"] = exporter
    if "sample_batch" in table:
        batch = _int(f"{where}.sample_batch", table["sample_batch"], lo=1, what="a batch size")
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
    for cell_key, spec in _table(where, table).items():
        at = f"{where}.{cell_key}"
        engine, _, precision = cell_key.partition("-")
        _check_choice(f"{at} (engine)", engine, ENGINES)
        _check_choice(f"{at} (precision)", precision, PRECISIONS)
        if engine not in engines or precision not in precisions:
            raise ConfigError(f"{at}: the model does not run {cell_key} (engines {list(engines)}, precisions "
                              f"{list(precisions)}); the entry would never apply")
        if isinstance(spec, str):
            raise ConfigError(f"{at} = {spec!r}: a plain reason is the old form, which hid any failure of the "
                              f"cell; write {cell_key} = {_KNOWN_FAILURE_FORM}")
        spec = _table(at, spec)
        _check_keys(at, spec, _KNOWN_FAILURE_KEYS)
        for required in ("reason", "match"):
            if required not in spec:
                raise ConfigError(f"{at}: missing required key {required!r}; the form is {_KNOWN_FAILURE_FORM}")
        missing = [k for k in ("outputs", "metrics") if k not in spec]
        if missing:
            raise ConfigError(f"{at}: missing {' and '.join(map(repr, missing))}: a known failure names the outputs "
                              "and the figures that fail on them, and absorbs no other failure of the cell (its match "
                              f"alone once absorbed another output's garbage); add outputs = [one or more of "
                              f"{list(outputs)}], metrics = [one or more of {', '.join(_metric_names())}]")
        reason = _string(f"{at}.reason", spec["reason"])
        pattern = _string(f"{at}.match", spec["match"])
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
        checks = (_choice_list(f"{at}.checks", spec["checks"], KNOWN_FAILURE_CHECKS) if "checks" in spec
                  else KNOWN_FAILURE_CHECKS)
        if "checks" in spec and "accuracy" in checks and accuracy_dataset is None:
            raise ConfigError(f"{at}.checks: 'accuracy' listed, but the model has no accuracy_dataset, so it has "
                              "no accuracy check")
        declared_outputs = _choice_list(f"{at}.outputs", spec["outputs"], outputs)
        metrics = _choice_list(f"{at}.metrics", spec["metrics"], _metric_names())
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
    for key, reason in _table(where, table).items():
        at = f"{where}.{key}"
        engine, precision, *rest = str(key).split("-")
        _check_choice(f"{at} (engine)", engine, ENGINES)
        _check_choice(f"{at} (precision)", precision, PRECISIONS)
        if len(rest) > 1 or (rest and rest[0] not in PATHS):
            raise ConfigError(f"{at}: write ENGINE-PRECISION or ENGINE-PRECISION-PATH, PATH one of "
                              f"{', '.join(PATHS)}")
        if engine not in engines or precision not in precisions:
            raise ConfigError(f"{at}: the model does not run {engine}-{precision} (engines {list(engines)}, "
                              f"precisions {list(precisions)}); the entry would never apply")
        text = _string(at, reason).strip()
        if len(text) < 10:
            raise ConfigError(f"{at} = {reason!r}: say why the engine cannot do this by design (what was seen, "
                              "where, since when)")
        out[str(key)] = text
    return out


def _parse_axes(where: str, table: Any) -> dict[str, AxisRange]:
    """[models.NAME.axes]: ``seq = { min = 16, opt = 128, max = 256 }``, one per named axis (opt: default max)."""
    out: dict[str, AxisRange] = {}
    for name, spec in _table(where, table).items():
        at = f"{where}.{name}"
        if not _AXIS_NAME.match(name) or name == BATCH_AXIS:
            raise ConfigError(f"{at}: {name!r} is not an axis name: a letter, then letters, digits or _, and not "
                              f"{BATCH_AXIS!r} (the batch axis is batch_sizes)")
        spec = _table(at, spec)
        _check_keys(at, spec, _AXIS_KEYS)
        for required in ("min", "max"):
            if required not in spec:
                raise ConfigError(f"{at}: missing required key {required!r}; the form is "
                                  f"{name} = {{ min = 16, opt = 128, max = 256 }}")
        lo = _int(f"{at}.min", spec["min"], lo=1, what="a length")
        hi = _int(f"{at}.max", spec["max"], lo=1, what="a length")
        opt = _int(f"{at}.opt", spec["opt"], lo=1, what="a length") if "opt" in spec else hi
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
    for i, item in enumerate(_list(where, value)):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: expected a table like {form}, got {item!r}")
        _check_keys(at, item, {BATCH_AXIS, *axes})
        missing = [k for k in (BATCH_AXIS, *axes) if k not in item]
        if missing:
            raise ConfigError(f"{at}: missing {', '.join(missing)}; each latency shape names the batch and every "
                              f"axis: {form}")
        batch = _int(f"{at}.batch", item[BATCH_AXIS], lo=1, what="a batch size")
        if not batches[0] <= batch <= batches[1]:
            raise ConfigError(f"{at}.batch: {batch} is outside batch_sizes' range {batches[0]}..{batches[1]}")
        dims = []
        for name, r in axes.items():
            length = _int(f"{at}.{name}", item[name], lo=1, what="a length")
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
    _check_keys(where, spec, _INPUT_KEYS)
    if "name" not in spec or "shape" not in spec:
        raise ConfigError(f"{where}: needs name and shape (without the batch axis)")
    name = _string(f"{where}.name", spec["name"])
    shape = tuple(_dimension(f"{where}.shape[{j}]", d, axes, axes_where)
                  for j, d in enumerate(_list(f"{where}.shape", spec["shape"], allow_empty=True)))
    dtype_name = _string(f"{where}.dtype", spec.get("dtype", "float32"))
    try:
        dtype = np.dtype(dtype_name)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.name not in INPUT_DTYPES:
        raise ConfigError(f"{where}.dtype: unknown dtype {dtype_name!r}; valid: {', '.join(INPUT_DTYPES)}")
    low = _number(f"{where}.low", spec.get("low", 0.0))
    high = _number(f"{where}.high", spec.get("high", 1.0))
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
    role = _string(f"{where}.role", spec.get("role", "values"))
    _check_choice(f"{where}.role", role, INPUT_ROLES)
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


# =========================================================================== typed values


def _check_keys(where: str, table: Any, valid: set[str]) -> None:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - valid)
    removed = [_REMOVED_KEYS[k] for k in unknown if k in _REMOVED_KEYS]
    if removed:
        raise ConfigError(f"{where}: {'; '.join(removed)}; delete it")
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")


def _check_choice(where: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{where}: unknown {value!r}; valid: {', '.join(valid)}")


def _table(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a table, got {value!r}")
    return value


def _list(where: str, value: Any, allow_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list, got {value!r}")
    if not value and not allow_empty:
        raise ConfigError(f"{where}: must not be empty, got []")
    return value


def _string(where: str, value: Any, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    return value


def _int(where: str, value: Any, lo: int | None = None, hi: int | None = None, what: str = "an integer") -> int:
    """TOML integers only: a bool, float or string where a count belongs is a mistake, not a 1."""
    bounds = (f" in [{lo}, {hi}]" if hi is not None else f" >= {lo}") if lo is not None else ""
    if isinstance(value, bool) or not isinstance(value, int) or (lo is not None and value < lo) \
            or (hi is not None and value > hi):
        kind = what if what == "an integer" else f"{what} (an integer)"
        raise ConfigError(f"{where}: expected {kind}{bounds}, got {value!r}")
    return value


def _number(where: str, value: Any, lo: float | None = None, hi: float | None = None,
            lo_open: bool = False, hi_open: bool = False) -> float:
    """A finite int or float (not a bool), optionally within a range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (lo is not None and (value <= lo if lo_open else value < lo)) \
            or (hi is not None and (value >= hi if hi_open else value > hi)):
        bounds = ""
        if lo is not None and hi is not None:
            bounds = f" in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ConfigError(f"{where}: expected a finite number{bounds}, got {value!r}")
    return value


def _batch_list(where: str, value: Any) -> tuple[int, ...]:
    sizes = tuple(_int(f"{where}[{i}]", b, lo=1, what="a batch size") for i, b in enumerate(_list(where, value)))
    repeated = sorted({b for b in sizes if sizes.count(b) > 1})
    if repeated:
        raise ConfigError(f"{where}: {repeated} listed more than once in {list(sizes)}")
    return sizes


def _choice_list(where: str, value: Any, valid: tuple[str, ...], allow_empty: bool = False) -> tuple[str, ...]:
    items = _list(where, value, allow_empty)
    for i, item in enumerate(items):
        _check_choice(f"{where}[{i}]", item, valid)
    repeated = sorted({v for v in items if items.count(v) > 1})
    if repeated:
        raise ConfigError(f"{where}: {', '.join(map(repr, repeated))} listed more than once")
    return tuple(items)


def _ref(where: str, value: Any) -> str:
    """A ``package.module:callable`` reference; imported later (preflight), its form is checked now."""
    ref = _string(where, value)
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ConfigError(f"{where}: {ref!r} is not of the form 'package.module:callable'")
    return ref
