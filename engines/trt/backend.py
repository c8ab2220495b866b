"""The TensorRT ``Backend`` (engines/base.py's protocol): skip reasons, then load a cell's engine from the engine
cache, building it there first when it is missing.

Why a module of its own: this is the one place that decides *which* engine a cell gets (the build plan, the ONNX
file, the cache key, the timing cache file, the GPU) and wraps it for running; how an engine is built is
engines/trt/builder.py's job. The serialized engine lives in the content-addressed engine cache (kind
"tensorrt-engine"), keyed by settings.engine_cache_parts; loading deserializes it with ``trt.Runtime`` and wraps it
in a TensorRTRunner. A static-batch cell (``static_batch``) has one engine per batch it meets, each parsed from the
ONNX graph exported with that batch fixed and built with min = opt = max = that batch, behind a StaticBatchRunner.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import (
    PRECISIONS,
    EngineBuildError,
    EngineFacts,
    EngineRequest,
    LoadedEngine,
    ModelArtifacts,
    static_batch_engine,
)
from engines.cuda.runtime import (
    CudaError,
    CudaUnavailable,
    cuda_available,
    device_properties,
    driver_and_runtime_versions,
    set_device,
)
from engines.onnx.export import onnx_facts
from engines.trt.builder import build_serialized_engine, engine_layer_summary
from engines.trt.library import require_tensorrt
from engines.trt.logger import trt_logger
from engines.trt.runner import TensorRTRunner
from engines.trt.settings import (
    BUILD_INFO_FILE,
    ENGINE_FILE,
    BuildPlan,
    cuda_device_index,
    engine_cache_parts,
    plan_build,
    precision_skip_reason,
    tensorrt_version_skip_reason,
    timing_cache_path,
)

if TYPE_CHECKING:
    import tensorrt as trt

    from core.cache import ArtifactCache

log = logging.getLogger(__name__)

CACHE_KIND = "tensorrt-engine"


class TensorRTBackend:
    """The ``Backend`` protocol for TensorRT (see engines.base)."""

    name = "tensorrt"

    def unsupported_reason(self, request: EngineRequest) -> str | None:
        if request.precision not in PRECISIONS:
            return f"unknown precision {request.precision!r}; valid: {', '.join(PRECISIONS)}"
        if cuda_device_index(request.device) is None:
            return f"TensorRT needs a CUDA device: run with --device cuda:0 (this run uses --device {request.device})"
        return None

    def skip_reason(self, request: EngineRequest) -> str | None:
        if request.precision not in PRECISIONS:
            return f"unknown precision {request.precision!r}; valid: {', '.join(PRECISIONS)}"
        try:
            version = require_tensorrt()
        except ImportError as exc:
            return str(exc)
        reason = tensorrt_version_skip_reason(version)
        if reason:
            return reason
        index = cuda_device_index(request.device)
        if index is None:
            return f"TensorRT needs a CUDA device: run with --device cuda:0 (this run uses --device {request.device})"
        reason = cuda_available(index)
        if reason:
            return reason
        try:
            props = device_properties(index)
        except (CudaError, CudaUnavailable) as exc:
            return f"cannot query CUDA device {index}: {exc}"
        return precision_skip_reason(request.precision, props["compute_capability_tuple"], props["name"])

    def load(self, request: EngineRequest, artifacts: ModelArtifacts, cache: ArtifactCache) -> LoadedEngine:
        if request.profile.per_batch:  # static_batch: one engine per batch, each min = opt = max = its batch
            return static_batch_engine(
                request.profile,
                lambda profile: self.load(dataclasses.replace(request, profile=profile), artifacts, cache),
                f"tensorrt {request.cell_id}")
        try:
            trt_version = require_tensorrt()
        except ImportError as exc:
            raise EngineBuildError(f"{request.cell_id}: {exc}") from exc
        import tensorrt as trt

        index = cuda_device_index(request.device)
        if index is None:
            raise EngineBuildError(f"{request.cell_id}: TensorRT needs a CUDA device, got {request.device!r}")
        try:
            set_device(index)
            gpu = device_properties(index)
            cuda_versions = driver_and_runtime_versions()
        except (CudaError, CudaUnavailable) as exc:
            raise EngineBuildError(f"{request.cell_id}: {exc}") from exc

        try:
            plan = plan_build(trt_version, request.precision)
        except ValueError as exc:
            raise EngineBuildError(f"{request.cell_id}: {exc}") from exc
        onnx_path, onnx_key = onnx_source(artifacts, plan.onnx_precision, request.profile.onnx_batch)
        parts = engine_cache_parts(
            request, onnx_key=onnx_key, plan=plan, trt_version=trt_version,
            gpu_name=gpu["name"], compute_capability=gpu["compute_capability"], cuda_versions=cuda_versions,
        )
        timing_file = timing_cache_path(cache.root, trt_version, gpu["compute_capability"], gpu["name"])

        def build(directory: Path) -> None:
            blob, info = build_serialized_engine(request, plan, onnx_path, timing_file)
            (directory / ENGINE_FILE).write_bytes(blob)
            (directory / BUILD_INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True))

        entry = cache.get_or_build(CACHE_KIND, parts, build, label=f"tensorrt {request.cell_id}")
        engine_path = entry / ENGINE_FILE
        blob = engine_path.read_bytes()
        runtime = trt.Runtime(trt_logger())
        engine: trt.ICudaEngine | None = runtime.deserialize_cuda_engine(blob)
        if engine is None:
            raise EngineBuildError(
                f"{request.cell_id}: tensorrt {trt_version} could not deserialize {engine_path} "
                f"({len(blob)} bytes): a stale or incompatible engine (another TensorRT version or GPU?); "
                f"delete {entry} to rebuild it")
        runner = TensorRTRunner(engine, profile=request.profile, runtime=runtime,
                                output_names=request.outputs or None, label=f"tensorrt {request.cell_id}")
        facts = EngineFacts(
            artifact_bytes=len(blob),
            layers=int(engine.num_layers),
            parameters=_parameters(onnx_path),
            detail=self._detail(engine, plan, gpu, trt_version, entry),
        )
        return LoadedEngine(runner=runner, facts=facts, artifact=engine_path)

    @staticmethod
    def _detail(engine: trt.ICudaEngine, plan: BuildPlan, gpu: dict[str, Any], trt_version: str,
                entry: Path) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "layer_kind": "tensorrt layers",
            "tensorrt": trt_version,
            "build_plan": plan.as_dict(),
            "gpu": gpu["name"],
            "compute_capability": gpu["compute_capability"],
        }
        detail.update(engine_layer_summary(engine))
        try:
            info = json.loads((entry / BUILD_INFO_FILE).read_text())
            detail["build_seconds"] = info.get("build_seconds")
        except (OSError, ValueError):
            pass
        return detail


def onnx_source(artifacts: ModelArtifacts, precision: str, batch: int | None) -> tuple[Path, str]:
    """The ONNX file an engine is parsed from and its cache key: the dynamic-batch graph, or the one exported with
    its batch fixed at ``batch`` (a static-batch engine's, so that TensorRT sees the shapes the engine has)."""
    if batch is None:
        return Path(artifacts.onnx_path(precision)), artifacts.onnx_key(precision)
    return Path(artifacts.onnx_path(precision, None, batch)), artifacts.onnx_key(precision, None, batch)


def _parameters(onnx_path: Path) -> int | None:
    try:
        return onnx_facts(onnx_path).parameters
    except Exception as exc:  # a fact, not a reason to fail the cell
        log.warning("could not count parameters of %s: %s", onnx_path, exc)
        return None
