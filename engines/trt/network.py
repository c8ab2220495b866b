"""The network steps of a build: create the (strongly typed) network, parse the ONNX file into it, check its I/O.

Why a module of its own: the cell's build and its debug build (engines/trt/debug.py) parse alike, and what can
go wrong here (a node the parser rejects, inputs or outputs that are not the config's, a static axis the
profile needs dynamic) must fail with the cell, the file and the node named. Each step takes its collaborators
(``trt.Builder``, ``trt.OnnxParser``, ``trt.INetworkDefinition``, the ``tensorrt`` module) as arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import EngineBuildError, EngineRequest
from engines.trt.library import tensorrt_api
from engines.trt.runner import dims_tuple
from engines.trt.settings import BuildPlan, ParserErrorInfo, format_parser_errors, parse_version

if TYPE_CHECKING:
    import tensorrt as trt


def create_network(builder: trt.Builder, plan: BuildPlan, label: str, api: Any = None) -> trt.INetworkDefinition:
    """An empty network, strongly typed where ``plan`` says so (the cell's build and its debug build alike).

    ``api`` is the tensorrt module (by default tensorrt itself), for its NetworkDefinitionCreationFlag."""
    api = tensorrt_api(api)
    network_flags = 0
    if plan.strongly_typed:
        # TensorRT 11 deprecates the flag (every network is strongly typed) and may drop it later.
        strongly_typed = getattr(api.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        if strongly_typed is not None:
            network_flags |= 1 << int(strongly_typed)
        elif parse_version(api.__version__)[0] < 11:
            raise EngineBuildError(f"{label}: tensorrt {api.__version__} has no STRONGLY_TYPED network flag")
    network: trt.INetworkDefinition | None = builder.create_network(network_flags)
    if network is None:
        raise EngineBuildError(f"{label}: Builder.create_network failed; see the 'tensorrt' log records")
    return network


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


def parse_onnx(parser: trt.OnnxParser, onnx_path: Path, cell_id: str) -> None:
    """``parser.parse_from_file(onnx_path)``; EngineBuildError naming the cell, the file and every parser error
    (node, operator, message) when the parse fails or leaves an error."""
    parsed = parser.parse_from_file(str(onnx_path))
    errors = parser_errors(parser)
    if not parsed or errors:
        raise EngineBuildError(format_parser_errors(cell_id, onnx_path, errors))


def check_network_io(request: EngineRequest, network: trt.INetworkDefinition, onnx_path: Path) -> None:
    """EngineBuildError unless the parsed network's inputs are the request's (by name and rank), the request's
    outputs are among its outputs, and every axis the profile varies (the batch, named axes) is dynamic."""
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
