"""fp32 -> fp16/bf16 ONNX conversion (engines/onnx/convert.py): compute in the asked type, feeds unchanged,
and no node left in a type ONNX Runtime's CUDA EP has no kernel for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engines.onnx.convert import BF16_KEEP_FP32, convert_parts, convert_precision

pytestmark = pytest.mark.selftest


def _masked_matmul(path: Path) -> None:
    """y = x @ w / clip(where(x < 0.5, x @ w, 0), 0.5): a comparison and a clamp beside a matmul, as in a
    transformer's mask handling and mean pooling (MiniLM divides by a clamped norm)."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, "w")
    half = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
             helper.make_node("Less", ["x", "half"], ["mask"], name="less"),
             helper.make_node("Where", ["mask", "xw", "zero"], ["masked"], name="where"),
             helper.make_node("Clip", ["masked", "half"], ["clamped"], name="clip"),
             helper.make_node("Div", ["xw", "clamped"], ["y"], name="div")]  # a consumer after the kept Clip
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w, half, zero])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _input_types(model: onnx.ModelProto, node_name: str) -> list[int]:
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {i.name: i.data_type for i in inferred.initializer}
    types.update({v.name: v.type.tensor_type.elem_type for v in [*inferred.input, *inferred.value_info]})
    node = next(n for n in inferred.node if n.name == node_name)
    return [types[i] for i in node.input]


@pytest.mark.parametrize(("precision", "low"), [("fp16", TensorProto.FLOAT16), ("bf16", TensorProto.BFLOAT16)])
def test_conversion_computes_in_the_asked_type_and_keeps_comparisons_fp32_in_bf16(
        tmp_path: Path, precision: str, low: int) -> None:
    _masked_matmul(tmp_path / "fp32.onnx")
    convert_precision(tmp_path / "fp32.onnx", tmp_path / "low.onnx", precision, "masked")
    model = onnx.load(str(tmp_path / "low.onnx"))
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT  # feeds stay fp32
    assert _input_types(model, "matmul") == [low, low]
    less = _input_types(model, "less")
    assert less == ([TensorProto.FLOAT] * 2 if precision == "bf16" else [low, low]), less
    # ORT's CUDA EP expands a bf16 Clip into Less + Where, for which no EP has a bf16 kernel
    assert _input_types(model, "clip")[0] == (TensorProto.FLOAT if precision == "bf16" else low)
    assert ("Less" in convert_parts("k", precision)["keep_fp32"]) is (precision == "bf16")
    assert set(BF16_KEEP_FP32) <= set(convert_parts("k", "bf16")["keep_fp32"])  # in the cache key


def test_named_axes_export_as_hints_for_inductor_keep_guards_and_stay_dynamic() -> None:
    """AOTInductor's export takes named axes as Dim.DYNAMIC(min, max): a guard on the axis (CUDA attention pads
    the sequence to a multiple of 8) no longer fails the build, and the axis stays dynamic, equal across the
    inputs that share it."""
    import torch

    from core.inputs import AxisRange, InputSpec
    from engines.onnx.export import export_dims, input_dynamic_shapes

    class PadsToEight(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            seq = input_ids.shape[1]
            padded = torch.nn.functional.pad(input_ids.float() * attention_mask, (0, 8 - seq % 8))
            if padded.shape[1] * seq > 1:  # the guard shape of the H100 failure: s*(8 + s - s%8) > 1
                return padded.sum(dim=1)
            return padded.sum(dim=1) * 2

    seq = (("seq", AxisRange(16, 64, 256)),)
    inputs = (InputSpec("input_ids", ("seq",), "int64", axes=seq), InputSpec("attention_mask", ("seq",), "int64",
                                                                             axes=seq))
    module = PadsToEight().eval()
    args = (torch.ones(2, 64, dtype=torch.int64), torch.ones(2, 64, dtype=torch.int64))
    strict = export_dims(inputs, 1, 8)
    with pytest.raises(Exception, match="Constraints violated"):
        torch.export.export(module, args, dynamic_shapes=input_dynamic_shapes(module, inputs, strict))
    hinted = export_dims(inputs, 1, 8, named_as_hints=True)
    exported = torch.export.export(module, args, dynamic_shapes=input_dynamic_shapes(module, inputs, hinted))
    ids, mask = (n.meta["val"].shape for n in exported.graph.nodes if n.op == "placeholder")
    assert not isinstance(ids[1], int) and str(ids[1]) == str(mask[1]), (ids, mask)
    out = exported.module()(torch.ones(3, 20, dtype=torch.int64), torch.ones(3, 20, dtype=torch.int64))
    assert out.shape == (3,) and float(out[0]) == 20.0


def test_a_bf16_clip_left_to_onnx_runtime_has_no_kernel_and_the_converter_keeps_it_fp32(tmp_path: Path) -> None:
    """The MiniLM bf16 failure on the H100, reproduced on the CPU EP: ONNX Runtime has no bf16 Clip, expands it
    into its ONNX function body, and finds no kernel for the bf16 Less inside ("Less(13) node with name ''").
    The converted graph keeps Clip in fp32 and runs."""
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()
    lo = helper.make_tensor("lo", TensorProto.BFLOAT16, [], [0.0])
    naive = helper.make_model(helper.make_graph(
        [helper.make_node("Clip", ["x", "lo"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2])], [lo]),
        opset_imports=[helper.make_opsetid("", 22)])
    with pytest.raises(Exception, match=r"Less"):
        ort.InferenceSession(naive.SerializeToString(), providers=["CPUExecutionProvider"])

    fp32 = helper.make_model(helper.make_graph(
        [helper.make_node("Clip", ["x", "zero"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(fp32, str(tmp_path / "clip.onnx"))
    convert_precision(tmp_path / "clip.onnx", tmp_path / "clip-bf16.onnx", "bf16", "clip")
    session = ort.InferenceSession(str(tmp_path / "clip-bf16.onnx"), providers=["CPUExecutionProvider"])
    out = session.run(None, {"x": np.array([-1.0, 2.0], dtype=np.float32)})[0]
    assert out.tolist() == [0.0, 2.0]
