"""fp32 ONNX -> fp16 / bf16 ONNX with fp32 inputs and outputs, so feeds stay the same for every cell.

Why one converter for both: TensorRT >= 10.12 builds strongly-typed networks, where precision comes
from the file's types, and ONNX Runtime runs the same file, so both judge identical graphs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.version_converter
from onnx import TensorProto, numpy_helper

from engines import versions
from engines.base import EngineBuildError

CONVERTER = "onnxruntime.transformers.float16"
BF16_MIN_OPSET = 22
#: Kept in fp32 in a bf16 graph, beside the converter's own block list. ONNX Runtime's CUDA EP has no bf16
#: Clip: it expands Clip into its ONNX function body (Less, Where), and no EP has a bf16 Less kernel, so the
#: session fails ("Provider type for Less node with name '' is not set": MiniLM on an H100, whose pooling clamps
#: the mask sum). The comparisons themselves: a position or mask compared in bf16 is wrong past 256 anyway.
#: MaxPool: the CUDA EP has no bf16 MaxPool either ("Provider type for MaxPool node with name 'node_max_pool2d'
#: is not set": digits_cnn on an H200, 2026-11-25); a max of bf16 values is exact in fp32, so nothing is lost.
BF16_KEEP_FP32 = ("Clip", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal", "MaxPool")


def _opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def convert_parts(fp32_key: str, precision: str) -> dict[str, Any]:
    return {"source_onnx": fp32_key, "precision": precision, "converter": CONVERTER,
            "onnxruntime": versions.version_of("onnxruntime"), "onnx": versions.version_of("onnx"),
            "keep_io_types": True, "keep_fp32": list(_block_list(precision)), "revision": 2}


def _block_list(precision: str) -> tuple[str, ...]:
    from engines.ort_import import import_onnxruntime

    import_onnxruntime()
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    return (*DEFAULT_OP_BLOCK_LIST, *(BF16_KEEP_FP32 if precision == "bf16" else ()))


def convert_precision(src: Path, dst: Path, precision: str, model_name: str) -> None:
    from engines.ort_import import import_onnxruntime

    import_onnxruntime()  # telemetry off before onnxruntime.transformers imports onnxruntime
    from onnxruntime.transformers.float16 import convert_float_to_float16

    if precision not in ("fp16", "bf16"):
        raise ValueError(f"convert_precision: {precision!r} is not fp16 or bf16")
    original = onnx.load(str(src))
    fp32_init = {init.name: numpy_helper.to_array(init) for init in original.graph.initializer}
    try:
        model = convert_float_to_float16(original, keep_io_types=True, disable_shape_infer=False,
                                         op_block_list=list(_block_list(precision)))
        # The converter leaves stale intermediate types around an op it keeps in fp32 (MiniLM's Clip in
        # bf16: "Inferred elem type differs: (1) vs (10)"); infer them again from the graph itself.
        del model.graph.value_info[:]
        _topological_sort(model.graph)
        model = onnx.shape_inference.infer_shapes(model)
        if precision == "bf16":
            # bfloat16 entered the type lists of Conv, Gemm and friends in opset 22.
            model = onnx.version_converter.convert_version(model, max(BF16_MIN_OPSET, _opset(model)))
            _fp16_to_bf16(model, fp32_init)
        _topological_sort(model.graph)
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        raise EngineBuildError(f"converting {model_name!r} ONNX to {precision} failed: "
                               f"{type(exc).__name__}: {exc}") from exc
    onnx.save(model, str(dst))


def _topological_sort(graph: onnx.GraphProto) -> None:
    """The converter appends its input casts after their consumers; the checker wants producers first."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:
            raise ValueError(f"graph has a cycle or dangling inputs at nodes {[n.name for n in pending[:5]]}")
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        pending = [n for n in pending if all(n is not r for r in ready)]
    del graph.node[:]
    graph.node.extend(ordered)


def _fp16_to_bf16(model: onnx.ModelProto, fp32_init: dict[str, np.ndarray]) -> None:
    """Retype an fp16-converted graph as bf16: initializers re-rounded from their fp32 originals
    (not from fp16, which would clamp range), casts and declared types switched to BFLOAT16."""
    for i, init in enumerate(model.graph.initializer):
        if init.data_type == TensorProto.FLOAT16:
            source = fp32_init.get(init.name)
            values = source if source is not None else numpy_helper.to_array(init).astype(np.float32)
            model.graph.initializer[i].CopyFrom(_bf16_tensor(values, init.name))
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT16:
                attr.i = TensorProto.BFLOAT16
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT16:
                attr.t.CopyFrom(_bf16_tensor(numpy_helper.to_array(attr.t).astype(np.float32), attr.t.name))
    for value in [*model.graph.value_info, *model.graph.input, *model.graph.output]:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT16:
            value.type.tensor_type.elem_type = TensorProto.BFLOAT16


def _bf16_tensor(values: np.ndarray, name: str) -> onnx.TensorProto:
    """Round-to-nearest-even fp32 -> bf16, stored as raw 16-bit words."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = 0x7FC0
    tensor = onnx.TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=list(values.shape))
    tensor.raw_data = rounded.tobytes()
    return tensor


# ---- ONNX Runtime's transformer fusions (engine_options.onnxruntime.transformer_fusion) ----------------

#: What fuses: onnxruntime.transformers.optimizer, the tool ONNX Runtime documents for BERT-class models.
FUSION_OPTIMIZER = "onnxruntime.transformers.optimizer"
#: The exporter whose graphs that optimizer's patterns match. Measured (torch 2.14, onnxruntime 1.32, MiniLM):
#: the dynamo exporter's graph fuses LayerNorm and Gelu but never Attention, eager or SDPA attention alike;
#: the TorchScript exporter's graph of eager attention with an additive mask fuses all of it.
FUSION_EXPORTER = "torchscript"
#: Fused operators that show the optimizer recognised attention; a "fused" graph without one is refused.
ATTENTION_OPS = ("Attention", "MultiHeadAttention")


def transformer_shape(module: Any) -> tuple[int, int]:
    """(num_heads, hidden_size) from the first submodule carrying a Hugging Face config
    (``num_attention_heads``, ``hidden_size``); (0, 0), which the optimizer reads as "detect", otherwise."""
    for sub in module.modules():
        config = getattr(sub, "config", None)
        heads, hidden = getattr(config, "num_attention_heads", None), getattr(config, "hidden_size", None)
        if isinstance(heads, int) and isinstance(hidden, int):
            return heads, hidden
    return 0, 0


def fusion_parts(fusion: str, num_heads: int, hidden_size: int) -> dict[str, Any]:
    """The fusion's part of a fused graph's cache key (the export it starts from is keyed beside it)."""
    return {"fusion": fusion, "optimizer": FUSION_OPTIMIZER, "num_heads": num_heads,
            "hidden_size": hidden_size, "opt_level": 0, "use_gpu": False,
            "onnxruntime": versions.version_of("onnxruntime"), "revision": 1}


def fuse_transformer(src: Path, dst: Path, fusion: str, num_heads: int, hidden_size: int,
                     model_name: str) -> dict[str, int]:
    """Fuse ``src`` with ONNX Runtime's transformer optimizer (``model_type=fusion``) into ``dst``; returns the
    fused-operator counts. ``opt_level=0``: the file holds the optimizer's fusions only, and the session applies
    ONNX Runtime's own graph optimizations as it does for every cell. ``use_gpu=False``: one graph for the CPU
    and CUDA execution providers (both run the fused contrib operators).

    Raises EngineBuildError when nothing was fused into an attention operator: such a "fused" cell would
    measure the unfused graph under another name.
    """
    from engines.ort_import import import_onnxruntime

    import_onnxruntime()  # telemetry off before onnxruntime.transformers imports onnxruntime
    from onnxruntime.transformers.optimizer import optimize_model

    try:
        optimized = optimize_model(str(src), model_type=fusion, num_heads=num_heads, hidden_size=hidden_size,
                                   opt_level=0, use_gpu=False)
        stats = {k: int(v) for k, v in optimized.get_fused_operator_statistics().items() if v}
    except Exception as exc:
        raise EngineBuildError(f"transformer fusion ({fusion}) of {model_name!r} failed: "
                               f"{type(exc).__name__}: {exc}") from exc
    if not any(stats.get(op) for op in ATTENTION_OPS):
        raise EngineBuildError(f"transformer fusion ({fusion}) of {model_name!r} fused no attention "
                               f"({FUSION_OPTIMIZER}, num_heads={num_heads}, hidden_size={hidden_size}; fused: "
                               f"{stats or 'nothing'}): "
                               "its patterns match eager attention with an additive mask, exported by the TorchScript "
                               "exporter (e.g. Hugging Face attn_implementation='eager')")
    optimized.save_model_to_file(str(dst))
    return stats
