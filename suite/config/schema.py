"""What a checked config is: the dataclasses the parser returns, and the names their fields may take.

Why a module of its own: the rest of the suite (session, preflight, plugin) reads these objects and never the
TOML; they hold no parsing, so a reader of ``ModelConfig`` need not wade through how each key is checked.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.inputs import AxisRange, InputSpec
from engines.base import PRECISIONS, ShapeProfile
from metrics import AccuracyThreshold, Tolerance
from suite.config.known_failures import KnownFailure

ENGINES: tuple[str, ...] = ("torch", "onnxruntime", "inductor", "tensorrt")
CALIBRATION_METHODS: tuple[str, ...] = ("minmax", "entropy", "percentile")
#: What ``[run] requires`` may name besides the engines.
REQUIREMENTS: tuple[str, ...] = ("cuda", *ENGINES)
EXECUTION_PROVIDERS: tuple[str, ...] = ("cpu", "cuda", "tensorrt")
#: ONNX Runtime transformer optimizer model types the onnxruntime backend applies (transformer_fusion).
TRANSFORMER_FUSIONS: tuple[str, ...] = ("bert",)
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
    #: Nodes the quantizer leaves in fp32 (``nodes_to_exclude``): the keep-set tools/attribution_corpus.py finds.
    keep_fp32: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "samples": self.samples, "percentile": self.percentile,
                               "per_channel": self.per_channel}
        if self.keep_fp32:  # only when set: every other int8 cell keeps its cache key
            out["keep_fp32"] = list(self.keep_fp32)
        return out


#: The most timed rounds a latency case may ask for ([latency].rounds, --latency-rounds). A billion rounds ran until
#: killed (issue 43). The gate needs no more: its interval is ten batches' medians, and the largest calibration
#: (docs/gating.md) timed 2,000 rounds of a 0.04 ms case; 10,000 rounds of the slowest case in suite-gpu.toml
#: (ResNet-50 fp32 batch 256 eager, 88 ms) take 15 minutes.
MAX_ROUNDS = 10_000


@dataclass(frozen=True)
class LatencyOptions:
    rounds: int = 30
    warmup_fraction: float = 0.1


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
    #: The one batch the fp32 reference runs every feed at (chunks of it, the last one filled with the chunk's own
    #: rows; SuiteSession.run_batched), or None: chunks of the profile's largest batch, as engines run them.
    reference_batch: int | None = None

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
