"""TensorRT localization: a debug engine whose layer outputs are network outputs, and the engine inspector's
precision census. Written against the TensorRT 10 Python API and type-checked with tensorrt-stubs; never run
in CI, which has no TensorRT.

Debug build: the cell's ONNX file is parsed as the cell's build parses it (engines/trt/network.py; same build plan:
strongly typed network or precision flags), then every floating-point, non-shape output of every layer is marked as
a network output (``INetworkDefinition.mark_output``); bf16 tensors get a Cast to fp32 first (numpy holds no bf16),
named ``<tensor>:debug_fp32``. The ONNX parser names each layer output after its ONNX tensor, so the outputs match
the fp32 ONNX reference's tensors by name (engines/onnx/matching.py's rule). Marking an output keeps TensorRT
from fusing across it: the debug engine is a less-fused build of the same network, and the report says so; its
final outputs are compared with the cell's engine's to show whether that changed the result.

Census: ``IEngineInspector.get_engine_information(LayerInformationFormat.JSON)`` of the *cell's* engine (built
with ProfilingVerbosity.DETAILED by the builder), inspected through an execution context whose input shapes are
set, so that dynamic-shape layers report their formats ("Format/Datatype": "Row major linear FP16 format",
"Thirty-two wide channel vectorized row major Int8 format", ...; TensorRT 11 splits the field in two, and both
spellings are read). Each compute layer counts in the type of its first input (else its first output).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.base import EngineBuildError, EngineRequest, ModelArtifacts
from engines.onnx.precision_census import CensusNode, PrecisionCensus
from engines.trt.runner import TensorRTRunner
from engines.trt.settings import (
    ENGINE_FILE,
    PROFILING_VERBOSITY,
    BuildPlan,
    engine_cache_parts,
    format_parser_errors,
    plan_build,
)

if TYPE_CHECKING:
    import tensorrt as trt

    from core.cache import ArtifactCache

log = logging.getLogger(__name__)

DEBUG_CACHE_KIND = "tensorrt-debug-engine"
DEBUG_RECIPE = "every float layer output marked (mark_output), bf16 via Cast to fp32"
FP32_SUFFIX = ":debug_fp32"
MARKED_FILE = "marked.json"


# ---------------------------------------------------------------------------------------------------------
# Debug build


def mark_layer_outputs(network: trt.INetworkDefinition) -> dict[str, str]:
    """Mark every float (fp32/fp16/bf16), non-shape layer output that is not yet a network output; returns
    {network output name: ONNX tensor name}. Constant, shape and (de)quantize layers are left alone."""
    import tensorrt as trt

    skipped = {trt.LayerType.CONSTANT, trt.LayerType.SHAPE, trt.LayerType.QUANTIZE}
    readable = {trt.DataType.FLOAT, trt.DataType.HALF}
    marked: dict[str, str] = {}
    outputs = {network.get_output(i).name for i in range(network.num_outputs)}
    tensors: list[trt.ITensor] = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.type in skipped:
            continue
        for j in range(layer.num_outputs):
            tensors.append(layer.get_output(j))
    for tensor in tensors:  # collected first: the casts below add layers
        # ITensor's bool properties read as always-true in tensorrt-stubs (a property chain the stub breaks):
        # output names come from the network, and is_shape_tensor is read as the runtime value it is.
        if tensor.name in outputs or bool(getattr(tensor, "is_shape_tensor", False)):
            continue
        if tensor.dtype in readable:
            network.mark_output(tensor)
            marked[tensor.name] = tensor.name
        elif tensor.dtype == trt.DataType.BF16:
            cast = network.add_cast(tensor, trt.DataType.FLOAT)
            out = cast.get_output(0)
            out.name = tensor.name + FP32_SUFFIX
            network.mark_output(out)
            marked[out.name] = tensor.name
    return marked


def build_debug_engine(request: EngineRequest, plan: BuildPlan, onnx_path: Path) -> tuple[bytes, dict[str, str]]:
    """Parse ``onnx_path`` as the cell's build does, mark every layer output, build; returns the serialized engine
    and {network output name: ONNX tensor name}. No timing cache is read or written: a debug build must not
    leave entries that the cell's own builds would pick up."""
    import tensorrt as trt

    from engines.trt.logger import trt_logger
    from engines.trt.network import create_network, parser_errors

    label = f"tensorrt debug {request.cell_id}"
    logger = trt_logger()
    builder = trt.Builder(logger)
    network = create_network(builder, plan, label)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)) or parser.num_errors:
        raise EngineBuildError(format_parser_errors(request.cell_id, onnx_path, parser_errors(parser)))
    marked = mark_layer_outputs(network)
    log.info("%s: marked %d layer outputs of %s", label, len(marked), onnx_path)

    config = builder.create_builder_config()
    for name in plan.flags:
        flag = getattr(trt.BuilderFlag, name, None)
        if flag is None:
            raise EngineBuildError(f"{label}: tensorrt {trt.__version__} has no BuilderFlag.{name}")
        config.set_flag(flag)
    for name in plan.clear_flags:
        flag = getattr(trt.BuilderFlag, name, None)
        if flag is not None:
            config.clear_flag(flag)
    verbosity = getattr(trt.ProfilingVerbosity, PROFILING_VERBOSITY, None)
    if verbosity is not None:
        config.profiling_verbosity = verbosity
    profile = builder.create_optimization_profile()
    p = request.profile
    for spec in request.inputs:
        low, opt, high = p.shapes(spec)  # batch and every named axis, as the cell's own engine
        profile.set_shape(spec.name, trt.Dims(list(low)), trt.Dims(list(opt)), trt.Dims(list(high)))
    if config.add_optimization_profile(profile) < 0:
        raise EngineBuildError(f"{label}: TensorRT rejected the optimization profile {p.as_dict()}")
    start = time.perf_counter()
    serialized: trt.IHostMemory | None = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"{label}: tensorrt {trt.__version__} could not build the debug engine from "
                               f"{onnx_path}; see the 'tensorrt' log records")
    log.info("%s: built in %.1f s", label, time.perf_counter() - start)
    return bytes(serialized), marked


def debug_runner(request: EngineRequest, artifacts: ModelArtifacts,
                 cache: ArtifactCache) -> tuple[TensorRTRunner, dict[str, str], Path]:
    """The debug engine of ``request``'s cell (built once, cached beside the cell's engines), a runner returning
    every marked output, the {output: ONNX tensor} map and the ONNX file it was parsed from."""
    import tensorrt as trt

    from engines.cuda.runtime import device_properties, driver_and_runtime_versions, set_device
    from engines.trt.library import require_tensorrt
    from engines.trt.logger import trt_logger
    from engines.trt.settings import cuda_device_index

    version = require_tensorrt()
    index = cuda_device_index(request.device)
    if index is None:
        raise EngineBuildError(f"{request.cell_id}: TensorRT needs a CUDA device, got {request.device!r}")
    set_device(index)
    gpu = device_properties(index)
    plan = plan_build(version, request.precision)
    onnx_path = Path(artifacts.onnx_path(plan.onnx_precision))
    parts = engine_cache_parts(request, onnx_key=artifacts.onnx_key(plan.onnx_precision), plan=plan,
                               trt_version=version, gpu_name=gpu["name"],
                               compute_capability=gpu["compute_capability"],
                               cuda_versions=driver_and_runtime_versions())
    parts = {**parts, "debug": DEBUG_RECIPE}

    def build(directory: Path) -> None:
        blob, marked = build_debug_engine(request, plan, onnx_path)
        (directory / ENGINE_FILE).write_bytes(blob)
        (directory / MARKED_FILE).write_text(json.dumps(marked, indent=1, sort_keys=True))

    entry = cache.get_or_build(DEBUG_CACHE_KIND, parts, build, label=f"tensorrt debug {request.cell_id}")
    marked: dict[str, str] = json.loads((entry / MARKED_FILE).read_text())
    runtime = trt.Runtime(trt_logger())
    engine: trt.ICudaEngine | None = runtime.deserialize_cuda_engine((entry / ENGINE_FILE).read_bytes())
    if engine is None:
        raise EngineBuildError(f"{request.cell_id}: could not deserialize the debug engine in {entry}")
    runner = TensorRTRunner(engine, profile=request.profile, runtime=runtime, output_names=None,
                            label=f"tensorrt debug {request.cell_id}")
    return runner, marked, onnx_path


def layer_arrays(runner: TensorRTRunner, marked: Mapping[str, str],
                 feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the debug engine; every output by its ONNX tensor name (the model's own outputs under theirs)."""
    outputs = runner.infer(feed)
    return {marked.get(name, name): np.asarray(value) for name, value in outputs.items()}


# ---------------------------------------------------------------------------------------------------------
# Precision census from the engine inspector


def engine_precision_census(engine: trt.ICudaEngine, context: trt.IExecutionContext | None = None,
                            source: str = "TensorRT engine") -> PrecisionCensus:
    """Census of ``engine``'s layers. Pass the context the engine last ran with (its input shapes set), so that
    layers of a dynamic-shape engine report their formats instead of "N/A due to dynamic shapes"."""
    import tensorrt as trt

    inspector = engine.create_engine_inspector()
    if context is not None:
        inspector.execution_context = context
    return trt_precision_census(inspector.get_engine_information(trt.LayerInformationFormat.JSON), source)


#: Inspector LayerType / ParameterType substrings of conv/gemm/matmul layers.
_HEAVY = ("convolution", "deconvolution", "gemm", "matrixmultiply", "fullyconnected", "attention", "mha")
#: Layers that compute nothing (data movement, format changes, bookkeeping).
_NOT_COMPUTE = ("reformat", "shuffle", "noop", "constant", "slice", "concatenation", "copy", "cast", "identity",
                "shape", "gather", "quantize", "dequantize", "assertion", "padding", "resize", "squeeze")


def trt_precision_census(engine_information_json: str, source: str = "TensorRT engine") -> PrecisionCensus:
    """Census from ``IEngineInspector.get_engine_information(JSON)`` text (ProfilingVerbosity.DETAILED).

    A layer is a conv/gemm/matmul ("matmul") when its LayerType or ParameterType says so, is skipped when it
    only moves or re-formats data, and counts as "other" compute otherwise (pointwise, kgen/Myelin fusions,
    pooling, softmax...). Raises ValueError when the text holds no per-layer detail (an engine built without
    DETAILED profiling verbosity lists names only)."""
    try:
        info = json.loads(engine_information_json)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"engine information is not JSON: {exc}") from exc
    layers = info.get("Layers") if isinstance(info, dict) else None
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise ValueError("engine information lists no layer details: build with ProfilingVerbosity.DETAILED")
    nodes = []
    for layer in layers:
        layer_type = str(layer.get("LayerType", ""))
        parameter_type = str(layer.get("ParameterType", ""))
        key = (layer_type + " " + parameter_type).lower().replace("_", "")
        if any(word in key for word in _HEAVY):
            kind = "matmul"
        elif any(word in layer_type.lower() for word in _NOT_COMPUTE) and not parameter_type:
            continue
        else:
            kind = "other"
        precision = "unknown"
        for group in ("Inputs", "Outputs"):
            for tensor in layer.get(group) or []:
                if isinstance(tensor, dict):
                    precision = _tensor_precision(tensor)
                if precision != "unknown":
                    break
            if precision != "unknown":
                break
        nodes.append(CensusNode(str(layer.get("Name", "")), layer_type or parameter_type, kind, precision))
    return PrecisionCensus(nodes, source)


def _tensor_precision(tensor: Mapping[str, Any]) -> str:
    text = " ".join(str(tensor.get(k, "")) for k in ("Format/Datatype", "DataType", "Datatype", "Format")).lower()
    for words, precision in ((("bf16", "bfloat16", "bfloat"), "bf16"), (("fp16", "half"), "fp16"),
                             (("fp8", "float8", "e4m3"), "fp8"), (("int8",), "int8"), (("int4", "fp4"), "int4"),
                             (("fp32", "float"), "fp32")):
        if any(w in text for w in words):
            return precision
    return "unknown"

