"""Two dynamic axes and ONNX Runtime's transformer fusion, end to end on a tiny BERT: the export keeps batch and
sequence symbolic, every engine runs any length in the profile, the fused graph holds Attention and computes the
same embeddings, and a graph without attention is refused rather than run as "fused"."""

import onnx
import pytest

from core.cache import ArtifactCache
from core.inputs import synthetic_feed
from engines import get_backend
from engines.artifacts import ModelBuild
from engines.base import EngineBuildError, EngineRequest, ShapeProfile
from engines.onnxrt.backend import OnnxRuntimeBackend, trt_profile_options
from metrics import Tolerance, compare_outputs
from tests.selftest import tiny_transformer as tt

pytestmark = pytest.mark.selftest

PROFILE = ShapeProfile(1, 4, 8, tt.SEQ)
FP32 = Tolerance(rtol=1e-3, atol=1e-5, min_isclose_pct=100.0, min_row_cosine=0.99999)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("cache"))


def _request(engine, precision="fp32", **options):
    return EngineRequest("tiny_bert", engine, precision, "cpu", tt.INPUTS, tt.OUTPUTS, PROFILE, options)


def _load(build, cache, engine, precision="fp32", **options):
    request = _request(engine, precision, **options)
    backend = get_backend(engine)
    assert backend.unsupported_reason(request) is None and backend.skip_reason(request) is None
    return backend.load(request, build, cache)


def test_export_keeps_batch_and_sequence_symbolic(cache):
    build = ModelBuild("tiny_bert", tt.tiny_bert, tt.INPUTS, tt.OUTPUTS, cache)
    model = onnx.load(str(build.onnx_path("fp32")))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert dims == {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]}
    assert [o.name for o in model.graph.output] == ["sentence_embedding"]


@pytest.mark.parametrize("batch,seq", [(1, 4), (3, 12), (8, 24)])
def test_onnxruntime_runs_every_shape_of_the_profile(cache, batch, seq):
    build = ModelBuild("tiny_bert", tt.tiny_bert, tt.INPUTS, tt.OUTPUTS, cache)
    feed = synthetic_feed(tt.INPUTS, batch, "uniform", seed=seq, dims={"seq": seq})
    ref = _load(build, cache, "torch").runner.infer(feed)
    out = _load(build, cache, "onnxruntime").runner.infer(feed)
    assert out["sentence_embedding"].shape == (batch, 32)
    report = compare_outputs(ref, out, FP32)["sentence_embedding"]
    assert report.passed, report.explain()


def test_transformer_fusion_runs_the_fused_graph_with_the_same_embeddings(cache):
    build = ModelBuild("tiny_bert_eager", tt.tiny_bert_eager, tt.INPUTS, tt.OUTPUTS, cache)
    fused = _load(build, cache, "onnxruntime", transformer_fusion="bert")
    ops = fused.facts.detail["op_histogram"]
    assert ops.get("Attention") == 2 and ops.get("SkipLayerNormalization"), ops
    assert fused.artifact == build.onnx_path("fp32", "bert") != build.onnx_path("fp32")
    for batch, seq in ((2, 5), (8, 24)):
        feed = synthetic_feed(tt.INPUTS, batch, "uniform", seed=batch, dims={"seq": seq})
        ref = _load(build, cache, "torch").runner.infer(feed)
        report = compare_outputs(ref, fused.runner.infer(feed), FP32)["sentence_embedding"]
        assert report.passed, report.explain()


def test_fusion_is_keyed_apart_and_chains_into_fp16(cache):
    build = ModelBuild("tiny_bert_eager", tt.tiny_bert_eager, tt.INPUTS, tt.OUTPUTS, cache)
    keys = {build.onnx_key(p, f) for p in ("fp32", "fp16") for f in (None, "bert")}
    assert len(keys) == 4
    fp16 = onnx.load(str(build.onnx_path("fp16", "bert")))
    assert any(n.op_type == "Attention" for n in fp16.graph.node)


def test_fusion_that_finds_no_attention_is_refused(tmp_path):
    build = ModelBuild("no_attention", tt.no_attention, tt.INPUTS, tt.OUTPUTS, ArtifactCache(tmp_path))
    with pytest.raises(EngineBuildError, match=r"transformer fusion \(bert\) of 'no_attention' fused no attention"):
        build.onnx_path("fp32", "bert")


def test_tensorrt_ep_refuses_fused_graphs_and_gets_a_two_axis_profile():
    request = _request("onnxruntime", execution_provider="tensorrt", transformer_fusion="bert")
    assert "contrib operators" in OnnxRuntimeBackend().unsupported_reason(
        EngineRequest(**{**vars(request), "device": "cuda:0"}))
    assert trt_profile_options(request) == {
        "trt_profile_min_shapes": "input_ids:1x4,attention_mask:1x4",
        "trt_profile_opt_shapes": "input_ids:4x12,attention_mask:4x12",
        "trt_profile_max_shapes": "input_ids:8x24,attention_mask:8x24"}


def test_bf16_conversion_keeps_the_pooling_clamp_in_fp32(cache):
    """The pooling's clamps (Clip) stay fp32 in bf16: ONNX Runtime's CUDA EP would expand a bf16 Clip into a bf16
    Less that no execution provider runs (MiniLM on an H100). Keeping it fp32 once left stale types behind that
    failed the conversion; the converter infers them again."""
    build = ModelBuild("tiny_bert", tt.tiny_bert, tt.INPUTS, tt.OUTPUTS, cache)
    model = onnx.shape_inference.infer_shapes(onnx.load(str(build.onnx_path("bf16"))))
    types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.value_info]}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    clips = [n for n in model.graph.node if n.op_type == "Clip"]
    assert clips and all(types[n.input[0]] == onnx.TensorProto.FLOAT for n in clips)
    assert any(types.get(n.input[0]) == onnx.TensorProto.BFLOAT16 for n in model.graph.node if n.op_type == "MatMul")
