"""The engine build: ONNX file -> serialized engine, composed of small steps that each take their collaborators.

Why a module of its own: the build is where TensorRT's objects meet (``trt.Builder``, its ``IBuilderConfig``,
the ``OnnxParser``'s network, the timing cache, the logger and progress monitor). Each step here takes them as
arguments, and the ``tensorrt`` module too (``api``: its BuilderFlag, MemoryPoolType, ProfilingVerbosity, Dims
and version), so that the CPU self-tests (tests/selftest/test_trt_loaders.py) run every step on fakes;
``build_serialized_engine`` composes them as the backend calls it, with tensorrt itself by default.

The build: ``OnnxParser.parse_from_file`` on the ONNX file the build plan names (settings.plan_build), a
STRONGLY_TYPED network on TensorRT >= 10.12 / 11.x or precision flags before, one optimization profile
(min/opt/max of the batch and of every named axis) for every input, optional workspace limit and builder
optimization level, ProfilingVerbosity.DETAILED, the persisted timing cache, TensorRT's log and progress
forwarded to ``logging``.
"""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import EngineBuildError, EngineRequest
from engines.trt.library import tensorrt_api
from engines.trt.logger import RECENT_ERRORS, make_progress_monitor, trt_logger
from engines.trt.network import check_network_io, create_network, parse_onnx
from engines.trt.settings import (
    PROFILING_VERBOSITY,
    BuildPlan,
    builder_optimization_level,
    layer_summary,
    optimization_profile_shapes,
    workspace_bytes,
)
from engines.trt.timing_cache import load_timing_cache, save_timing_cache

if TYPE_CHECKING:
    from collections.abc import Mapping

    import tensorrt as trt

log = logging.getLogger(__name__)


def apply_build_plan(config: trt.IBuilderConfig, plan: BuildPlan, options: Mapping[str, Any], label: str,
                     api: Any) -> None:
    """Set the plan's builder flags (EngineBuildError for one this TensorRT lacks), clear its clear_flags (where
    they exist), then the options' workspace limit and builder optimization level, and detailed profiling."""
    for name in plan.flags:
        flag = getattr(api.BuilderFlag, name, None)
        if flag is None:
            raise EngineBuildError(f"{label}: tensorrt {api.__version__} has no BuilderFlag.{name} "
                                   f"(build plan {plan.as_dict()})")
        config.set_flag(flag)
    for name in plan.clear_flags:
        flag = getattr(api.BuilderFlag, name, None)
        if flag is not None:
            config.clear_flag(flag)
    try:
        workspace = workspace_bytes(options)
        level = builder_optimization_level(options)
    except ValueError as exc:
        raise EngineBuildError(f"{label}: {exc}") from exc
    if workspace is not None:
        config.set_memory_pool_limit(api.MemoryPoolType.WORKSPACE, workspace)
    if level is not None:
        config.builder_optimization_level = level
    verbosity = getattr(api.ProfilingVerbosity, PROFILING_VERBOSITY, None)
    if verbosity is not None:
        config.profiling_verbosity = verbosity


def add_optimization_profile(builder: trt.Builder, config: trt.IBuilderConfig, request: EngineRequest,
                             label: str, api: Any) -> None:
    """One optimization profile: min/opt/max of every axis of every input (the batch, opt_batch; min = opt = max
    for a static-batch engine; and each named axis). EngineBuildError if TensorRT rejects it."""
    profile: trt.IOptimizationProfile = builder.create_optimization_profile()
    for name, (low, opt, high) in optimization_profile_shapes(request).items():
        profile.set_shape(name, api.Dims(list(low)), api.Dims(list(opt)), api.Dims(list(high)))
    if config.add_optimization_profile(profile) < 0:
        raise EngineBuildError(f"{label}: TensorRT rejected the optimization profile {request.profile.as_dict()}")


def serialize_network(builder: trt.Builder, network: trt.INetworkDefinition, config: trt.IBuilderConfig,
                      label: str, onnx_path: Path, version: str,
                      errors: collections.deque[str] = RECENT_ERRORS) -> tuple[bytes, float]:
    """``builder.build_serialized_network`` as bytes, and the seconds it took. When the builder returns None:
    EngineBuildError naming ``label`` (the cell), the TensorRT version, the file, and the errors TensorRT logged
    meanwhile (``errors``: the logger bridge's, cleared first)."""
    errors.clear()
    start = time.perf_counter()
    serialized: trt.IHostMemory | None = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if serialized is None:
        quoted = "\n  ".join(errors) or "(no error message; see the 'tensorrt' log records)"
        raise EngineBuildError(f"{label}: tensorrt {version} failed to build an engine from {onnx_path}:\n  {quoted}")
    return bytes(serialized), seconds


def build_serialized_engine(request: EngineRequest, plan: BuildPlan, onnx_path: Path, timing_cache_file: Path,
                            *, api: Any = None, logger: trt.ILogger | None = None) -> tuple[bytes, dict[str, Any]]:
    """Parse ``onnx_path`` and build a serialized engine for ``request`` following ``plan``.

    Returns the engine bytes and a JSON-able description of the build. Raises EngineBuildError naming the
    cell, the file and TensorRT's own messages. ``api`` (the tensorrt module) and ``logger`` default to
    tensorrt itself and the process's one logger bridge.
    """
    api = tensorrt_api(api)
    label = f"tensorrt {request.cell_id}"
    if logger is None:
        logger = trt_logger()
    builder: trt.Builder = api.Builder(logger)

    network = create_network(builder, plan, label, api)

    parser: trt.OnnxParser = api.OnnxParser(network, logger)
    typing_mode = "strongly typed" if plan.strongly_typed else "weakly typed"
    log.info("%s: parsing %s (%s network)", label, onnx_path, typing_mode)
    parse_onnx(parser, onnx_path, request.cell_id)
    check_network_io(request, network, onnx_path)

    config: trt.IBuilderConfig = builder.create_builder_config()
    apply_build_plan(config, plan, request.options, label, api)
    add_optimization_profile(builder, config, request, label, api)

    monitor = make_progress_monitor(label, api)  # TensorRT needs it alive as long as the config that uses it
    if monitor is not None:
        config.progress_monitor = monitor
    try:
        loaded = load_timing_cache(config, timing_cache_file)
        log.info("%s: building engine (plan %s, profile %s)", label, plan.as_dict(), request.profile.as_dict())
        blob, seconds = serialize_network(builder, network, config, label, onnx_path, api.__version__)
        log.info("%s: built a %.1f MB engine in %.1f s", label, len(blob) / 1e6, seconds)
        save_timing_cache(config, timing_cache_file, loaded)
    finally:
        del config  # release the config before the monitor it points to, even when the build failed
    info = {"build_seconds": round(seconds, 3), "tensorrt": api.__version__, "plan": plan.as_dict(),
            "onnx": str(onnx_path), "engine_bytes": len(blob), "timing_cache": str(timing_cache_file)}
    return blob, info


def engine_layer_summary(engine: trt.ICudaEngine, api: Any = None) -> dict[str, Any]:
    """Layer count and layer-type histogram from the engine inspector; {} if it cannot say."""
    api = tensorrt_api(api)
    try:
        inspector = engine.create_engine_inspector()
        text = inspector.get_engine_information(api.LayerInformationFormat.JSON)
    except Exception as exc:  # facts are best-effort
        log.debug("engine inspector failed: %s", exc)
        return {}
    return layer_summary(text)
