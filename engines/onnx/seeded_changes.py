"""Seeded changes to an ONNX graph whose truth is known, for scoring the suite's attribution (metrics/attribution.py).

Each edit returns a new model and leaves the argument alone; each is a change people ship or meet: a node computed
twice (a duplicated branch, a slower kernel), one layer's weights perturbed (a bad checkpoint merge, a re-export),
an activation replaced by its clipped or approximate form, one tensor rounded through fp16 (a node forced to fp16),
and, for the int8 keep-set, an activation channel scaled up with the next layer scaled down to match, which keeps
the fp32 function and blows up one tensor's int8 range (an outlier channel). Pure graph work on ``onnx`` protos.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    found = [n for n in model.graph.node if n.name == name]
    if len(found) != 1:
        raise KeyError(f"{len(found)} nodes named {name!r}")
    return found[0]


def consumers(model: onnx.ModelProto, tensor: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if tensor in n.input]


def _initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    found = [i for i in model.graph.initializer if i.name == name]
    if len(found) != 1:
        raise KeyError(f"no initializer {name!r} (a weight fed by a node, not stored, is not editable here)")
    return found[0]


def _rewire(model: onnx.ModelProto, old: str, new: str, skip: set[str]) -> None:
    """Every consumer of ``old`` (and a graph output named so) reads ``new`` instead, except nodes in ``skip``."""
    for n in model.graph.node:
        if n.name in skip:
            continue
        for i, name in enumerate(n.input):
            if name == old:
                n.input[i] = new
    for out in model.graph.output:
        if out.name == old:
            raise ValueError(f"{old!r} is a graph output: pick a node inside the graph")


def duplicate_node(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """Node ``name`` computed a second time, with its own copy of its weights (so that no common-subexpression
    elimination merges the two), its result added times zero: the output is unchanged, the work doubled. The new
    nodes are ``NAME_dup``, ``NAME_dup_mul``, ``NAME_dup_add``."""
    out = _copy(model)
    n = node(out, name)
    inits = {i.name for i in out.graph.initializer}
    inputs = []
    for i in n.input:
        if i in inits:
            weight = copy.deepcopy(_initializer(out, i))
            weight.name = f"{i}_dup"
            out.graph.initializer.append(weight)
            inputs.append(weight.name)
        else:
            inputs.append(i)
    result = n.output[0]
    dup = helper.make_node(n.op_type, inputs, [f"{result}_dup"], name=f"{name}_dup", domain=n.domain)
    dup.attribute.extend(n.attribute)
    out.graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), f"{name}_dup_zero"))
    mul = helper.make_node("Mul", [dup.output[0], f"{name}_dup_zero"], [f"{result}_dup_zeroed"], name=f"{name}_dup_mul")
    add = helper.make_node("Add", [result, mul.output[0]], [f"{result}_dup_sum"], name=f"{name}_dup_add")
    _rewire(out, result, add.output[0], skip=set())
    at = list(out.graph.node).index(n)
    for k, new in enumerate((dup, mul, add)):
        out.graph.node.insert(at + 1 + k, new)
    return out


def perturb_weights(model: onnx.ModelProto, name: str, factor: float, seed: int = 0) -> onnx.ModelProto:
    """Node ``name``'s weight (its second input) times ``1 + factor * N(0, 1)`` elementwise: a drift of one layer."""
    out = _copy(model)
    init = _initializer(out, node(out, name).input[1])
    w = numpy_helper.to_array(init).astype(np.float32)
    rng = np.random.default_rng(seed)
    init.CopyFrom(numpy_helper.from_array((w * (1 + factor * rng.standard_normal(w.shape))).astype(w.dtype), init.name))
    return out


def clip_activation(model: onnx.ModelProto, name: str, high: float = 6.0) -> onnx.ModelProto:
    """Relu node ``name`` replaced by Clip(0, high): ReLU -> ReLU6 in one layer."""
    out = _copy(model)
    n = node(out, name)
    if n.op_type != "Relu":
        raise ValueError(f"{name!r} is a {n.op_type}, not a Relu")
    lo, hi = f"{name}_clip_lo", f"{name}_clip_hi"
    out.graph.initializer.extend([numpy_helper.from_array(np.array(0.0, np.float32), lo),
                                  numpy_helper.from_array(np.array(high, np.float32), hi)])
    n.op_type = "Clip"
    n.input.extend([lo, hi])
    return out


def round_through_fp16(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """Node ``name``'s output rounded through fp16 (Cast to float16 and back): what its consumers read when the
    node is forced to fp16 on an execution provider that computes it in fp32 and stores fp16."""
    out = _copy(model)
    n = node(out, name)
    result = n.output[0]
    down = helper.make_node("Cast", [result], [f"{result}_fp16"], name=f"{name}_to_fp16", to=TensorProto.FLOAT16)
    up = helper.make_node("Cast", [down.output[0]], [f"{result}_from_fp16"], name=f"{name}_from_fp16",
                          to=TensorProto.FLOAT)
    _rewire(out, result, up.output[0], skip=set())
    at = list(out.graph.node).index(n)
    out.graph.node.insert(at + 1, down)
    out.graph.node.insert(at + 2, up)
    return out


def gelu_tanh(model: onnx.ModelProto, erf_name: str) -> onnx.ModelProto:
    """The erf GELU around Erf node ``erf_name`` (x * 0.5 * (1 + erf(x / sqrt 2)), as exporters write it) made the
    tanh approximation: erf(x / sqrt 2) -> tanh(sqrt(2 / pi) * (x + 0.044715 x^3)), computed from the GELU's input."""
    out = _copy(model)
    erf = node(out, erf_name)
    div = next(n for n in out.graph.node if erf.input[0] in n.output)
    x = div.input[0]
    c = {"3": 3.0, "k": 0.044715, "s": float(np.sqrt(2 / np.pi))}
    for key, value in c.items():
        out.graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), f"{erf_name}_tanh_{key}"))
    p = f"{erf_name}_tanh"
    nodes = [helper.make_node("Pow", [x, f"{p}_3"], [f"{p}_x3"], name=f"{p}_pow"),
             helper.make_node("Mul", [f"{p}_x3", f"{p}_k"], [f"{p}_kx3"], name=f"{p}_mulk"),
             helper.make_node("Add", [x, f"{p}_kx3"], [f"{p}_inner"], name=f"{p}_add"),
             helper.make_node("Mul", [f"{p}_inner", f"{p}_s"], [f"{p}_scaled"], name=f"{p}_muls"),
             helper.make_node("Tanh", [f"{p}_scaled"], [erf.output[0]], name=f"{p}_tanh")]
    at = list(out.graph.node).index(erf)
    out.graph.node.remove(erf)
    for k, new in enumerate(nodes):
        out.graph.node.insert(at + k, new)
    return out


def outlier_channel(model: onnx.ModelProto, producer: str, consumer: str, channel: int = 0,
                    scale: float = 200.0) -> onnx.ModelProto:
    """Output channel ``channel`` of Conv ``producer`` (weights and bias) times ``scale``, and the matching input
    channel of Conv ``consumer`` divided by it. Between them only a Relu (positive scale commutes): the fp32 function
    is the same, while the tensor between holds one channel ``scale`` times larger than the rest, which a per-tensor
    int8 scale cannot hold with the others (the outlier channels of LLM.int8)."""
    out = _copy(model)
    p, c = node(out, producer), node(out, consumer)
    if (producer, consumer) not in conv_relu_conv(model):
        raise ValueError(f"{producer!r} -> Relu -> {consumer!r} is not a chain of one reader each: the scaled "
                         "channel would reach another node unscaled back")
    w = _initializer(out, p.input[1])
    a = numpy_helper.to_array(w).copy()
    a[channel] *= scale
    w.CopyFrom(numpy_helper.from_array(a, w.name))
    if len(p.input) > 2 and p.input[2]:
        b = _initializer(out, p.input[2])
        bias = numpy_helper.to_array(b).copy()
        bias[channel] *= scale
        b.CopyFrom(numpy_helper.from_array(bias, b.name))
    v = _initializer(out, c.input[1])
    cw = numpy_helper.to_array(v).copy()
    group = int(next((helper.get_attribute_value(at) for at in c.attribute if at.name == "group"), 1))
    if group == 1:
        cw[:, channel] /= scale
    else:  # depthwise: input channel k is output channel k's only input
        cw[channel] /= scale
    v.CopyFrom(numpy_helper.from_array(cw, v.name))
    return out


def conv_relu_conv(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(producer, consumer) Conv pairs joined by one Relu, each tensor between them read by one node only: where
    ``outlier_channel`` keeps the fp32 function."""
    pairs = []
    for p in model.graph.node:
        if p.op_type != "Conv":
            continue
        relu = consumers(model, p.output[0])
        if len(relu) != 1 or relu[0].op_type != "Relu":
            continue
        after = consumers(model, relu[0].output[0])
        if len(after) == 1 and after[0].op_type == "Conv" and after[0].input[0] == relu[0].output[0]:
            pairs.append((p.name, after[0].name))
    return pairs
