"""Which engine-graph tensor carries each tensor of the fp32 reference graph, and how to read it as that tensor.

Why a module of its own: the rule is the localization's judgement (which engine value stands for which reference
value, dequantized and re-laid-out how); it is pure graph work on ``onnx`` protos, and runs no session. The ONNX Runtime
side (marking every tensor, the optimized-graph replay) is engines/onnx/intermediates.py, and the TensorRT
localization (engines/localize.py) pairs its debug engine's layers through ``pair_layers`` too.

Matching rule (docs/localization.md): an fp32 tensor X corresponds to the tensor that carries X's value to X's
consumers in the engine's graph, which is, in order of preference:

1. a tensor named X, or connected to X through nodes that only re-type, re-quantize or re-lay-out a value:
   Cast (fp16/bf16 conversion, ONNX Runtime's inserted Casts), QuantizeLinear -> DequantizeLinear (the QDQ
   file), Identity, Transpose (ONNX Runtime's NHWC layout) and NCHWc Reorder nodes, but never a node that is
   itself in the reference graph;
2. the output of a node that ONNX Runtime made from X's producer: its name is the producer's name, or that
   name with ``_token_N`` suffixes (a Conv with its Q/DQ fused into a QLinearConv keeps the Conv's name).

The first such tensor in the engine graph's order is compared, after those read only by Cast, Identity, Transpose or
Reorder nodes (the value X's consumers read is further down that chain: a Conv's output rounded through fp16 and
back is compared as the rounded copy its consumers read; Q/DQ chains keep their order). Integer tensors are
dequantized with the scale and zero point of the QuantizeLinear / QLinear node that produced them (or of the
DequantizeLinear that reads them); an NHWC tensor whose shape is the reference's (N, H, W, C) is transposed back;
a tensor in ONNX Runtime's blocked NCHWc layout is read back through a ReorderOutput (``reorder_blocked``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from metrics.localize import LayerPair

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
_NP_FLOATS = (np.float16, np.float32, np.float64)
#: Ops whose output repeats a value already compared (or is not a layer): not rows of the report.
MOVEMENT_OPS = frozenset({
    "Identity", "Cast", "CastLike", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Shape", "Size",
    "Constant", "ConstantOfShape", "QuantizeLinear", "DequantizeLinear", "Expand", "Tile",
})
#: Nodes that pass a value on with another type, quantization or layout (input 0 -> output 0).
_ALIAS_OPS = frozenset({"Cast", "Identity", "QuantizeLinear", "DequantizeLinear", "Transpose",
                        "ReorderInput", "ReorderOutput"})
#: The alias ops that keep a value's quantization: a tensor read only by them is not what X's consumers read.
_PASS_ON_OPS = _ALIAS_OPS - {"QuantizeLinear", "DequantizeLinear"}
_NCHWC = "com.microsoft.nchwc"
#: The suffix of an NCHWc tensor read back into NCHW (``reorder_blocked``).
REORDERED = "::nchw"
_TOKEN_SUFFIX = re.compile(r"(_token_\d+)+$")
#: (op_type) -> positions of (scale, zero point) of the node's quantized output.
_QUANT_OUTPUT_PARAMS = {
    "QuantizeLinear": (1, 2), "QLinearConv": (6, 7), "QLinearMatMul": (6, 7), "QLinearAdd": (6, 7),
    "QLinearMul": (6, 7), "QGemm": (7, 8), "QLinearSigmoid": (3, 4), "QLinearLeakyRelu": (3, 4),
    "QLinearAveragePool": (3, 4), "QLinearGlobalAveragePool": (3, 4), "QLinearSoftmax": (3, 4),
    "QLinearConcat": (0, 1),
}
#: (op_type) -> {input position: (scale, zero point) positions} for quantized inputs.
_QUANT_INPUT_PARAMS: dict[str, dict[int, tuple[int, int]]] = {
    "DequantizeLinear": {0: (1, 2)}, "QLinearConv": {0: (1, 2)}, "QLinearMatMul": {0: (1, 2), 3: (4, 5)},
    "QLinearAdd": {0: (1, 2), 3: (4, 5)}, "QLinearMul": {0: (1, 2), 3: (4, 5)}, "QGemm": {0: (1, 2)},
    "QLinearSigmoid": {0: (1, 2)}, "QLinearLeakyRelu": {0: (1, 2)}, "QLinearAveragePool": {0: (1, 2)},
    "QLinearGlobalAveragePool": {0: (1, 2)}, "QLinearSoftmax": {0: (1, 2)},
}
#: Ops that move integer values without changing their quantization.
_QUANT_PASSTHROUGH = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "MaxPool", "Identity",
                                "Slice", "Gather", "Concat", "Resize"})



class _Classes:
    """Union-find over tensor names."""

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self._parent.setdefault(x, x)
        root = x
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[x] != root:
            self._parent[x], x = root, self._parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self._parent[rb] = ra


@dataclass(frozen=True)
class ReferenceTensor:
    """A float node output of the fp32 reference graph: a row of the report."""

    name: str
    op_type: str
    node: str
    scope: str
    position: int


@dataclass(frozen=True)
class EngineTensor:
    """The engine-graph tensor chosen for a reference tensor, and how to read it."""

    name: str
    quant: tuple[str, str | None] | None = None  # (scale initializer, zero-point initializer) for int tensors
    how: str = ""  # "name", "alias", "fused node <name>"


@dataclass
class TensorMatch:
    reference: list[ReferenceTensor]
    engine: dict[str, list[EngineTensor]]  # reference name -> candidates in engine-graph order
    blocked: set[str] = field(default_factory=set)  # engine tensors in the blocked NCHWc layout
    blocked_refs: set[str] = field(default_factory=set)  # reference tensors the engine holds only in that layout
    blocked_as: dict[str, str] = field(default_factory=dict)  # blocked engine tensor -> the reference tensor it holds


def reorder_blocked(reference: onnx.ModelProto, original: onnx.ModelProto, run: onnx.ModelProto,
                    ref_arrays: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``run`` where every NCHWc tensor that holds a reference tensor is also read back into NCHW by
    ONNX Runtime's own ``ReorderOutput`` (with the reference's channel count: blocked channels are padded), as
    ``<tensor>::nchw``. Why: at ORT_ENABLE_ALL on x86 every Conv runs in the blocked layout, and without this
    the localizer compared 3 of ResNet-18's 49 tensors (docs/attribution.md); the reordered copy is the value
    the next plain node would read."""
    out = onnx.ModelProto()
    out.CopyFrom(run)
    for name, ref in match_tensors(reference, original, run).blocked_as.items():
        value = ref_arrays.get(ref)
        if value is None or value.ndim != 4:
            continue
        out.graph.node.append(onnx.helper.make_node("ReorderOutput", [name], [name + REORDERED], domain=_NCHWC,
                                                    name=name + REORDERED, channels=int(value.shape[1])))
    return out


def reference_tensors(model: onnx.ModelProto) -> list[ReferenceTensor]:
    """Float outputs of the reference graph's nodes in topological (file) order, movement ops left out."""
    typed = _types(model)
    rows: list[ReferenceTensor] = []
    for node in model.graph.node:
        if node.op_type in MOVEMENT_OPS:
            continue
        for name in node.output:
            if name and typed.get(name, TensorProto.FLOAT) in FLOAT_TYPES:
                rows.append(ReferenceTensor(name, node.op_type, node.name, _scope(node), len(rows)))
    return rows


def match_tensors(reference: onnx.ModelProto, original: onnx.ModelProto,
                  engine: onnx.ModelProto | None = None) -> TensorMatch:
    """For each reference tensor, the engine-graph tensors that carry its value (module docstring's rule).

    ``original`` is the engine's file as built (fp16 conversion, QDQ file); ``engine`` the graph that was run
    (ONNX Runtime's optimized graph), or None when the original itself was run."""
    run = engine if engine is not None else original
    rows = reference_tensors(reference)
    ref_names = {n for node in reference.graph.node for n in node.output} | {i.name for i in reference.graph.input}
    classes = _Classes()
    for graph in (original.graph, run.graph):
        for node in graph.node:
            if node.op_type in _ALIAS_OPS and node.input and node.output and node.input[0] and node.output[0]:
                if not (node.input[0] in ref_names and node.output[0] in ref_names):
                    classes.union(node.input[0], node.output[0])
    by_class: dict[str, str] = {}
    for row in rows:
        by_class.setdefault(classes.find(row.name), row.name)
    original_nodes = {node.name: node for node in original.graph.node if node.name}
    initializers = {init.name for init in run.graph.initializer}
    producers = {name: node for node in run.graph.node for name in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in run.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    blocked: set[str] = set()
    blocked_refs: set[str] = set()
    blocked_as: dict[str, str] = {}
    op_of = {row.name: row.op_type for row in rows}
    found: dict[str, list[EngineTensor]] = {}
    for node in run.graph.node:
        is_blocked = (node.domain == _NCHWC and node.op_type != "ReorderOutput") or (
            node.domain != _NCHWC and bool(node.input) and node.input[0] in blocked)
        for index, name in enumerate(node.output):
            if not name:
                continue
            ref = by_class.get(classes.find(name))
            how = "name" if name == ref else "alias"
            if ref is None:
                source = original_nodes.get(_TOKEN_SUFFIX.sub("", node.name))
                if source is not None and index < len(source.output):
                    ref, how = by_class.get(classes.find(source.output[index])), f"fused node {node.name}"
            if is_blocked:
                blocked.add(name)
                if ref is None and node.name.endswith("_nchwc"):  # NCHWc nodes are named <fused node>_nchwc
                    ref = by_class.get(classes.find(node.name[: -len("_nchwc")]))
                if ref is not None:
                    blocked_refs.add(ref)
                    if _holds(node, op_of.get(ref, "")):
                        blocked_as[name] = ref
                        # read through the ReorderOutput the replay adds (reorder_blocked)
                        found.setdefault(ref, []).append(EngineTensor(name + REORDERED, None,
                                                                      f"NCHWc {name} reordered"))
                continue
            if ref is None:
                continue
            quant = _quant_params(name, producers, consumers, initializers)
            found.setdefault(ref, []).append(EngineTensor(name, quant, how))
    outputs = {o.name for o in run.graph.output}

    def passed_on(candidate: EngineTensor) -> bool:
        """Read only by nodes that re-type or re-lay-out it: the value X's consumers read is further down the
        chain (a tensor rounded through fp16 and back: they read the rounded copy, not the node's own output)."""
        name = candidate.name.removesuffix(REORDERED)
        readers = consumers.get(name, [])
        return bool(readers) and name not in outputs and all(n.op_type in _PASS_ON_OPS for n in readers)

    found = {ref: sorted(candidates, key=passed_on) for ref, candidates in found.items()}  # stable: else in order
    return TensorMatch(rows, found, blocked, blocked_refs, blocked_as)


@dataclass(frozen=True)
class EngineValue:
    """An engine tensor read as the reference tensor: float values in the reference's layout, the range its
    quantization can represent (None for float tensors), and what was done to read it."""

    value: np.ndarray
    representable: tuple[float, float] | None
    note: str


def engine_value(candidate: EngineTensor, arrays: Mapping[str, np.ndarray], initializers: Mapping[str, np.ndarray],
                 shape: tuple[int, ...]) -> EngineValue | None:
    """The candidate's value as a float array of ``shape`` (dequantized, NHWC->NCHW); None when it cannot be read
    as the reference tensor."""
    value = arrays.get(candidate.name)
    if value is None:
        return None
    notes = []
    representable = None
    if np.issubdtype(value.dtype, np.integer):
        if candidate.quant is None:
            return None
        scale = initializers.get(candidate.quant[0])
        zero = initializers.get(candidate.quant[1]) if candidate.quant[1] else None
        if scale is None or scale.size != 1 or (zero is not None and zero.size != 1):
            return None
        zp, s = (float(zero.reshape(())) if zero is not None else 0.0), float(scale.reshape(()))
        info = np.iinfo(value.dtype)
        representable = ((info.min - zp) * s, (info.max - zp) * s)
        notes.append(f"dequantized {value.dtype}")
        value = (value.astype(np.float32) - np.float32(zp)) * np.float32(s)
    elif not np.issubdtype(value.dtype, np.floating):
        return None
    if value.shape != shape:
        if len(shape) == 4 and value.shape == (shape[0], shape[2], shape[3], shape[1]):
            value = value.transpose(0, 3, 1, 2)
            notes.append("NHWC->NCHW")
        else:
            return None
    if candidate.name.endswith(REORDERED):
        notes.append("NCHWc->NCHW")
    if candidate.how != "name":
        notes.insert(0, f"engine tensor {candidate.name!r}")
    return EngineValue(value, representable, ", ".join(notes))



def pair_layers(reference: onnx.ModelProto, ref_arrays: Mapping[str, np.ndarray], original: onnx.ModelProto,
                run: onnx.ModelProto | None, arrays: Mapping[str, np.ndarray]) -> tuple[list[LayerPair], list[str]]:
    """Pair every float reference tensor with the engine tensor that carries its value (``match_tensors``), in the
    reference's topological order; also the reference tensors that found none. ``run`` is the graph whose
    tensors ``arrays`` holds, None when that is ``original`` itself (or a network parsed from it)."""
    match = match_tensors(reference, original, run)
    initializers = {init.name: numpy_helper.to_array(init) for init in (run or original).graph.initializer}
    pairs, unmatched = [], []
    for row in match.reference:
        ref_value = ref_arrays.get(row.name)
        if ref_value is None or not np.issubdtype(ref_value.dtype, np.floating):
            continue
        chosen = None
        for candidate in match.engine.get(row.name, []):
            chosen = engine_value(candidate, arrays, initializers, tuple(ref_value.shape))
            if chosen is not None:
                break
        if chosen is None:
            unmatched.append(row.name + (" (NCHWc)" if row.name in match.blocked_refs else ""))
            continue
        reference_value, note = ref_value, chosen.note
        if chosen.representable is not None:
            # Saturation at the calibrated range is the quantization's design (the quantizer gives a Conv that
            # feeds a ReLU6 the ReLU6's range): judge what the kernels did with the values the range keeps, and
            # say how much was saturated. Where saturation matters, the layers after it diverge.
            lo, hi = chosen.representable
            outside = float(np.mean((ref_value < lo) | (ref_value > hi))) if ref_value.size else 0.0
            if outside > 0:
                reference_value = np.clip(ref_value, lo, hi)
                note += f", reference saturated to [{lo:.4g}, {hi:.4g}] ({100 * outside:.2g}% of values)"
        pairs.append(LayerPair(row.name, row.op_type, reference_value, chosen.value, row.scope, note.lstrip(", ")))
    feeds = compared_inputs(reference, {p.name for p in pairs})
    return [replace(p, inputs=feeds.get(p.name, ())) for p in pairs], unmatched


def compared_inputs(reference: onnx.ModelProto, compared: set[str]) -> dict[str, tuple[str, ...]]:
    """For each tensor of ``compared``, the tensors that feed its node on the reference graph, each replaced by the
    nearest compared tensors (or graph inputs) upstream of it where it is not compared itself (a Reshape's output,
    a Conv fused away into an NCHWc node): what metrics.localize measures a layer's error rise against. Weights
    (initializers) are left out: they are the same on both sides."""
    graph_inputs = {i.name for i in reference.graph.input} - {i.name for i in reference.graph.initializer}
    carried: dict[str, tuple[str, ...]] = {name: (name,) for name in graph_inputs}  # tensor -> what it stands on
    feeds: dict[str, tuple[str, ...]] = {}
    for node in reference.graph.node:  # ONNX files are in topological order
        reads = tuple(dict.fromkeys(t for name in node.input if name for t in carried.get(name, ())))
        for name in node.output:
            if name in compared:
                feeds[name] = reads
            carried[name] = (name,) if name in compared else reads
    return feeds



# ---------------------------------------------------------------------------------------------------------
# helpers


def _holds(node: onnx.NodeProto, ref_op: str) -> bool:
    """Whether a blocked node's output is the value of the reference tensor its name points to. An NCHWc Conv named
    after a Conv's output but with a residual added (its ``Sum`` input) or an activation applied holds the Add's or
    the activation's value, not that Conv's (ResNet-18: ``getitem_6_nchwc`` is conv + residual + Relu)."""
    if node.domain != _NCHWC or node.op_type != "Conv":
        return True
    if len(node.input) > 3 and node.input[3]:
        return False
    activation = next((a.s.decode() for a in node.attribute if a.name == "activation"), "")
    return ref_op == (activation or "Conv")


def _types(model: onnx.ModelProto) -> dict[str, int]:
    """Element types of the model's tensors from shape inference (non-strict: unknown ops stay untyped)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a model shape inference cannot handle: fall back to what the file declares
        inferred = model
    g = inferred.graph
    out = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]
           if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}
    out.update({i.name: i.data_type for i in g.initializer})
    return out


def _scope(node: onnx.NodeProto) -> str:
    """The innermost torch module a node came from, from the dynamo exporter's metadata ('' if unknown)."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return ""
            if isinstance(scopes, list) and len(scopes) >= 2:
                return str(scopes[-2])
    return ""


def _quant_params(name: str, producers: Mapping[str, onnx.NodeProto], consumers: Mapping[str, list[onnx.NodeProto]],
                  initializers: set[str], depth: int = 0) -> tuple[str, str | None] | None:
    """(scale, zero point) initializer names that dequantize tensor ``name``, if it is a quantized tensor."""
    if depth > 8:
        return None

    def pick(node: onnx.NodeProto, positions: tuple[int, int]) -> tuple[str, str | None] | None:
        s, z = positions
        scale = node.input[s] if s < len(node.input) else ""
        zero = node.input[z] if z < len(node.input) and node.input[z] else None
        if scale in initializers and (zero is None or zero in initializers):
            return scale, zero
        return None

    producer = producers.get(name)
    if producer is not None and producer.op_type in _QUANT_OUTPUT_PARAMS:
        found = pick(producer, _QUANT_OUTPUT_PARAMS[producer.op_type])
        if found:
            return found
    for consumer in consumers.get(name, []):
        for position, params in _QUANT_INPUT_PARAMS.get(consumer.op_type, {}).items():
            if position < len(consumer.input) and consumer.input[position] == name:
                found = pick(consumer, params)
                if found:
                    return found
    if producer is not None and producer.op_type in _QUANT_PASSTHROUGH and producer.input:
        return _quant_params(producer.input[0], producers, consumers, initializers, depth + 1)
    return None
