"""TensorRT backend: build (or load from the engine cache) a serialized engine from the shared ONNX artifact.

Build: ``trt.OnnxParser.parse_from_file`` on the ONNX file the build plan names (settings.plan_build),
a STRONGLY_TYPED network on TensorRT >= 10.12 / 11.x or precision flags before, one optimization profile
(min/opt/max of the batch and of every named axis, such as a sequence length) for every input, optional
workspace limit and builder optimization level, a persisted timing cache per (TensorRT version, compute
capability, GPU name), and TensorRT's log and build progress
forwarded to ``logging`` (logger "tensorrt" and this module's).

The serialized engine lives in the content-addressed engine cache (kind "tensorrt-engine"), keyed by
settings.engine_cache_parts; loading deserializes it with ``trt.Runtime`` and wraps it in a TensorRTRunner.
A static-batch cell (``static_batch``) has one engine per batch it meets, each parsed from the ONNX graph
exported with that batch fixed and built with min = opt = max = that batch, behind a StaticBatchRunner.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import threading
import time
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
from engines.trt.runner import TensorRTRunner, dims_tuple
from engines.trt.settings import (
    BUILD_INFO_FILE,
    ENGINE_FILE,
    PROFILING_VERBOSITY,
    BuildPlan,
    ParserErrorInfo,
    builder_optimization_level,
    cuda_device_index,
    engine_cache_parts,
    format_parser_errors,
    layer_summary,
    logging_level,
    optimization_profile_shapes,
    parse_version,
    plan_build,
    precision_skip_reason,
    tensorrt_version_skip_reason,
    timing_cache_path,
    workspace_bytes,
)

if TYPE_CHECKING:
    import tensorrt as trt

    from core.cache import ArtifactCache

log = logging.getLogger(__name__)
trt_log = logging.getLogger("tensorrt")

NOT_INSTALLED = ("tensorrt is not installed (its wheels live only on NVIDIA's package index: "
                 "pip install --extra-index-url https://pypi.nvidia.com tensorrt)")
CACHE_KIND = "tensorrt-engine"
#: Seconds between progress lines of one top-level build phase.
PROGRESS_INTERVAL_S = 10.0


def require_tensorrt() -> str:
    """The installed TensorRT version; ImportError with an install hint when the library is not there.

    ``import tensorrt`` alone is not proof: with only ``tensorrt-stubs`` installed it imports an empty
    namespace package (a folder of .pyi files), which has neither ``Builder`` nor ``__version__``.
    """
    try:
        import tensorrt
    except ImportError as exc:
        raise ImportError(f"{NOT_INSTALLED}; import failed: {exc}") from exc
    version = getattr(tensorrt, "__version__", None)
    if not isinstance(version, str) or not hasattr(tensorrt, "Builder"):
        where = ", ".join(str(p) for p in getattr(tensorrt, "__path__", [])) or "?"
        raise ImportError(f"{NOT_INSTALLED}; `import tensorrt` found only type stubs or an empty package at {where}")
    return version


# ---------------------------------------------------------------------------------------------------------
# TensorRT -> logging


_logger_lock = threading.Lock()
_trt_logger: Any = None
_recent_errors: collections.deque[str] = collections.deque(maxlen=20)


def trt_logger() -> trt.ILogger:
    """The process's one TensorRT logger: forwards every message to the "tensorrt" logging logger.

    TensorRT severities map to logging levels (INTERNAL_ERROR->CRITICAL, ERROR, WARNING, INFO,
    VERBOSE->DEBUG); errors are also kept briefly so a failed build can quote them in its exception.
    """
    global _trt_logger
    import tensorrt as trt

    with _logger_lock:
        if _trt_logger is not None:
            logger: trt.ILogger = _trt_logger
            return logger

        # tensorrt-stubs as shipped do not resolve (no py.typed beside them), so trt.ILogger may be Any here.
        class LoggingBridge(trt.ILogger):  # type: ignore[misc,unused-ignore]
            def __init__(self) -> None:
                trt.ILogger.__init__(self)

            def log(self, severity: trt.ILogger.Severity, msg: str) -> None:
                with contextlib.suppress(Exception):  # log() is noexcept on the C++ side: never raise into it
                    level = logging_level(getattr(severity, "name", str(severity)))
                    if level >= logging.ERROR:
                        _recent_errors.append(msg)
                    if trt_log.isEnabledFor(level):
                        trt_log.log(level, "%s", msg)

        _trt_logger = LoggingBridge()
        bridge: trt.ILogger = _trt_logger
        return bridge


def make_progress_monitor(label: str) -> trt.IProgressMonitor | None:
    """A thread-safe IProgressMonitor that logs phase start/finish (top-level phases at INFO, nested at
    DEBUG) and, for top-level phases, a step line at most every PROGRESS_INTERVAL_S. None where this
    TensorRT has no IProgressMonitor."""
    import tensorrt as trt

    if not hasattr(trt, "IProgressMonitor"):
        return None

    class BuildProgress(trt.IProgressMonitor):  # type: ignore[misc,unused-ignore]  # Any without usable stubs
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self._lock = threading.Lock()
            self._phases: dict[str, tuple[float, int, str | None, float]] = {}

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            with contextlib.suppress(Exception):  # callbacks must never raise into TensorRT
                now = time.perf_counter()
                with self._lock:
                    self._phases[phase_name] = (now, num_steps, parent_phase, now)
                level = logging.INFO if parent_phase is None else logging.DEBUG
                inside = f" (in {parent_phase})" if parent_phase else ""
                log.log(level, "%s: %s started, %d step(s)%s", label, phase_name, num_steps, inside)

        def step_complete(self, phase_name: str, step: int) -> bool:
            with contextlib.suppress(Exception):
                now = time.perf_counter()
                with self._lock:
                    entry = self._phases.get(phase_name)
                    if entry is None or entry[2] is not None or now - entry[3] < PROGRESS_INTERVAL_S:
                        return True
                    start, steps, parent, _ = entry
                    self._phases[phase_name] = (start, steps, parent, now)
                log.info("%s: %s step %d/%d (%.0f s)", label, phase_name, step + 1, steps, now - start)
            return True  # never cancel the build

        def phase_finish(self, phase_name: str) -> None:
            with contextlib.suppress(Exception):
                with self._lock:
                    entry = self._phases.pop(phase_name, None)
                if entry is None:
                    return
                start, _, parent, _ = entry
                level = logging.INFO if parent is None else logging.DEBUG
                log.log(level, "%s: %s finished in %.1f s", label, phase_name, time.perf_counter() - start)

    return BuildProgress()


# ---------------------------------------------------------------------------------------------------------
# Timing cache


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_timing_cache(config: trt.IBuilderConfig, path: Path) -> bytes:
    """Attach the timing cache stored at ``path`` (or an empty one) to ``config``; returns the bytes loaded.

    The cache is advisory: an unreadable or mismatched file costs a slower build, never a failed one.
    """
    data = b""
    if path.is_file():
        try:
            data = path.read_bytes()
        except OSError as exc:
            log.warning("timing cache %s is unreadable (%s); starting an empty one", path, exc)
    try:
        cache = config.create_timing_cache(data)
    except Exception as exc:  # a corrupt file must not fail the build
        log.warning("timing cache %s is corrupt (%s); starting an empty one", path, exc)
        data, cache = b"", config.create_timing_cache(b"")
    if not config.set_timing_cache(cache, ignore_mismatch=False):
        log.warning("timing cache %s was written by another TensorRT/GPU; starting an empty one", path)
        data = b""
        config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    elif data:
        log.info("timing cache: loaded %d bytes from %s", len(data), path)
    return data


def save_timing_cache(config: trt.IBuilderConfig, path: Path, loaded: bytes) -> None:
    """Write the config's timing cache back to ``path`` atomically, first merging entries another process
    wrote there since ``loaded`` was read. Failures are logged, never raised."""
    try:
        cache = config.get_timing_cache()
        if cache is None:
            return
        if path.is_file():
            disk = path.read_bytes()
            if disk and disk != loaded:
                try:
                    if not cache.combine(config.create_timing_cache(disk), ignore_mismatch=False):
                        log.debug("timing cache %s: could not merge the newer file", path)
                except Exception as exc:
                    log.debug("timing cache %s: merge failed (%s)", path, exc)
        blob = bytes(cache.serialize())
        atomic_write_bytes(path, blob)
        log.info("timing cache: saved %d bytes to %s", len(blob), path)
    except Exception as exc:
        log.warning("could not save timing cache %s: %s", path, exc)


# ---------------------------------------------------------------------------------------------------------
# Build


def parser_errors(parser: Any) -> list[ParserErrorInfo]:
    """Every ``parser.get_error(i)`` as a ParserErrorInfo (node_name / node_operator exist from TensorRT 10)."""
    errors = []
    for i in range(int(parser.num_errors)):
        err = parser.get_error(i)

        def field(name: str, default: Any, err: Any = err) -> Any:
            method = getattr(err, name, None)
            if method is None:
                return default
            try:
                return method()
            except Exception:
                return default

        code = field("code", "UNKNOWN")
        errors.append(ParserErrorInfo(
            code=str(getattr(code, "name", code)),
            desc=str(field("desc", str(err))),
            node=int(field("node", -1)),
            node_name=str(field("node_name", "")),
            operator=str(field("node_operator", "")),
            file=str(field("file", "")),
            line=int(field("line", -1)),
            func=str(field("func", "")),
        ))
    return errors


def _check_network_io(request: EngineRequest, network: trt.INetworkDefinition, onnx_path: Path) -> None:
    inputs = {network.get_input(i).name: dims_tuple(network.get_input(i).shape) for i in range(network.num_inputs)}
    outputs = [network.get_output(i).name for i in range(network.num_outputs)]
    expected = [spec.name for spec in request.inputs]
    if sorted(inputs) != sorted(expected):
        raise EngineBuildError(f"{request.cell_id}: {onnx_path} has inputs {sorted(inputs)}; "
                               f"the config's inputs are {expected}")
    missing = [n for n in request.outputs if n not in outputs]
    if missing:
        raise EngineBuildError(f"{request.cell_id}: outputs {missing} are not outputs of {onnx_path} "
                               f"(its outputs: {outputs})")
    p = request.profile
    for spec in request.inputs:
        shape = inputs[spec.name]
        if len(shape) != len(spec.batch_shape(1)):
            raise EngineBuildError(f"{request.cell_id}: input {spec.name!r} of {onnx_path} has shape {shape}; "
                                   f"the config says (batch, {', '.join(map(str, spec.shape))})")
        if shape[0] >= 0 and not p.min_batch == p.max_batch == shape[0]:
            raise EngineBuildError(f"{request.cell_id}: input {spec.name!r} of {onnx_path} has a static batch "
                                   f"{shape[0]}; the profile {p.as_dict()} needs a dynamic batch axis")
        for j, axis in enumerate(spec.shape, start=1):
            if isinstance(axis, str) and shape[j] >= 0 and not spec.axis(axis).min == spec.axis(axis).max == shape[j]:
                raise EngineBuildError(f"{request.cell_id}: input {spec.name!r} of {onnx_path} has a static axis {j} "
                                       f"({axis!r}) of {shape[j]}; the profile {p.as_dict()} needs it dynamic")


def create_network(builder: trt.Builder, plan: BuildPlan, label: str) -> trt.INetworkDefinition:
    """An empty network, strongly typed where ``plan`` says so (the cell's build and its debug build alike)."""
    import tensorrt as trt

    network_flags = 0
    if plan.strongly_typed:
        # TensorRT 11 deprecates the flag (every network is strongly typed) and may drop it later.
        strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        if strongly_typed is not None:
            network_flags |= 1 << int(strongly_typed)
        elif parse_version(trt.__version__)[0] < 11:
            raise EngineBuildError(f"{label}: tensorrt {trt.__version__} has no STRONGLY_TYPED network flag")
    network = builder.create_network(network_flags)
    if network is None:
        raise EngineBuildError(f"{label}: Builder.create_network failed; see the 'tensorrt' log records")
    return network


def build_serialized_engine(request: EngineRequest, plan: BuildPlan, onnx_path: Path,
                            timing_cache_file: Path) -> tuple[bytes, dict[str, Any]]:
    """Parse ``onnx_path`` and build a serialized engine for ``request`` following ``plan``.

    Returns the engine bytes and a JSON-able description of the build. Raises EngineBuildError naming the
    cell, the file and TensorRT's own messages.
    """
    import tensorrt as trt

    label = f"tensorrt {request.cell_id}"
    logger = trt_logger()
    builder = trt.Builder(logger)

    network = create_network(builder, plan, label)

    parser = trt.OnnxParser(network, logger)
    typing_mode = "strongly typed" if plan.strongly_typed else "weakly typed"
    log.info("%s: parsing %s (%s network)", label, onnx_path, typing_mode)
    parsed = parser.parse_from_file(str(onnx_path))
    errors = parser_errors(parser)
    if not parsed or errors:
        raise EngineBuildError(format_parser_errors(request.cell_id, onnx_path, errors))
    _check_network_io(request, network, onnx_path)

    config = builder.create_builder_config()
    for name in plan.flags:
        flag = getattr(trt.BuilderFlag, name, None)
        if flag is None:
            raise EngineBuildError(f"{label}: tensorrt {trt.__version__} has no BuilderFlag.{name} "
                                   f"(build plan {plan.as_dict()})")
        config.set_flag(flag)
    for name in plan.clear_flags:
        flag = getattr(trt.BuilderFlag, name, None)
        if flag is not None:
            config.clear_flag(flag)
    try:
        workspace = workspace_bytes(request.options)
        level = builder_optimization_level(request.options)
    except ValueError as exc:
        raise EngineBuildError(f"{label}: {exc}") from exc
    if workspace is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
    if level is not None:
        config.builder_optimization_level = level
    verbosity = getattr(trt.ProfilingVerbosity, PROFILING_VERBOSITY, None)
    if verbosity is not None:
        config.profiling_verbosity = verbosity

    profile = builder.create_optimization_profile()
    p = request.profile
    # min/opt/max of every axis: the batch (opt_batch; min = opt = max for a static-batch engine) and each named one
    for name, (low, opt, high) in optimization_profile_shapes(request).items():
        profile.set_shape(name, trt.Dims(list(low)), trt.Dims(list(opt)), trt.Dims(list(high)))
    if config.add_optimization_profile(profile) < 0:
        raise EngineBuildError(f"{label}: TensorRT rejected the optimization profile {p.as_dict()}")

    monitor = make_progress_monitor(label)  # TensorRT needs it alive as long as the config that uses it
    if monitor is not None:
        config.progress_monitor = monitor
    try:
        loaded = load_timing_cache(config, timing_cache_file)
        _recent_errors.clear()
        log.info("%s: building engine (plan %s, profile %s)", label, plan.as_dict(), p.as_dict())
        start = time.perf_counter()
        serialized: trt.IHostMemory | None = builder.build_serialized_network(network, config)
        seconds = time.perf_counter() - start
        if serialized is None:
            quoted = "\n  ".join(_recent_errors) or "(no error message; see the 'tensorrt' log records)"
            raise EngineBuildError(f"{label}: tensorrt {trt.__version__} failed to build an engine from "
                                   f"{onnx_path}:\n  {quoted}")
        blob = bytes(serialized)
        log.info("%s: built a %.1f MB engine in %.1f s", label, len(blob) / 1e6, seconds)
        save_timing_cache(config, timing_cache_file, loaded)
    finally:
        del config  # release the config before the monitor it points to, even when the build failed
    info = {"build_seconds": round(seconds, 3), "tensorrt": trt.__version__, "plan": plan.as_dict(),
            "onnx": str(onnx_path), "engine_bytes": len(blob), "timing_cache": str(timing_cache_file)}
    return blob, info


def engine_layer_summary(engine: trt.ICudaEngine) -> dict[str, Any]:
    """Layer count and layer-type histogram from the engine inspector; {} if it cannot say."""
    import tensorrt as trt

    try:
        inspector = engine.create_engine_inspector()
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    except Exception as exc:  # facts are best-effort
        log.debug("engine inspector failed: %s", exc)
        return {}
    return layer_summary(text)


# ---------------------------------------------------------------------------------------------------------
# The backend


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
