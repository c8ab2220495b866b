"""Localization: the per-layer comparator, torch hooks, the ONNX Runtime replay and matching, the precision
census, the optimization bisect, and the command line, on models that overflow fp16 in one known layer."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from core.cache import ArtifactCache
from core.cpuinfo import int8_pair_sums_saturate
from core.inputs import InputSpec, synthetic_feed
from engines.artifacts import ModelBuild
from engines.localize import NO_INTERMEDIATES, localize
from engines.onnx.intermediates import mark_all_outputs, run_all, session_inputs
from engines.onnx.precision_census import PrecisionCensus, precision_census
from engines.onnxrt.bisect import Variant, available_levels, bisect_optimizations, default_variants
from engines.pytorch.backend import TorchRunner
from engines.trt.debug import trt_precision_census
from metrics import Tolerance
from metrics.localize import LayerPair, compare_layers, format_layer_table
from suite import verdict
from tests.selftest.overflow_models import FEATURES, conv_net, layernorm_overflow, overflow_mlp
from tests.selftest.tiny_models import Data, two_input_net

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
X = (InputSpec("x", (FEATURES,), low=-1.0, high=1.0),)
# The suite's defaults for these precisions (suite/config/defaults.py, README "Defaults per precision").
FP32 = Tolerance(rtol=1e-3, atol=1e-5, min_isclose_pct=99.0, min_cosine=0.99999, min_top1_agreement_pct=99.0)
FP16 = Tolerance(rtol=1e-2, atol=1e-2, min_isclose_pct=75.0, min_cosine=0.999, min_top1_agreement_pct=95.0)
INT8 = Tolerance(rtol=1e-1, atol=5e-2, min_isclose_pct=0.0, min_cosine=0.98, min_top1_agreement_pct=90.0)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("localize-cache"))


@pytest.fixture(scope="module")
def feed():
    return {"x": np.random.default_rng(0).uniform(-1.0, 1.0, (4, FEATURES)).astype(np.float32)}


def _build(cache, factory, name=None):
    return ModelBuild(name or factory.__name__, factory, X, ("logits",), cache)


# ---- metrics.localize: the comparator ------------------------------------------------------------------


def test_first_divergent_is_the_first_failing_layer_and_nonfinite_fails():
    ok = np.linspace(-1, 1, 64).reshape(4, 16)
    bad = ok.copy()
    bad[0, 0] = np.inf
    drift = -ok
    layers = [("a", "Conv", ok, ok), ("b", "Relu", ok, ok + 1e-6), ("c", "Gemm", ok, bad), ("d", "Add", ok, drift)]
    result = compare_layers(layers, FP16, top=3)
    assert [s.passed for s in result.layers] == [True, True, False, False]
    assert result.first_divergent is not None and result.first_divergent.name == "c"
    assert result.first_divergent.failures == ("engine has 1 NaN/Inf",)
    # worst: failed first, non-finite before merely-off, then by cosine
    assert [s.name for s in result.worst] == ["c", "d", "b"]  # b is off by 1e-6, a not at all
    json.dumps(result.as_dict(), allow_nan=False)


def test_the_same_infinity_on_both_sides_is_not_a_divergence_but_nan_in_the_reference_is():
    mask = np.array([[0.0, -np.inf, 1.0, 2.0]] * 4)
    nan_ref = mask.copy()
    nan_ref[1, 0] = np.nan
    result = compare_layers([LayerPair("mask", "Add", mask, mask.copy()), LayerPair("n", "Div", nan_ref, mask)],
                            FP32)
    assert result.layers[0].passed
    assert result.layers[1].failures[0] == "reference has 1 NaN/Inf"


def test_float32s_limit_in_the_reference_is_the_masks_minus_infinity_in_any_engine_precision():
    """torch.finfo(float32).min masks (BERT's attention mask) are -inf or -65504 in an fp16 engine: the same
    sentinel, not a divergence (H100: MiniLM-L6 fp16's layer-0 mask Add was named first divergent); a real
    overflow, a finite reference where the engine has inf, still fails, and so does a sign flip."""
    low = float(np.finfo(np.float32).min)
    scores = np.random.default_rng(2).normal(size=(4, 8))
    ref = scores.copy()
    ref[:, 5:] = low
    fp16 = ref.copy()
    fp16[:, 5:] = -np.inf
    fp16[0, 5] = -65504.0  # saturated, not rounded to -inf
    bf16 = ref.copy()
    bf16[:, 5:] = -3.3895e38  # bfloat16's own limit
    overflow = scores.copy()
    overflow[1, 1] = np.inf
    flipped = fp16.copy()
    flipped[2, 6] = np.inf
    result = compare_layers([LayerPair("mask_fp16", "Add", ref, fp16), LayerPair("mask_bf16", "Add", ref, bf16),
                             LayerPair("overflow", "Gemm", scores, overflow), LayerPair("flip", "Add", ref, flipped)],
                            FP16)
    masked_fp16, masked_bf16, real, flip = result.layers
    assert masked_fp16.passed and masked_fp16.max_abs_error < 1e-9, masked_fp16  # sentinels left out of the figures
    assert masked_bf16.passed and masked_bf16.max_abs_error < 1e-9, masked_bf16
    assert real.failures == ("engine has 1 NaN/Inf",)
    assert flip.failures[0] == "engine has 1 NaN/Inf"
    assert result.first_divergent is not None and result.first_divergent.name == "overflow"


def test_bfloat16_intermediates_are_fetched_as_float32():
    """numpy has no bfloat16, so ONNX Runtime cannot return such a tensor: a bf16 ONNX file's localization
    crashed on it (H100, MiniLM-L6 bf16: 'No corresponding Numpy type for Tensor Type. bfloat16'). Each is now
    fetched through a Cast to float32, under its own name, with its bf16 value."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["x_bf16"], to=TensorProto.BFLOAT16),
         helper.make_node("Identity", ["x_bf16"], ["kept"]),
         helper.make_node("Cast", ["kept"], ["y"], to=TensorProto.FLOAT)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    x = np.array([[1.0, 1.00390625, 3.14159], [-2.5, 1e-3, 65504.0]], np.float32)
    import onnxruntime as ort

    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    arrays = run_all(mark_all_outputs(model), {"x": x}, off, ["CPUExecutionProvider"])
    assert set(arrays) == {"x_bf16", "kept", "y"}
    as_bf16 = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) & 0xFFFF0000  # round to nearest even
    for name in ("x_bf16", "kept", "y"):
        assert arrays[name].dtype == np.float32
        np.testing.assert_array_equal(arrays[name], as_bf16.view(np.float32))


def test_cosine_gates_every_layer_and_isclose_only_without_min_cosine_and_the_fixed_width_table():
    ref = np.random.default_rng(1).normal(size=(8, 32))
    layers = [LayerPair("x", "MatMul", ref, ref), LayerPair("y", "MatMul", ref, -ref, scope="blk.1"),
              LayerPair("scaled", "Mul", ref, 1.05 * ref)]
    result = compare_layers(layers, FP32)
    flipped, scaled = result.layers[1], result.layers[2]
    assert flipped.cosine == pytest.approx(-1.0) and flipped.isclose_pct < 99.0
    assert [f.split()[0] for f in flipped.failures] == ["cosine"]  # isclose is shown, not gating (min_cosine set)
    assert scaled.passed and scaled.isclose_pct < 99.0  # cosine's blind spot: a constant scale
    forced = compare_layers(layers, FP32, gate_isclose=True).layers
    assert {f.split()[0] for f in forced[1].failures} == {"cosine", "isclose"} and not forced[2].passed
    no_cosine = Tolerance(rtol=1e-3, atol=1e-5, min_isclose_pct=99.0)
    assert not compare_layers(layers, no_cosine).layers[2].passed
    table = format_layer_table(result.layers, result.first_divergent)
    lines = table.splitlines()
    assert lines[2].startswith(">") and "y [blk.1]" in lines[2]
    assert len({line.index("M") for line in lines[1:]}) == 1  # columns line up


def test_the_rise_names_the_layer_where_a_drift_is_born_not_where_it_has_accumulated():
    """A chain x -> a -> b -> c -> d: fp32 rounding (1e-7) everywhere, a drift of 1e-4 made in b, which c carries
    on and d (a cancellation) amplifies 5x. No layer fails fp32's cosine, the worst table puts d first; the rise over
    the inputs' error names b, and a layer of no known topology is not ranked."""
    rng = np.random.default_rng(0)
    ref = {k: rng.standard_normal((4, 64)) for k in "abcd"}
    noise = {k: 1e-7 * rng.standard_normal((4, 64)) for k in "abcd"}
    drift = 1e-4 * rng.standard_normal((4, 64)) * np.abs(ref["b"])
    eng = {"a": ref["a"] + noise["a"] * np.abs(ref["a"]), "b": ref["b"] + drift,
           "c": ref["c"] + drift * 1.1, "d": ref["d"] + drift * 5}
    inputs = {"a": ("x",), "b": ("a",), "c": ("b", "a"), "d": ("c",)}
    layers = [LayerPair(k, "Op", ref[k], eng[k], inputs=inputs[k]) for k in "abcd"]
    layers.append(LayerPair("e", "Op", ref["d"], ref["d"] * 1.001))  # no topology (torch hooks): no rise
    result = compare_layers(layers, FP32)
    assert result.first_divergent is None and result.worst[0].name in ("d", "e")
    assert [s.name for s in result.born] == ["b", "d", "c", "a"]
    by_name = {s.name: s for s in result.layers}
    assert by_name["b"].rise > 50 and 0.9 < by_name["c"].rise < 1.3 and by_name["a"].rise < 1  # x: the feed, exact
    assert math.isnan(by_name["e"].rise) and by_name["e"].rel_error == pytest.approx(1e-3)
    assert by_name["b"].rel_error == pytest.approx(np.linalg.norm(drift) / np.linalg.norm(ref["b"]))
    assert result.as_dict()["born"][0]["name"] == "b"
    from engines.localize import LocalizationReport

    text = LocalizationReport("onnxruntime", "fp32", None, result.worst, "", layers_compared=5,
                              born=result.born).table()
    assert "first divergent: none" in text and "error rises most at: #1 b (Op): relative error 0.0001" in text


def test_the_rise_of_a_layer_is_measured_against_its_worst_input_and_nan_is_not_ranked():
    ref = np.linspace(1.0, 2.0, 32)
    layers = [LayerPair("p", "Op", ref, ref * (1 + 1e-3), inputs=("x",)),
              LayerPair("q", "Op", ref, ref * (1 + 1e-5), inputs=("x",)),
              LayerPair("s", "Add", ref, ref * (1 + 2e-3), inputs=("q", "p")),
              LayerPair("n", "Op", ref, np.full(32, np.nan), inputs=("s",)),
              LayerPair("after_n", "Op", ref, ref * (1 + 4e-3), inputs=("n",))]
    by_name = {s.name: s for s in compare_layers(layers, FP32).layers}
    assert by_name["s"].rise == pytest.approx(2.0) and by_name["p"].rise == pytest.approx(1e3)
    assert by_name["q"].rise == pytest.approx(10.0)  # 1e-5 over RISE_FLOOR (1e-6): the feed counts as exact
    assert math.isnan(by_name["n"].rise) and math.isnan(by_name["after_n"].rise)
    assert [s.name for s in compare_layers(layers, FP32).born] == ["p", "q", "s"]


# ---- torch: forward hooks --------------------------------------------------------------------------------


@pytest.mark.parametrize(("factory", "layer"), [(overflow_mlp, "blowup"), (layernorm_overflow, "norm")])
def test_torch_fp16_names_the_overflowing_layer_first(cache, feed, factory, layer):
    report = localize("torch", "fp16", _build(cache, factory), None, feed, FP16)
    assert report.first_divergent is not None
    assert report.first_divergent.name == layer
    assert "NaN/Inf" in report.first_divergent.failures[0]
    assert all(s.passed for s in report.worst if s.index < report.first_divergent.index)
    assert report.final_passed is False
    assert f"first divergent: #{report.first_divergent.index} {layer} " in report.table()
    json.dumps(report.as_dict(), allow_nan=False)


@pytest.mark.parametrize("factory", [overflow_mlp, layernorm_overflow])
def test_torch_fp32_flags_nothing(cache, feed, factory):
    report = localize("torch", "fp32", _build(cache, factory), None, feed, FP32)
    assert report.first_divergent is None and report.layers_failed == 0 and report.final_passed
    assert report.layers_compared == len(list(factory().modules()))


# ---- onnxruntime: optimized-graph replay, matching, census ----------------------------------------------


def test_onnxruntime_cpu_computes_the_fp16_mlp_in_fp32_and_the_census_says_so(cache, feed):
    """The CPU EP has no fp16 Gemm: it wraps them in Casts, folds the Casts, and computes the whole MLP in fp32,
    so the blowup layer never overflows and the cell passes. The census must say the cell is not fp16."""
    report = localize("onnxruntime", "fp16", _build(cache, overflow_mlp), None, feed, FP16)
    assert report.census is not None and isinstance(report.census, dict)
    assert dict(report.census) == {"fp32": 5}  # Gemm, Max (the ReLU), Gemm, LayerNormalization, Gemm
    ok, text = report.census_verdict
    assert not ok and text.startswith("named fp16 but computes nothing in fp16: 0 of 3 conv/gemm/matmul nodes")
    assert report.first_divergent is None and report.final_passed
    assert "WARNING: named fp16 but computes nothing in fp16" in report.table()


def test_onnxruntime_fp16_layernorm_overflow_is_localized(cache, feed):
    """A run of LayerNormalization -> Max -> LayerNormalization stays fp16 on the CPU EP: the first one overflows."""
    report = localize("onnxruntime", "fp16", _build(cache, layernorm_overflow), None, feed, FP16)
    first = report.first_divergent
    assert first is not None and (first.op_type, first.scope) == ("LayerNormalization", "norm")
    assert first.failures[0].startswith("engine has") and "NaN/Inf" in first.failures[0]
    assert report.layers_compared == 5 and report.final_passed is False
    kinds = {(n.op_type, n.precision) for n in report.census.nodes}
    assert ("LayerNormalization", "fp16") in kinds and ("Gemm", "fp32") in kinds
    assert report.bisect is not None and report.bisect.lowest_breaking == "ORT_DISABLE_ALL"
    assert report.bisect.last_good is None


def test_onnxruntime_fp32_flags_nothing(cache, feed):
    for factory in (overflow_mlp, layernorm_overflow):
        report = localize("onnxruntime", "fp32", _build(cache, factory), None, feed, FP32)
        assert report.first_divergent is None and report.final_passed and report.bisect is None
        assert report.census_verdict[0]


def test_int8_tensors_are_matched_through_qdq_and_fused_nodes(cache):
    inputs = (InputSpec("image", (1, 8, 8)), InputSpec("extra", (3,), low=-1.0, high=1.0))
    build = ModelBuild("tiny", two_input_net, inputs, ("out",), cache, calibration=lambda: Data(64),
                       int8_options={"method": "minmax", "samples": 64, "per_channel": True, "percentile": 99.99})
    report = localize("onnxruntime", "int8", build, None, synthetic_feed(inputs, 4, "normal", seed=3), INT8)
    assert report.layers_compared == 4 and not report.unmatched  # conv, relu, concat, gemm: all found
    conv = next(s for s in report.worst if s.op_type == "Conv")
    assert "dequantized" in conv.note, conv.note  # the fused QLinearConv's uint8 output
    ok, text = report.census_verdict
    assert ok and text.startswith("2 of 2 conv/gemm/matmul nodes compute in int8")
    if int8_pair_sums_saturate():  # x86 without VNNI: the fused conv's 16-bit pair sums saturate (cosine 0.91 here)
        assert report.first_divergent is not None and report.first_divergent.op_type == "Conv", report.first_divergent
        assert not report.final_passed
    else:
        assert report.first_divergent is None and report.final_passed
    assert "replay of ONNX Runtime's optimized graph" in report.mode and "differ from the plain" not in report.note


@pytest.mark.parametrize("flags,saturate", [(("sse4_2", "avx2"), True), (("avx2", "avx512_vnni"), False),
                                           (("avx2", "avx_vnni"), False), (("avx2", "amx_int8"), False),
                                           (("asimd", "asimddp"), False), (None, None)])
def test_int8_pair_sums_saturate_on_x86_with_avx2_and_no_vnni(monkeypatch, flags, saturate):
    import core.cpuinfo

    monkeypatch.setattr(core.cpuinfo, "cpuinfo", lambda: ("some CPU", flags))
    assert core.cpuinfo.int8_pair_sums_saturate() is saturate


def test_precision_census_of_a_plain_file_counts_by_input_type(cache):
    census = precision_census(_build(cache, overflow_mlp).onnx_path("fp16"))  # the converted file, unoptimized
    assert isinstance(census, PrecisionCensus) and dict(census) == {"fp16": 5}
    assert census.verdict("fp16")[0] and not census.verdict("fp32")[0]


# ---- onnxruntime: the optimization bisect ------------------------------------------------------------------


def _conv_net_unoptimized(cache):
    """The conv net's fp32 file, a feed, and its output with every graph optimization off."""
    import onnxruntime as ort

    inputs = (InputSpec("image", (3, 16, 16), low=-1.0, high=1.0),)
    path = ModelBuild("conv_net", conv_net, inputs, ("logits",), cache).onnx_path("fp32")
    feed = synthetic_feed(inputs, 4, "normal", seed=3)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return path, feed, session.run(["logits"], session_inputs(session, feed))[0]


def _skip_if_all_levels_reproduce(path, feed, unoptimized):
    """Skip (unsupported) only when this CPU's fully optimized graph reproduces the unoptimized output bit for
    bit, checked here without the bisect; otherwise the bisect missed a change, and the test fails."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # ORT_ENABLE_ALL
    optimized = session.run(["logits"], session_inputs(session, feed))[0]
    assert np.array_equal(optimized, unoptimized), "ORT_ENABLE_ALL changes the output, but the bisect said no level did"
    verdict.skip("unsupported", "this CPU's NCHWc kernels reproduce the plain convolution bit for bit")


def test_bisect_names_the_first_level_that_changes_the_result_and_its_new_nodes(cache):
    """Judged bit-exactly against the unoptimized run, the first level that changes a conv net's output is the
    one that swaps its convolutions for NCHWc kernels (another summation order)."""
    path, feed, unoptimized = _conv_net_unoptimized(cache)
    reference = {"logits": unoptimized}
    exact = Tolerance(rtol=0.0, atol=0.0, min_isclose_pct=100.0)
    report = bisect_optimizations(path, feed, reference, exact, ["CPUExecutionProvider"])
    assert [r.level for r in report.levels] == list(available_levels())
    assert report.levels[0].passed
    if report.lowest_breaking is None:
        _skip_if_all_levels_reproduce(path, feed, unoptimized)
    assert report.lowest_breaking in ("ORT_ENABLE_LAYOUT", "ORT_ENABLE_ALL")
    assert report.last_good is not None and report.diff is not None
    assert report.diff.new_ops.get("com.microsoft.nchwc.Conv") == 2
    assert f"{report.lowest_breaking} breaks the result; {report.last_good} passes" in report.text()
    json.dumps(report.as_dict(), allow_nan=False)


def test_bisect_names_the_level_that_makes_an_already_failing_cell_worse(cache):
    """Where the unoptimized run already fails against the reference (int8 EfficientNet-Lite0: its quantization
    costs top-1 agreement at every level), the bisect still names the level whose output departs from the
    unoptimized run, and the nodes it brought in. Here the reference is off by a factor of 2 at every level,
    and the level that swaps the convolutions for NCHWc kernels changes the numbers (bit-exact tolerance)."""
    path, feed, unoptimized = _conv_net_unoptimized(cache)
    wrong = {"logits": 2.0 * unoptimized}
    exact = Tolerance(rtol=0.0, atol=0.0, min_isclose_pct=100.0, min_top1_agreement_pct=100.0)
    report = bisect_optimizations(path, feed, wrong, exact, ["CPUExecutionProvider"])
    assert report.lowest_breaking == "ORT_DISABLE_ALL" and report.last_good is None
    if report.lowest_changing is None:
        _skip_if_all_levels_reproduce(path, feed, unoptimized)
    assert report.lowest_changing in ("ORT_ENABLE_LAYOUT", "ORT_ENABLE_ALL") and report.last_unchanged is not None
    assert report.diff is not None and report.diff.new_ops.get("com.microsoft.nchwc.Conv") == 2
    text = report.text()
    assert f"and {report.lowest_changing} makes it worse: it departs from the unoptimized run" in text, text
    assert f"new in {report.lowest_changing} (vs {report.last_unchanged}): " in text, text
    json.dumps(report.as_dict(), allow_nan=False)


def test_bisect_tries_the_providers_settings_at_the_cells_level(cache):
    """At the cell's own level the bisect changes one provider or session setting at a time. Judged bit-exactly
    against the cell's own int8 output, turning ONNX Runtime's QDQ fusion off (QLinearConv -> DequantizeLinear,
    Conv, QuantizeLinear: another rounding of the requantization) breaks it, and a setting that changes nothing
    is reported as such."""
    import onnxruntime as ort

    inputs = (InputSpec("image", (1, 8, 8)), InputSpec("extra", (3,), low=-1.0, high=1.0))
    build = ModelBuild("tiny", two_input_net, inputs, ("out",), cache, calibration=lambda: Data(64),
                       int8_options={"method": "minmax", "samples": 64, "per_channel": True, "percentile": 99.99})
    path = build.onnx_path("int8")
    # 256 rows: the two paths differ by one quantization step in a few outputs (0.0028 here), not in 8 rows
    feed = synthetic_feed(inputs, 256, "normal", seed=3)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # the cell: ORT_ENABLE_ALL
    reference = {"out": session.run(["out"], session_inputs(session, feed))[0]}
    exact = Tolerance(rtol=0.0, atol=0.0, min_isclose_pct=100.0)
    report = bisect_optimizations(path, feed, reference, exact, ["CPUExecutionProvider"])
    assert report.cell_level == "ORT_ENABLE_ALL"
    assert [v.label for v in report.variants] == ["session.x64quantprecision=1", "session.disable_quant_qdq=1"]
    # a setting ONNX Runtime rejects is an error row, not a crash of the bisect
    odd = bisect_optimizations(path, feed, reference, exact, ["CPUExecutionProvider"],
                               variants=[Variant("bogus", config_entries={"session.graph_optimizations_loop_level":
                                                                          "x"})])
    assert len(odd.variants) == 1 and odd.variants[0].error and not odd.variants[0].passed, odd.variants
    no_fusion = report.variants[1]
    if no_fusion.passed:
        options = ort.SessionOptions()
        options.add_session_config_entry("session.disable_quant_qdq", "1")
        direct = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        unfused = direct.run(["out"], session_inputs(direct, feed))[0]
        assert np.array_equal(unfused, reference["out"]), "the setting changes the output; the bisect did not apply it"
        verdict.skip("unsupported", "this CPU's unfused QDQ path reproduces QLinearConv bit for bit")
    assert no_fusion.departures and no_fusion.cosine_vs_cell is not None and not no_fusion.error
    # x86 without VNNI: widening the pair sums (x64quantprecision) changes the saturating kernels' output too
    expected = ("session.x64quantprecision=1 and session.disable_quant_qdq=1 break it" if int8_pair_sums_saturate()
                else "session.disable_quant_qdq=1 breaks it")
    assert report.settings_conclusion == expected, report.settings_conclusion
    assert report.variants[0].passed is not bool(int8_pair_sums_saturate()), report.variants[0]
    text = report.text()
    assert "CPUExecutionProvider settings at ORT_ENABLE_ALL, one at a time" in text, text
    assert "session.disable_quant_qdq=1" in text and report.as_dict()["variants"][1]["setting"] == no_fusion.label
    json.dumps(report.as_dict(), allow_nan=False)


def test_default_variants_leave_out_the_cells_own_settings():
    import onnxruntime as ort

    cuda = [("CUDAExecutionProvider", {"device_id": 0, "use_tf32": "0"}), "CPUExecutionProvider"]
    labels = [v.label for v in default_variants(cuda, ort.SessionOptions)]
    assert "use_tf32=0" not in labels and "use_tf32=1" in labels
    assert "cudnn_conv_algo_search=HEURISTIC" in labels and "prefer_nhwc=1" in labels
    assert [v.label for v in default_variants(["CUDAExecutionProvider"], ort.SessionOptions)][0] == "use_tf32=0"

    def precise() -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.add_session_config_entry("session.x64quantprecision", "1")
        return options

    assert [v.label for v in default_variants(["CPUExecutionProvider"], precise)] == ["session.disable_quant_qdq=1"]
    assert default_variants(["TensorrtExecutionProvider"], ort.SessionOptions) == ()


def test_a_fused_node_that_keeps_its_name_is_still_new_in_the_diff():
    """ONNX Runtime's QDQ fusion turns node_Conv_869 (Conv) into node_Conv_869 (QLinearConv): a diff of node names
    alone found no new node on int8 EfficientNet-Lite0, though 35 convolutions had been fused."""
    from onnx import helper

    from engines.onnxrt.bisect import diff_graphs

    def graph(op: str, domain: str = "") -> onnx.ModelProto:
        node = helper.make_node(op, ["x"], ["y"], name="node_Conv_869", domain=domain)
        return helper.make_model(helper.make_graph([node], "g", [], []))

    diff = diff_graphs(graph("Conv"), graph("QLinearConv"))
    assert diff.new_nodes == ("node_Conv_869 (QLinearConv)",) and diff.gone_nodes == ("node_Conv_869 (Conv)",)
    assert diff.new_ops == {"QLinearConv": 1} and diff.gone_ops == {"Conv": 1}
    assert diff_graphs(graph("Conv"), graph("Conv")).new_nodes == ()
    assert diff_graphs(graph("Gemm"), graph("QGemm", "com.microsoft")).new_nodes == (
        "node_Conv_869 (com.microsoft.QGemm)",)


# ---- engines without intermediates, TensorRT's census ----------------------------------------------------


def test_engines_without_intermediate_tensors_compare_the_final_output_only(cache, feed):
    build = _build(cache, overflow_mlp)
    # inductor's runner is only asked for its outputs; an fp16 torch runner stands in for the package here
    runner = TorchRunner(build.torch_module().__class__().eval(), ("x",), ("logits",), "cpu", "fp16")
    report = localize("inductor", "fp16", build, None, feed, FP16, runner=runner)
    assert report.note.startswith(NO_INTERMEDIATES) and report.mode == "final output only"
    assert report.layers_compared == 1 and report.first_divergent.name == "logits"
    nothing = localize("inductor", "fp16", build, None, feed, FP16)
    assert nothing.layers_compared == 0 and "no runner given" in nothing.note


# The engine inspector's JSON at ProfilingVerbosity.DETAILED, written by hand after the documented format
# (TensorRT developer guide, "Engine Inspector"): "Layers" objects with LayerType, ParameterType and
# Inputs/Outputs carrying "Format/Datatype". No TensorRT runs here.
INSPECTOR_JSON = json.dumps({"Layers": [
    {"Name": "conv1", "LayerType": "CaskConvolution", "ParameterType": "Convolution",
     "Inputs": [{"Name": "x", "Dimensions": [8, 16, 28, 28],
                 "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format."}],
     "Outputs": [{"Name": "y", "Dimensions": [8, 32, 28, 28], "Format/Datatype": "Row major linear FP16 format"}]},
    {"Name": "Reformatting CopyNode for Input Tensor 0 to conv2", "LayerType": "Reformat",
     "Inputs": [{"Name": "y", "Format/Datatype": "Row major linear FP16 format"}],
     "Outputs": [{"Name": "y2", "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}]},
    {"Name": "conv2 + relu", "LayerType": "CaskConvolution", "ParameterType": "Convolution",
     "Inputs": [{"Name": "y2", "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}],
     "Outputs": [{"Name": "z", "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}]},
    {"Name": "add", "LayerType": "PointWiseV2", "ParameterType": "PointWise",
     "Inputs": [{"Name": "z", "Format/Datatype": "Row major linear FP16 format"}],
     "Outputs": [{"Name": "w", "Format/Datatype": "Row major linear FP16 format"}]},
    {"Name": "fc", "LayerType": "gemm", "ParameterType": "MatrixMultiply",
     "Inputs": [{"Name": "w", "Format/Datatype": "Row major linear FP32 format"}],
     "Outputs": [{"Name": "logits", "Format/Datatype": "Row major linear FP32 format"}]},
]})


def test_tensorrt_census_reads_the_engine_inspector_json():
    census = trt_precision_census(INSPECTOR_JSON)
    assert dict(census) == {"fp16": 2, "int8": 1, "fp32": 1}  # the Reformat is not counted
    assert census.by_kind() == {"matmul": {"int8": 1, "fp16": 1, "fp32": 1}, "other": {"fp16": 1}}
    ok, text = census.verdict("fp16")
    assert not ok and "1 of 3 conv/gemm/matmul nodes compute in fp16" in text
    with pytest.raises(ValueError, match="DETAILED"):
        trt_precision_census(json.dumps({"Layers": ["conv1", "fc"]}))


# ---- the command line -------------------------------------------------------------------------------------


def test_command_line_localizes_a_cell_built_by_the_suite(tmp_path):
    config = tmp_path / "suite.toml"
    config.write_text(f"""
[models.layernorm_overflow]
factory = "tests.selftest.overflow_models:layernorm_overflow"
inputs = [{{ name = "x", shape = [{FEATURES}], dtype = "float32", low = -1.0, high = 1.0 }}]
outputs = ["logits"]
batch_sizes = [1, 8]
precisions = ["fp32", "fp16"]
engines = ["torch", "onnxruntime"]
""")
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "tools/localize.py", "--suite-config", str(config), "--engine-cache", str(tmp_path / "c"),
         "--model", "layernorm_overflow", "--engine", "onnxruntime", "--precision", "fp16", "--generated",
         "uniform", "--batch", "4", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # the cell fails parity
    assert "FAILS parity" in done.stdout and "first divergent: #1 layer_norm [norm] (LayerNormalization)" in done.stdout
    assert "optimization bisect" in done.stdout
    data = json.loads(out.read_text())
    assert data["localization"]["first_divergent"]["scope"] == "norm"
    assert data["bisect"]["lowest_breaking"] == "ORT_DISABLE_ALL"


# ---- in the suite: a failing parity cell says where -------------------------------------------------------

SUITE_CONFIG = f"""
[run]
requires = ["torch", "onnxruntime"]
accept_not_judged = ["precision-not-run"]

[models.overflow_mlp]
factory = "tests.selftest.overflow_models:overflow_mlp"
inputs = [{{ name = "x", shape = [{FEATURES}], dtype = "float32", low = -1.0, high = 1.0 }}]
outputs = ["logits"]
batch_sizes = [1, 8]
precisions = ["fp32", "fp16"]
engines = ["torch", "onnxruntime"]
"""


def test_a_failing_parity_cell_names_its_first_diverging_layer_in_the_message_and_the_records(tmp_path):
    """torch fp16 overflows in `blowup`: the failure message and the --suite-results record name it first; ONNX
    Runtime's CPU fp16 cell, named by --precisions (else its kernel registry leaves it out), computes in fp32 (its
    census says so) and is not judged, never passed; fp32 cells, localized on request with --localize, flag no
    layer."""
    from tests.selftest.suite_runs import explain, run_suite

    config = tmp_path / "suite.toml"
    config.write_text(SUITE_CONFIG)
    results = tmp_path / "results.json"
    done = run_suite(tmp_path, "--suite-config", str(config), "--suite-results", str(results), "--localize",
                     "--precisions", "fp32,fp16", "-k", "uniform",
                     tests=(str(ROOT / "tests" / "parity" / "test_parity.py"),))
    out = done.stdout
    assert done.returncode == 1 and "1 failed" in out, explain(done)
    assert "first divergent: #2 blowup (Linear)" in out, explain(done)
    records = json.loads(results.read_text())["records"]
    by_cell = {r["cell"]: r for r in records if r["kind"] == "parity"}
    assert by_cell["overflow_mlp-torch-fp16"]["localization"]["first_divergent"]["name"] == "blowup"
    assert by_cell["overflow_mlp-onnxruntime-fp32"]["localization"]["first_divergent"] is None
    verdict = json.loads(results.read_text())["verdict"]
    assert [c["id"] for c in verdict["not_judged"]["precision-not-run"]] == [
        "tests/parity/test_parity.py::test_parity_on_generated_inputs[overflow_mlp-onnxruntime-fp16-uniform]"]


def test_a_crashing_localizer_leaves_the_parity_failure_and_its_figures_in_the_message(tmp_path):
    """The localizer used to run before the failure was asserted, so its crash (a bf16 file on the H100) ended
    the cell as that error: the parity figures it was to explain were gone. Now the failure stays, with one line
    saying the localization could not run."""
    from tests.selftest.suite_runs import explain, run_suite

    config = tmp_path / "suite.toml"
    config.write_text(SUITE_CONFIG.replace("overflow_models:overflow_mlp", "overflow_models:overflow_mlp_unlocalizable")
                      .replace('engines = ["torch", "onnxruntime"]', 'engines = ["torch"]')
                      .replace('requires = ["torch", "onnxruntime"]', 'requires = ["torch"]'))
    done = run_suite(tmp_path, "--suite-config", str(config), "-k", "uniform and fp16",
                     tests=(str(ROOT / "tests" / "parity" / "test_parity.py"),))
    out = done.stdout
    assert done.returncode == 1 and "1 failed" in out, explain(done)
    assert "overflow_mlp-torch-fp16 on uniform inputs" in out and "NaN/Inf" in out, explain(done)
    assert "localization could not run: RuntimeError: injected: the localizer crashed" in out, explain(done)


def test_census_types_a_fused_transformer_graph_from_its_floating_inputs() -> None:
    """ONNX Runtime's BERT fusion starts with EmbedLayerNormalization (com.microsoft), whose first input is the
    int64 token ids: typing its output from that input made every MatMul after it "unknown", and an H100 run
    read MiniLM's fused fp32 cell as "computes nothing in fp32"."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from engines.onnx.precision_census import precision_census

    table = numpy_helper.from_array(np.zeros((30, 4), np.float32), "table")
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("EmbedLayerNormalization", ["ids", "", "table"], ["emb"], domain="com.microsoft"),
             helper.make_node("MatMul", ["emb", "w"], ["h"], name="mm1"),
             helper.make_node("FastGelu", ["h"], ["g"], domain="com.microsoft"),
             helper.make_node("MatMul", ["g", "w"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "fused", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [table, w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    census = precision_census(model)
    assert census.by_kind()["matmul"] == {"fp32": 2}, census.as_dict()
    assert census.verdict("fp32")[0] and not census.verdict("fp16")[0]


def test_census_says_it_cannot_tell_when_types_are_unknown() -> None:
    from engines.onnx.precision_census import CensusNode, PrecisionCensus

    census = PrecisionCensus([CensusNode("a", "MatMul", "matmul", "unknown"), *[CensusNode("b", "MatMul", "matmul",
                                                                                           "fp32")] * 2])
    ok, text = census.verdict("fp16")  # even were the unknown one fp16, 1 of 3 would not be enough
    assert not ok and "cannot tell" not in text and "computes nothing in fp16" in text
    unknown = PrecisionCensus([CensusNode("a", "Attention", "matmul", "unknown")] * 3)
    ok, text = unknown.verdict("fp32")
    assert not ok and "census cannot tell whether it computes in fp32: 3 of 3" in text, text
