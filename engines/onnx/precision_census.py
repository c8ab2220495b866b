"""Which precision a graph really computes in: its compute nodes counted by the element type they compute on.

Why: ONNX Runtime's CPU EP runs an fp16 node it has no fp16 kernel for by wrapping it in Casts, then folds
the Casts away where it can, so an fp16-converted model's *optimized* graph may compute everything in fp32
(EfficientNet-Lite0: 49 NCHWc Convs, all fp32), and a model whose fp16 layer overflows passes as
"onnxruntime fp16". The census of the optimized graph (``SessionOptions.optimized_model_filepath``) shows it,
and ``verdict(precision)`` turns it into a rule (docs/localization.md):

* compute nodes are classed as conv/gemm/matmul ("matmul": Conv, Gemm, MatMul, their fused and quantized
  forms, attention), "norm", "activation", "reduce" and "elementwise"; Casts, (de)quantization, layout and
  shape nodes compute nothing and are not counted;
* a node computes in the element type of its first input (QLinear*/QGemm/...Integer: int8; uint8 counts as
  int8), or of its output when the input's type is unknown; a contrib op's output whose type shape inference
  does not know takes its first floating input's type (EmbedLayerNormalization: the tables, not the ids);
* a cell whose nodes' types are unknown is not judged either, and says that the census cannot tell;
* a cell named for a precision P **computes (almost) nothing in P** when fewer than half (``MIN_SHARE``) of its
  conv/gemm/matmul nodes compute in P, or, in a graph without any, fewer than half of all its compute nodes.

For TensorRT the same census is made from the engine inspector's layer information (engines/trt/debug.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
from onnx import TensorProto

if TYPE_CHECKING:
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()

#: A cell computes "in" its precision when at least this share of the counted nodes do.
MIN_SHARE = 0.5

KINDS = ("matmul", "norm", "activation", "reduce", "elementwise")
_KIND_OF: dict[str, str] = {}
for _kind, _ops in {
    "matmul": ("Conv", "ConvTranspose", "ConvInteger", "Gemm", "MatMul", "MatMulInteger", "FusedConv", "FusedGemm",
               "FusedMatMul", "NhwcConv", "NhwcFusedConv", "QLinearConv", "QLinearMatMul", "QGemm",
               "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "MatMulNBits", "Attention", "QAttention",
               "MultiHeadAttention", "GroupQueryAttention", "Einsum", "GRU", "LSTM", "RNN"),
    "norm": ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
             "SkipSimplifiedLayerNormalization", "BatchNormalization", "InstanceNormalization",
             "GroupNormalization", "RMSNormalization", "LpNormalization", "EmbedLayerNormalization"),
    "activation": ("Relu", "Clip", "Sigmoid", "Tanh", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Softmax",
                   "LogSoftmax", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu", "Mish", "Softplus",
                   "Softsign", "PRelu", "ThresholdedRelu", "Exp", "Erf", "QLinearSigmoid", "QLinearLeakyRelu",
                   "QLinearSoftmax", "BiasSoftmax"),
    "reduce": ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSumExp", "ReduceSumSquare", "GlobalAveragePool", "AveragePool", "MaxPool", "GlobalMaxPool",
               "LpPool", "QLinearAveragePool", "QLinearGlobalAveragePool", "CumSum"),
    "elementwise": ("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Max", "Min", "Sum", "Mean", "Neg",
                    "Abs", "Log", "BiasAdd", "QLinearAdd", "QLinearMul", "Sin", "Cos"),
}.items():
    for _op in _ops:
        _KIND_OF[_op] = _kind
_KIND_TEXT = {"matmul": "conv/gemm/matmul"}


def kind_of(op_type: str) -> str | None:
    """The kind (KINDS) the census counts ``op_type`` as; None for a node that computes nothing it counts."""
    return _KIND_OF.get(op_type)
_INTEGER_COMPUTE = ("QLinear", "QGemm", "ConvInteger", "MatMulInteger", "QAttention", "DynamicQuantizeMatMul",
                    "MatMulIntegerToFloat")
PRECISION_OF_TYPE: dict[int, str] = {
    TensorProto.FLOAT: "fp32", TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16", TensorProto.DOUBLE: "fp64",
    TensorProto.INT8: "int8", TensorProto.UINT8: "int8", TensorProto.INT4: "int4", TensorProto.UINT4: "int4",
    TensorProto.FLOAT8E4M3FN: "fp8", TensorProto.FLOAT8E4M3FNUZ: "fp8", TensorProto.FLOAT8E5M2: "fp8",
    TensorProto.FLOAT8E5M2FNUZ: "fp8",
}


@dataclass(frozen=True)
class CensusNode:
    name: str
    op_type: str
    kind: str
    precision: str  # fp32, fp16, bf16, int8, ... or "unknown"
    domain: str = ""


class PrecisionCensus(dict[str, int]):
    """Compute nodes per precision (``{"fp32": 50, "int8": 43}``), with the node list, counts per kind and
    ``verdict(precision)``. ``source`` says what was counted (an optimized ONNX file, a TensorRT engine)."""

    def __init__(self, nodes: Iterable[CensusNode], source: str = "") -> None:
        self.nodes = tuple(nodes)
        self.source = source
        super().__init__(Counter(n.precision for n in self.nodes).most_common())

    def by_kind(self) -> dict[str, dict[str, int]]:
        out: dict[str, Counter[str]] = {}
        for n in self.nodes:
            out.setdefault(n.kind, Counter())[n.precision] += 1
        return {k: dict(v.most_common()) for k, v in out.items()}

    def verdict(self, precision: str) -> tuple[bool, str]:
        """(ok, text): does this graph compute in ``precision``? (the module docstring's rule)"""
        wanted = "fp32" if precision == "tf32" else precision
        heavy = [n for n in self.nodes if n.kind == "matmul"]
        counted, what = (heavy, _KIND_TEXT["matmul"]) if heavy else (list(self.nodes), "compute")
        if not counted:
            return False, f"{precision}: {self.source or 'the graph'} has no compute nodes to count"
        matching = sum(1 for n in counted if n.precision == wanted)
        share = matching / len(counted)
        mix = ", ".join(f"{p} {c}" for p, c in Counter(n.precision for n in counted).most_common())
        ok = share >= MIN_SHARE
        text = (f"{matching} of {len(counted)} {what} nodes compute in {wanted} ({mix}); "
                f"all compute nodes: {self.summary()}")
        if precision == "tf32":
            text += "; TF32 is a math mode of fp32 nodes, invisible in a graph"
        unknown = sum(1 for n in counted if n.precision == "unknown")
        if not ok and unknown and matching + unknown >= MIN_SHARE * len(counted):
            text = (f"named {precision}, and the census cannot tell whether it computes in {wanted}: {unknown} of "
                    f"{len(counted)} {what} nodes have no known element type: " + text)
        elif not ok:
            amount = "nothing" if share == 0 else "almost nothing"
            text = f"named {precision} but computes {amount} in {wanted}: " + text
        return ok, text

    def summary(self) -> str:
        return ", ".join(f"{p} {c}" for p, c in self.items()) or "none"

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "counts": dict(self), "by_kind": self.by_kind(),
                "nodes": [[n.name, n.op_type, n.kind, n.precision] for n in self.nodes]}


_FLOATING = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


def precision_census(optimized_onnx_path: Path | str | onnx.ModelProto) -> PrecisionCensus:
    """Census of an (optimized) ONNX graph's compute nodes by the precision they compute in."""
    if isinstance(optimized_onnx_path, onnx.ModelProto):
        model, source = optimized_onnx_path, "ONNX graph"
    else:
        model, source = onnx.load(str(optimized_onnx_path), load_external_data=False), str(optimized_onnx_path)
    types = element_types(model)
    nodes = []
    for node in model.graph.node:
        kind = _KIND_OF.get(node.op_type)
        if kind is None:
            continue
        if node.op_type.startswith(_INTEGER_COMPUTE):
            elem = types.get(node.input[0]) if node.input else None
            precision = PRECISION_OF_TYPE.get(elem, "int8") if elem is not None else "int8"
        else:
            elem = next((types[i] for i in node.input[:1] if i in types), None)
            if elem is None:
                elem = next((types[o] for o in node.output[:1] if o in types), None)
            precision = PRECISION_OF_TYPE.get(elem, "unknown") if elem is not None else "unknown"
        nodes.append(CensusNode(node.name, node.op_type, kind, precision, node.domain))
    return PrecisionCensus(nodes, source)


def optimized_census(onnx_path: Path, options: Callable[[], ort.SessionOptions], providers: list[Any],
                     dst: Path) -> PrecisionCensus:
    """Let ONNX Runtime optimize ``onnx_path`` as the engine's session would (``options()``, ``providers``),
    save the result to ``dst`` and count it."""
    from engines.onnx.intermediates import save_optimized

    return precision_census(save_optimized(onnx_path, options(), providers, dst))


def element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor whose type can be known: the file's declarations, ONNX shape inference,
    then, in graph order, simple rules for ops shape inference does not know (contrib ops of an optimized
    graph): Cast -> its ``to``; QuantizeLinear -> its zero point's type (uint8 without one); DequantizeLinear
    -> its scale's type; a quantized op -> its output zero point's type; anything else -> its first input's."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shape inference refuses some graphs; the declarations and rules below still apply
        inferred = model
    g = inferred.graph
    types: dict[str, int] = {i.name: i.data_type for i in g.initializer}
    for v in [*g.input, *g.output, *g.value_info]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
            types[v.name] = v.type.tensor_type.elem_type
    for node in g.node:
        for index, out in enumerate(node.output):
            if not out or out in types:
                continue
            guess = _rule_type(node, index, types)
            if guess:
                types[out] = guess
    return types


def _rule_type(node: onnx.NodeProto, index: int, types: Mapping[str, int]) -> int | None:
    from engines.onnx.matching import _QUANT_OUTPUT_PARAMS

    if node.op_type == "Cast":
        return next((int(a.i) for a in node.attribute if a.name == "to"), None)
    if node.op_type == "QuantizeLinear":
        return types.get(node.input[2]) if len(node.input) > 2 and node.input[2] else TensorProto.UINT8
    if node.op_type == "DequantizeLinear":
        return types.get(node.input[1]) if len(node.input) > 1 else None
    if index == 0 and node.op_type in _QUANT_OUTPUT_PARAMS:
        zero = _QUANT_OUTPUT_PARAMS[node.op_type][1]
        if zero < len(node.input) and node.input[zero]:
            return types.get(node.input[zero])
    known = [types[i] for i in node.input if i and i in types]
    # a fused op's first input may be token ids (EmbedLayerNormalization: int64 ids, fp32 tables): the values it
    # computes on are its floating inputs
    return next((t for t in known if t in _FLOATING), known[0] if known else None)
