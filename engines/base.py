"""The protocol every backend follows, after Polygraphy: a loader that builds or loads, a runner with a
tiny ``infer(feed)`` surface. Feeds map input names to arrays so multi-input models just work.

Why a protocol and not a base class: backends live in their own folders and may import heavy,
optional libraries (tensorrt, cuda.bindings); the rest of the suite only needs these shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from suite.cache import ArtifactCache

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "int8")

Feed = Mapping[str, np.ndarray]


#: The batch axis's name in dims and shape ranges; no named axis may take it.
BATCH_AXIS = "batch"
#: What an input is: plain values drawn within [low, high], or an attention mask (per row 1s then 0s along
#: its last, named axis: the tokens a row holds, then padding), which synthetic feeds draw as such.
INPUT_ROLES: tuple[str, ...] = ("values", "attention_mask")


@dataclass(frozen=True)
class AxisRange:
    """A named dynamic axis (a sequence length): the lengths an engine must accept, and the one it is tuned
    for (TensorRT's opt; synthetic feeds' default length)."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise ValueError(f"axis range needs 1 <= min <= opt <= max, got {self}")

    def as_dict(self) -> dict[str, int]:
        return {"min": self.min, "opt": self.opt, "max": self.max}


Dims = Mapping[str, int]


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, shape without the batch axis, numpy dtype, value range for synthetic data.

    A string in ``shape`` names a dynamic axis (``"seq"``); ``axes`` holds the range of each axis the shape
    names, so that a spec alone can make a concrete shape (``batch_shape(batch, dims)``, each axis at its opt
    unless ``dims`` says otherwise). ``role`` is ``"values"`` or ``"attention_mask"``.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    low: float = 0.0
    high: float = 1.0
    axes: tuple[tuple[str, AxisRange], ...] = ()
    role: str = "values"

    def __post_init__(self) -> None:
        declared = dict(self.axes)
        missing = [d for d in self.shape if isinstance(d, str) and d not in declared]
        if missing:
            raise ValueError(f"input {self.name!r}: shape {list(self.shape)} names axes {missing} without a range "
                             f"(axes: {sorted(declared)})")
        if self.role not in INPUT_ROLES:
            raise ValueError(f"input {self.name!r}: role {self.role!r}; valid: {', '.join(INPUT_ROLES)}")

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The named axes of the shape, in order."""
        return tuple(d for d in self.shape if isinstance(d, str))

    def axis(self, name: str) -> AxisRange:
        return dict(self.axes)[name]

    def batch_shape(self, batch: int, dims: Dims | None = None) -> tuple[int, ...]:
        """The concrete shape at ``batch``: each named axis at ``dims[name]``, else at its opt."""
        given = dims or {}
        return (batch, *(int(given.get(d, self.axis(d).opt)) if isinstance(d, str) else d for d in self.shape))

    def as_key(self) -> dict[str, Any]:
        """This spec in a cache key: the fields an input without named axes always had, so that the keys of
        existing models stay what they were; axes and role only where they are set."""
        key: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "low": self.low,
                               "high": self.high}
        if self.axes:
            key["axes"] = {n: r.as_dict() for n, r in self.axes}
        if self.role != "values":
            key["role"] = self.role
        return key


@dataclass(frozen=True)
class ShapeProfile:
    """The shapes an engine must accept (TensorRT's min/opt/max optimization profile): the batch range, and
    the range of every named axis of the model's inputs (``axes``, empty for a model with only a batch axis)."""

    min_batch: int
    opt_batch: int
    max_batch: int
    axes: tuple[tuple[str, AxisRange], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise ValueError(f"shape profile needs 1 <= min <= opt <= max, got {self}")

    @classmethod
    def from_batch_sizes(cls, batch_sizes: tuple[int, ...], opt_batch: int | None = None,
                         axes: tuple[tuple[str, AxisRange], ...] = ()) -> ShapeProfile:
        lo, hi = min(batch_sizes), max(batch_sizes)
        return cls(lo, opt_batch if opt_batch is not None else hi, hi, axes)

    def dims(self, which: str) -> dict[str, int]:
        """Every named axis at its ``"min"``, ``"opt"`` or ``"max"``."""
        return {name: getattr(r, which) for name, r in self.axes}

    def shapes(self, spec: InputSpec) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(min, opt, max) shapes of one input, batch axis included: what an optimization profile sets."""
        return (spec.batch_shape(self.min_batch, self.dims("min")), spec.batch_shape(self.opt_batch, self.dims("opt")),
                spec.batch_shape(self.max_batch, self.dims("max")))

    def as_dict(self) -> dict[str, Any]:
        """For cache keys and reports; ``axes`` only where there are named axes, so that the keys of models
        with a batch axis alone stay what they were."""
        out: dict[str, Any] = {"min": self.min_batch, "opt": self.opt_batch, "max": self.max_batch}
        if self.axes:
            out["axes"] = {name: r.as_dict() for name, r in self.axes}
        return out


@dataclass(frozen=True)
class EngineRequest:
    """Everything a backend needs to build one (model, engine, precision) cell, and nothing more."""

    model: str
    engine: str
    precision: str
    device: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    profile: ShapeProfile
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cell_id(self) -> str:
        return f"{self.model}-{self.engine}-{self.precision}"


@dataclass(frozen=True)
class EngineFacts:
    """What practitioners tabulate about a built engine: size, layer/node count, parameter count."""

    artifact_bytes: int | None = None
    layers: int | None = None
    parameters: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def size_mb(self) -> float | None:
        return None if self.artifact_bytes is None else self.artifact_bytes / 1e6

    def as_dict(self) -> dict[str, Any]:
        return {
            "size_mb": self.size_mb,
            "layers": self.layers,
            "parameters": self.parameters,
            **dict(self.detail),
        }


@runtime_checkable
class Runner(Protocol):
    """Runs a built engine: host arrays in, host arrays out (the practitioners' "latency-all" path)."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]

    def infer(self, feed: Feed) -> dict[str, np.ndarray]: ...


class ModelArtifacts(Protocol):
    """What a backend may ask of a model; every artifact is built once and cached."""

    name: str

    def torch_module(self) -> Any:
        """The fp32 reference ``torch.nn.Module`` in eval mode."""
        ...

    def model_digest(self) -> str:
        """Hash of the model's architecture source and weights: the root of every cache key."""
        ...

    def onnx_path(self, precision: str, fusion: str | None = None) -> Path:
        """ONNX file for a precision: fp32 export (fp32/tf32), fp16/bf16 conversion, or int8 QDQ; with
        ``fusion`` (``"bert"``), of the graph ONNX Runtime's transformer optimizer fused first."""
        ...

    def onnx_key(self, precision: str, fusion: str | None = None) -> str:
        """Cache key of ``onnx_path(precision, fusion)``, for keys of artifacts built from it."""
        ...


@dataclass
class LoadedEngine:
    runner: Runner
    facts: EngineFacts
    artifact: Path | None = None


class Backend(Protocol):
    """A loader: decides whether a cell can run here, and builds (or loads from cache) its engine."""

    name: str

    def unsupported_reason(self, request: EngineRequest) -> str | None:
        """Why the engine has no such cell by design (torch int8, TF32 on a CPU), or None. Needs no library."""
        ...

    def skip_reason(self, request: EngineRequest) -> str | None:
        """Why this cell cannot run on this machine (library, provider or device missing), or None."""
        ...

    def load(self, request: EngineRequest, artifacts: ModelArtifacts, cache: ArtifactCache) -> LoadedEngine:
        """Build or load the engine for ``request``; raise EngineBuildError with the backend's message."""
        ...


class EngineBuildError(RuntimeError):
    """A build failed; the message names the cell and carries the tool's own error text."""


UNSUPPORTED = "unsupported"
UNAVAILABLE = "unavailable"


class CellUnavailable(Exception):
    """A cell or latency path that cannot run here. ``code`` says which kind of reason (suite.verdict.REASONS):
    ``unsupported``, the engine has no such path by design; ``unavailable``, something it needs is missing
    on this machine (a library, a provider, a device)."""

    def __init__(self, message: str, code: str = UNAVAILABLE) -> None:
        super().__init__(message)
        self.code = code
