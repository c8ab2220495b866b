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


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, shape without the batch axis, numpy dtype, value range for synthetic data."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float = 0.0
    high: float = 1.0

    def batch_shape(self, batch: int) -> tuple[int, ...]:
        return (batch, *self.shape)


@dataclass(frozen=True)
class ShapeProfile:
    """The batch range an engine must accept (TensorRT's min/opt/max optimization profile)."""

    min_batch: int
    opt_batch: int
    max_batch: int

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise ValueError(f"shape profile needs 1 <= min <= opt <= max, got {self}")

    @classmethod
    def from_batch_sizes(cls, batch_sizes: tuple[int, ...], opt_batch: int | None = None) -> ShapeProfile:
        lo, hi = min(batch_sizes), max(batch_sizes)
        return cls(lo, opt_batch if opt_batch is not None else hi, hi)

    def as_dict(self) -> dict[str, int]:
        return {"min": self.min_batch, "opt": self.opt_batch, "max": self.max_batch}


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

    def onnx_path(self, precision: str) -> Path:
        """ONNX file for a precision: fp32 export (fp32/tf32), fp16/bf16 conversion, or int8 QDQ."""
        ...

    def onnx_key(self, precision: str) -> str:
        """Cache key of ``onnx_path(precision)``, for keys of artifacts built from it."""
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
