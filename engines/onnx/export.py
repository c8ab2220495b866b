"""PyTorch -> ONNX with a dynamic batch axis, then onnx.checker and shape inference.

Why here and once: ONNX Runtime and TensorRT both consume this file, so both judge the same graph.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from engines.base import EngineBuildError, EngineFacts, InputSpec

log = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
DEFAULT_EXPORT_OPTIONS: dict[str, Any] = {"opset": 18, "exporter": "dynamo", "sample_batch": 2}
_EXPORTERS = ("dynamo", "torchscript")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def export_options(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    opts = {**DEFAULT_EXPORT_OPTIONS, **(overrides or {})}
    unknown = set(opts) - set(DEFAULT_EXPORT_OPTIONS)
    if unknown:
        raise ValueError(f"unknown export option(s) {sorted(unknown)}; valid: {sorted(DEFAULT_EXPORT_OPTIONS)}")
    if opts["exporter"] not in _EXPORTERS:
        raise ValueError(f"export option exporter={opts['exporter']!r}; valid: {_EXPORTERS}")
    return opts


def sample_inputs(inputs: tuple[InputSpec, ...], batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Non-constant example inputs for tracing (a constant input can hide data-dependent paths)."""
    rng = np.random.default_rng(seed)
    out = []
    for spec in inputs:
        shape = spec.batch_shape(batch)
        if np.issubdtype(np.dtype(spec.dtype), np.integer):
            arr = rng.integers(int(spec.low), int(spec.high) + 1, size=shape).astype(spec.dtype)
        else:
            arr = rng.uniform(spec.low, spec.high, size=shape).astype(spec.dtype)
        out.append(torch.from_numpy(arr))
    return tuple(out)


def export_onnx(module: torch.nn.Module, model_name: str, inputs: tuple[InputSpec, ...],
                outputs: tuple[str, ...], path: Path, options: dict[str, Any]) -> None:
    """Export with the batch axis dynamic; raise EngineBuildError naming the model on any failure."""
    args = sample_inputs(inputs, options["sample_batch"])
    names = [i.name for i in inputs]
    log.info("exporting %s to ONNX (opset %s, %s exporter)", model_name, options["opset"], options["exporter"])
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            if options["exporter"] == "dynamo":
                batch = torch.export.Dim("batch", min=1, max=4096)
                torch.onnx.export(
                    module.eval(), args, str(path), input_names=names, output_names=list(outputs),
                    dynamic_shapes={n: {0: batch} for n in _forward_arg_names(module, names)},
                    opset_version=options["opset"], dynamo=True, external_data=False,
                    verbose=False, optimize=True,
                )
            else:
                torch.onnx.export(
                    module.eval(), args, str(path), input_names=names, output_names=list(outputs),
                    dynamic_axes={n: {0: "batch"} for n in [*names, *outputs]},
                    opset_version=options["opset"], dynamo=False,
                )
    except Exception as exc:  # the exporter raises many types; the message is what the user needs
        message = _ANSI.sub("", str(exc))
        raise EngineBuildError(f"ONNX export of model {model_name!r} failed ({options}): "
                               f"{type(exc).__name__}: {message}") from exc
    check_onnx(path, model_name)


def _forward_arg_names(module: torch.nn.Module, fallback: list[str]) -> list[str]:
    """dynamic_shapes is keyed by forward()'s parameter names, which may differ from the ONNX names."""
    import inspect

    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) != len(fallback):
        raise EngineBuildError(f"model forward() takes {[p.name for p in params]}, config declares "
                               f"{len(fallback)} inputs {fallback}")
    return [p.name for p in params]


def check_onnx(path: Path, model_name: str) -> None:
    """onnx.checker (full) and strict shape inference; the batch axis must stay symbolic."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
        model = onnx.shape_inference.infer_shapes(onnx.load(str(path)), check_type=True, strict_mode=True)
    except Exception as exc:
        raise EngineBuildError(f"ONNX model of {model_name!r} fails onnx.checker/shape inference: {exc}") from exc
    for value in model.graph.input:
        dim0 = value.type.tensor_type.shape.dim[0]
        if dim0.HasField("dim_value"):
            raise EngineBuildError(f"ONNX model of {model_name!r}: input {value.name!r} has a fixed batch "
                                   f"axis of {dim0.dim_value}; the export must keep it dynamic")


_WEIGHT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                 onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8}


def _is_weight(init: onnx.TensorProto) -> bool:
    """Weights, not shape constants (int64) or a QDQ model's scales and zero points."""
    return init.data_type in _WEIGHT_TYPES and not init.name.endswith(("_scale", "_zero_point"))


def onnx_facts(path: Path) -> EngineFacts:
    """Size, node count and parameter count (weight elements, as torch counts them) of an ONNX file."""
    model = onnx.load(str(path), load_external_data=False)
    params = sum(int(np.prod(init.dims)) if len(init.dims) else 1 for init in model.graph.initializer
                 if _is_weight(init))
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return EngineFacts(artifact_bytes=path.stat().st_size, layers=len(model.graph.node), parameters=params,
                       detail={"layer_kind": "onnx nodes", "op_histogram": dict(sorted(ops.items()))})
