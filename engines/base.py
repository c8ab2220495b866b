"""The protocol every backend follows, after Polygraphy: a loader that builds or loads, a runner with a
tiny ``infer(feed)`` surface. Feeds map input names to arrays so multi-input models just work.

Why a protocol and not a base class: backends live in their own folders and may import heavy,
optional libraries (tensorrt, cuda.bindings); the rest of the suite only needs these shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from core.inputs import AxisRange, InputSpec
from engines.feeds import Feed, check_feed

if TYPE_CHECKING:
    from core.cache import ArtifactCache

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "int8")


#: The batch axis's name in dims and shape ranges; no named axis may take it.
BATCH_AXIS = "batch"
#: A process's warm-up (suite/fleet/warm_up.py) before its first CUDA cell, the same in every engine that has one: small
#: images (3 x 64 x 64, at each of WARM_UP_BATCHES) through the convolution kinds the vision models run, at channel
#: counts where cuDNN's tensor-core kernels apply. Each is (in, out, kernel, stride, groups): the stack of a
#: mobilenet/efficientnet (strided stem; depthwise 3x3 and 5x5, each at stride 1 and 2; pointwise; then resnet's
#: 3x3), and resnet's 7x7 stem beside it.
WARM_UP_BATCHES = (1, 32)
WARM_UP_IMAGE = (3, 64, 64)
WARM_UP_LAYERS = ((3, 32, 3, 2, 1), (32, 32, 3, 1, 32), (32, 32, 3, 2, 32), (32, 64, 1, 1, 1), (64, 64, 5, 1, 64),
                  (64, 64, 5, 2, 64), (64, 64, 3, 1, 1))
WARM_UP_STEM = (3, 64, 7, 2, 1)
#: The ONNX exporters of torch.onnx.export the suite drives (``[models.NAME.export] exporter``).
ONNX_EXPORTERS: tuple[str, ...] = ("dynamo", "torchscript")


@dataclass(frozen=True)
class ShapeProfile:
    """The shapes an engine must accept (TensorRT's min/opt/max optimization profile): the batch range, and
    the range of every named axis of the model's inputs (``axes``, empty for a model with only a batch axis).

    ``static_batch``: the batch axis is fixed in each engine, so a cell has one engine per batch size it meets
    within min..max (``fixed(batch)`` is the profile of one of them); named axes stay dynamic.
    """

    min_batch: int
    opt_batch: int
    max_batch: int
    axes: tuple[tuple[str, AxisRange], ...] = ()
    static_batch: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise ValueError(f"shape profile needs 1 <= min <= opt <= max, got {self}")

    @classmethod
    def from_batch_sizes(cls, batch_sizes: tuple[int, ...], opt_batch: int | None = None,
                         axes: tuple[tuple[str, AxisRange], ...] = (), static_batch: bool = False) -> ShapeProfile:
        lo, hi = min(batch_sizes), max(batch_sizes)
        return cls(lo, opt_batch if opt_batch is not None else hi, hi, axes, static_batch)

    @property
    def per_batch(self) -> bool:
        """A static-batch profile over more than one batch: it stands for one engine per batch, not one engine."""
        return self.static_batch and self.min_batch < self.max_batch

    def fixed(self, batch: int) -> ShapeProfile:
        """The profile of a static-batch cell's engine for ``batch``: min = opt = max = batch."""
        if not self.static_batch:
            raise ValueError(f"fixed({batch}): the profile {self.as_dict()} has a dynamic batch axis")
        if not self.min_batch <= batch <= self.max_batch:
            raise ValueError(f"batch {batch} is outside the profile's batch range {self.min_batch}..{self.max_batch}; "
                             "a static-batch model has an engine for each batch within it, and none outside")
        return replace(self, min_batch=batch, opt_batch=batch, max_batch=batch)

    def engine_profile(self) -> ShapeProfile:
        """The profile of the engine a cell loads first: itself, or a static-batch cell's engine at its opt batch
        (the batch the dynamic engine is tuned for, so that the two cells' engine facts compare like for like)."""
        return self.fixed(self.opt_batch) if self.per_batch else self

    @property
    def onnx_batch(self) -> int | None:
        """The batch the ONNX graph of this profile's (first) engine fixes: None for a dynamic batch axis."""
        return self.engine_profile().opt_batch if self.static_batch else None

    def dims(self, which: str) -> dict[str, int]:
        """Every named axis at its ``"min"``, ``"opt"`` or ``"max"``."""
        return {name: getattr(r, which) for name, r in self.axes}

    def shapes(self, spec: InputSpec) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(min, opt, max) shapes of one input, batch axis included: what an optimization profile sets."""
        return (spec.batch_shape(self.min_batch, self.dims("min")), spec.batch_shape(self.opt_batch, self.dims("opt")),
                spec.batch_shape(self.max_batch, self.dims("max")))

    def as_dict(self) -> dict[str, Any]:
        """For cache keys and reports; ``axes`` only where there are named axes and ``static_batch`` only where it
        is set, so that the keys of dynamic models with a batch axis alone stay what they were."""
        out: dict[str, Any] = {"min": self.min_batch, "opt": self.opt_batch, "max": self.max_batch}
        if self.axes:
            out["axes"] = {name: r.as_dict() for name, r in self.axes}
        if self.static_batch:
            out["static_batch"] = True
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

    def onnx_path(self, precision: str, fusion: str | None = None, batch: int | None = None) -> Path:
        """ONNX file for a precision: fp32 export (fp32/tf32), fp16/bf16 conversion, or int8 QDQ; with
        ``fusion`` (``"bert"``), of the graph ONNX Runtime's transformer optimizer fused first; with ``batch``,
        of a graph exported with its batch axis fixed at that size (a static-batch engine's)."""
        ...

    def onnx_key(self, precision: str, fusion: str | None = None, batch: int | None = None) -> str:
        """Cache key of ``onnx_path(precision, fusion, batch)``, for keys of artifacts built from it."""
        ...


@dataclass
class LoadedEngine:
    runner: Runner
    facts: EngineFacts
    artifact: Path | None = None


class StaticBatchRunner:
    """The runner of a static-batch cell: one engine per batch size, each built (or loaded from the cache) the
    first time a feed of its batch comes, and every feed run by the engine of its batch.

    Why one runner over many engines: the session and the tests see one cell, as with a dynamic profile, while
    each engine is the fixed-shape one a deployment ships. Latency paths (``prepare_path``, ``run_path``,
    ``raw_call``) go to the engine of the prepared feed's batch.
    """

    def __init__(self, profile: ShapeProfile, load: Callable[[ShapeProfile], LoadedEngine], label: str) -> None:
        if not profile.static_batch:
            raise ValueError(f"{label}: StaticBatchRunner needs a static-batch profile, got {profile.as_dict()}")
        self.profile = profile
        self.label = label
        self._load = load
        #: batch -> its engine, in the order they were built.
        self.engines: dict[int, LoadedEngine] = {}
        #: the batches built so far; the cell's engine facts hold this list, so a report sees every one.
        self.built: list[int] = []
        first = self.engine(profile.engine_profile().opt_batch)
        self.input_names: tuple[str, ...] = tuple(first.runner.input_names)
        self.output_names: tuple[str, ...] = tuple(first.runner.output_names)
        self._prepared: dict[str, Any] = {}
        self._last_prepared: Any = None

    def engine(self, batch: int) -> LoadedEngine:
        """The engine for ``batch``, built on first use; a batch outside the profile is a ValueError."""
        if batch not in self.engines:
            try:
                profile = self.profile.fixed(batch)
            except ValueError as exc:
                raise ValueError(f"{self.label}: {exc}") from None
            self.engines[batch] = self._load(profile)
            self.built.append(batch)
        return self.engines[batch]

    def _runner_for(self, feed: Feed) -> Any:
        check_feed(feed, self.input_names)
        return self.engine(int(np.shape(feed[self.input_names[0]])[0])).runner

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        result: dict[str, np.ndarray] = self._runner_for(feed).infer(feed)
        return result

    def prepare_path(self, path: str, feed: Feed) -> str:
        runner = self._runner_for(feed)
        prepare = getattr(runner, "prepare_path", None)
        if prepare is None:
            raise CellUnavailable(f"latency-{path} needs a device-resident runner; {type(runner).__name__} has none",
                                  UNSUPPORTED)
        clock = str(prepare(path, feed))
        self._prepared[path] = runner
        self._last_prepared = runner
        return clock

    @property
    def prepare_parts(self) -> dict[str, float]:
        """The set-up split of the batch's engine that was prepared last (suite.timing.TimedCall reads it)."""
        parts = getattr(self._last_prepared, "prepare_parts", None) or {}
        return {str(k): float(v) for k, v in parts.items()}

    @property
    def launch_covers(self) -> dict[str, Any]:
        """Each prepared path's launch cover (engines/launch_cover.py), from the batch engine that runs it."""
        covers = {path: (getattr(runner, "launch_covers", None) or {}).get(path)
                  for path, runner in self._prepared.items()}
        return {path: cover for path, cover in covers.items() if cover is not None}

    def restage_path(self, path: str, feed: Feed) -> None:
        """Another feed into the prepared path's inputs, where the batch's engine can take one."""
        restage = getattr(self._prepared[path], "restage_path", None)
        if restage is None:
            raise NotImplementedError(f"latency-{path}: {type(self._prepared[path]).__name__} has no restage_path")
        restage(path, feed)

    def run_path(self, path: str) -> float:
        return float(self._prepared[path].run_path(path))

    def raw_call(self, path: str) -> Callable[[], object]:
        call: Callable[[], object] = self._prepared[path].raw_call(path)
        return call

    def path_outputs(self, path: str) -> dict[str, np.ndarray]:
        return path_outputs(self._prepared[path], path)

    def close(self) -> None:
        """Close every engine's runner that can be closed (TensorRT's hold device buffers and a stream)."""
        for loaded in self.engines.values():
            close = getattr(loaded.runner, "close", None)
            if close is not None:
                close()


def path_outputs(runner: Any, path: str) -> dict[str, np.ndarray]:
    """What the last ``run_path(path)`` call left in the runner's bound outputs, copied to host arrays: the runner's
    ``path_outputs(path)``, or TensorRT's ``staged_outputs()``. A runner with neither cannot show what its timed
    calls returned, which a latency case must check (a stale output of a reused buffer passes every timing): an
    error, not a pass."""
    read = getattr(runner, "path_outputs", None)
    if read is not None:
        return dict(read(path))
    staged = getattr(runner, "staged_outputs", None)
    if staged is not None:
        return dict(staged())
    raise NotImplementedError(f"latency-{path}: {type(runner).__name__} has no path_outputs(path), so the outputs "
                              "of its timed calls cannot be checked")


def static_batch_engine(profile: ShapeProfile, load: Callable[[ShapeProfile], LoadedEngine],
                        label: str) -> LoadedEngine:
    """A static-batch cell's LoadedEngine: a StaticBatchRunner whose engine at the opt batch is built now, so that
    a model that cannot build fails when its cell loads, as a dynamic one does. The facts are that engine's, plus
    ``static_batch``: the batch they describe and the batches built so far (a list that grows with the run)."""
    runner = StaticBatchRunner(profile, load, label)
    batch = profile.engine_profile().opt_batch
    first = runner.engines[batch]
    detail = {**first.facts.detail, "static_batch": {"facts_batch": batch, "batches_built": runner.built}}
    return LoadedEngine(runner=runner, facts=replace(first.facts, detail=detail), artifact=first.artifact)


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
