"""The attribution corpus's pieces (issue 46), fast: scoring, the keep-set search, the seeded graph edits on a tiny
convolution net, the int8 keep_fp32 option, and the localizer reading NCHWc tensors back. The corpus itself (three
real models, minutes) is the command tools/attribution_corpus.py, not a self-test."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from metrics import Tolerance
from metrics.attribution import Outcome, rank_of, score, table
from metrics.keep_set import bisect_prefix, greedy_keep_set
from metrics.structure import cell_changes, changed_keys

# ------------------------------------------------------------------------------------------------ scoring


def test_rank_is_the_first_named_item_matching_any_truth_pattern() -> None:
    named = ("Conv relu_3_nchwc", "Conv getitem_9_dup_zeroed_nchwc", "Add x")
    assert rank_of(named, ("*_dup*",)) == 2
    assert rank_of(named, ("Add x", "*_dup*")) == 2
    assert rank_of(named, ("Relu *",)) is None
    assert rank_of((), ("*",)) is None
    assert rank_of((), ("(no op changes)",)) == 1 and rank_of(("Add",), ("(no op changes)",)) is None


def test_score_counts_only_cases_run_and_beyond_the_threshold() -> None:
    outcomes = [
        Outcome("a", "node", "m", "c", ("x",), ("x", "y"), 0.10, True),
        Outcome("b", "node", "m", "c", ("x",), ("y", "z", "x"), 0.10, True),
        Outcome("c", "node", "m", "c", ("x",), ("y",), 0.10, True),
        Outcome("d", "node", "m", "c", ("x",), ("y",), 0.01, False),  # below 3 %: listed, not scored
        Outcome("g", "node", "m", "undone", ("x",), ("y",), 0.09, False),  # the change did not happen
        Outcome("e", "node", "m", "c", ("x",), device="GPU", not_run="needs CUDA"),
        Outcome("f", "layer", "m", "c", ("t",), ("t",), 0.5, True),
    ]
    by_kind = {s.kind: s for s in score(outcomes)}
    node = by_kind["node"]
    assert (node.cases, node.scored, node.hits, node.not_run) == (5, 3, (1, 2), 1)
    assert node.rate(1) == pytest.approx(1 / 3) and node.rate(3) == pytest.approx(2 / 3)
    assert by_kind["layer"].rate(1) == 1.0 and by_kind["op"].rate(1) is None
    text = table(outcomes)
    assert "| 33% | 67% | 1 |" in text and "needs CUDA" in text and "miss" in text and "+1.0% (< 3 %)" in text
    assert "+9.0% (not scored: see the change)" in text


def test_changed_keys_name_what_appears_or_disappears_first_then_the_largest_change() -> None:
    before = {"Attention": 6, "MatMul": 18, "Add": 30, "Softmax": 0, "Conv": 2, "Gelu": 1}
    after = {"MatMul": 42, "Add": 31, "Softmax": 6, "Conv": 2, "Gelu": 3}
    assert changed_keys(before, after) == ["Attention", "Softmax", "MatMul", "Gelu", "Add"]
    assert cell_changes({"precision_census": {"ops": before}}, {"precision_census": {"ops": after}}) == [
        "compute nodes as run: Attention 6 -> 0, Softmax 0 -> 6, MatMul 18 -> 42, Gelu 1 -> 3, Add 30 -> 31"]


# ------------------------------------------------------------------------------------------------ keep-set


def _needs(*nodes: str):
    calls: list[frozenset[str]] = []

    def passes(keep: frozenset[str]) -> bool:
        calls.append(keep)
        return set(nodes) <= keep

    return passes, calls


def test_greedy_adds_by_error_alone_then_prunes_what_the_rest_does_not_need() -> None:
    passes, _ = _needs("b", "e")
    # a alone helps most (a red herring), then b, c, e
    alone = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.9, "e": 0.4, "f": 0.8}
    found = greedy_keep_set(alone, passes)
    assert found.nodes == ("b", "e")
    assert found.order[:4] == ("a", "b", "c", "e")


def test_greedy_grows_in_doubling_chunks_and_stops_at_its_budget() -> None:
    alone = {f"n{i:02d}": i / 100 for i in range(40)}
    passes, calls = _needs("n00", "n20")
    found = greedy_keep_set(alone, passes)
    assert found.nodes == ("n00", "n20") and found.pruned
    assert [len(c) for c in calls[:6]] == [1, 2, 4, 8, 16, 32]  # 1, 1, 2, 4, 8, 16 added
    assert len(calls) == 6 + 32  # then each of the 32 tried without
    capped = greedy_keep_set(alone, _needs("n00", "n20")[0], budget=10)
    assert not capped.pruned and capped.tried == 10 and {"n00", "n20"} <= set(capped.nodes or ())
    assert greedy_keep_set(alone, _needs("n00", "n20")[0], budget=3).nodes is None


def test_greedy_says_none_where_no_set_passes() -> None:
    passes, _ = _needs("zz")
    assert greedy_keep_set({"a": 0.1, "b": 0.2}, passes).nodes is None


def test_bisection_keeps_the_prefix_up_to_the_last_node_needed() -> None:
    order = [f"n{i}" for i in range(20)]
    passes, calls = _needs("n3", "n12")
    assert bisect_prefix(order, passes) == (13, len(calls))
    assert bisect_prefix(order, _needs()[0])[0] == 0
    assert bisect_prefix(order, _needs("other")[0])[0] is None


# ------------------------------------------------------------------------------------------------ graph edits


def _tiny_cnn(channels: int = 16, residual: bool = False) -> onnx.ModelProto:
    """image (N, 3, 8, 8) -> Conv -> Relu -> Conv -> Relu -> output (``residual``: the last Relu replaced by
    + the first Relu's output, then a third Conv): seeded weights."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
             numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.1, "w2"),
             numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32) * 0.1, "b2")]
    nodes = [helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["out"], name="relu2")]
    if residual:  # no Relu after the sum (an NCHWc Conv whose only fusion is the residual), then a Conv
        nodes[3:] = [helper.make_node("Add", ["c2", "r1"], ["s2"], name="add"),
                     helper.make_node("Conv", ["s2", "w2", "b2"], ["out"], name="conv3", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                           ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", channels, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


FEED = {"image": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}


def _out(model: onnx.ModelProto, level: str = "ORT_DISABLE_ALL") -> np.ndarray:
    from engines.onnxrt.attribution import run

    return run(model, FEED, level)["out"]


def test_seeded_edits_change_what_they_say_and_nothing_else() -> None:
    from engines.onnx import seeded_changes as seeded

    model = _tiny_cnn()
    base = _out(model)
    dup = seeded.duplicate_node(model, "conv2")
    onnx.checker.check_model(dup)
    assert {"conv2_dup", "conv2_dup_mul", "conv2_dup_add"} <= {n.name for n in dup.graph.node}
    np.testing.assert_allclose(_out(dup), base, rtol=0, atol=0)  # twice the work, the same answer
    assert len(model.graph.node) == 4  # the argument is left alone
    assert not np.allclose(_out(seeded.perturb_weights(model, "conv2", 0.05)), base)
    np.testing.assert_allclose(_out(seeded.outlier_channel(model, "conv1", "conv2", channel=3)), base, rtol=1e-4,
                               atol=1e-5)
    with pytest.raises(ValueError, match="not a chain"):  # conv2's output does not reach conv1
        seeded.outlier_channel(model, "conv2", "conv1")
    assert not np.allclose(_out(seeded.clip_activation(model, "relu1", high=0.1)), base)
    rounded = _out(seeded.round_through_fp16(model, "conv1"))
    assert not np.array_equal(rounded, base) and np.allclose(rounded, base, rtol=1e-2, atol=1e-2)


def test_keep_set_of_an_outlier_channel_is_found_applied_and_smaller_than_no_set(tmp_path) -> None:
    """A channel 500x the others between conv1 and conv2 (the fp32 function unchanged) breaks int8; the search
    through the suite's quantizer finds the nodes around that tensor, and the set applied through keep_fp32
    passes. The approximate ranking (keep_in_fp32) orders the candidates, the quantizer decides."""
    from engines.onnx import seeded_changes as seeded
    from engines.onnxrt.attribution import judge, keep_in_fp32, quantized_nodes
    from engines.onnxrt.keep_set import Int8Oracle, find_keep_set

    fp32 = seeded.outlier_channel(_tiny_cnn(), "conv1", "conv2", channel=3, scale=500.0)
    src = tmp_path / "fp32.onnx"
    onnx.save(fp32, str(src))
    calibration = {"image": np.random.default_rng(2).standard_normal((16, 3, 8, 8)).astype(np.float32)}
    tol = Tolerance(rtol=1e-1, atol=5e-2, min_isclose_pct=0.0, min_cosine=0.99)
    oracle = Int8Oracle(src, calibration, FEED, tol, tmp_path, "tiny")
    assert not oracle(frozenset())  # the outlier channel breaks int8
    qdq = onnx.load(str(oracle.quantize((), tmp_path / "int8.onnx")))
    assert quantized_nodes(qdq) == ["conv1", "relu1", "conv2", "relu2"]
    assert judge(oracle.reference, {"out": _out(keep_in_fp32(qdq, fp32, ["relu1", "conv2"]), "ORT_ENABLE_ALL")},
                 tol)[0]  # the approximation: the tensor's readers back in fp32
    found = find_keep_set("tiny-outlier", oracle)
    assert found.keep is not None and "relu2" not in found.keep and found.recheck.startswith("passes")
    assert found.prefix is not None and len(found.keep) <= found.prefix
    assert found.snippet.startswith("[models.tiny.int8]\nkeep_fp32 = [")
    for dropped in found.keep:  # pruned: each node of the set is needed
        assert not oracle(frozenset(found.keep) - {dropped})


def test_localizer_reads_nchwc_tensors_back(tmp_path) -> None:
    """At ORT_ENABLE_ALL on x86 the Convs run in the blocked NCHWc layout; their outputs are compared through a
    ReorderOutput, not skipped (before: 3 of ResNet-18's 49 tensors compared); a Conv that adds the residual in
    its kernel holds the sum, not the Conv's output, and is not compared as that."""
    from engines.onnx.intermediates import collect_layer_pairs, save_optimized
    from engines.onnxrt.attribution import session_options

    path = tmp_path / "tiny.onnx"
    onnx.save(_tiny_cnn(residual=True), str(path))
    optimized = onnx.load(str(save_optimized(path, session_options("ORT_ENABLE_ALL"), ["CPUExecutionProvider"],
                                             tmp_path / "optimized.onnx")))
    if not any(n.domain == "com.microsoft.nchwc" for n in optimized.graph.node):
        pytest.skip("ONNX Runtime chose no NCHWc kernels on this CPU (no AVX2)")
    found = collect_layer_pairs(path, path, FEED, lambda: session_options("ORT_ENABLE_ALL"), ["CPUExecutionProvider"])
    assert {p.name for p in found.pairs} >= {"r1", "out"}
    assert [u for u in found.unmatched if "NCHWc" in u] == ["c2 (NCHWc)"]
    assert any(p.name == "r1" and p.note.endswith("NCHWc->NCHW") for p in found.pairs)
    assert "c2" not in {p.name for p in found.pairs}  # its NCHWc Conv adds the residual (s2's value, unnamed)
    for pair in found.pairs:
        np.testing.assert_allclose(pair.engine, pair.reference, rtol=1e-4, atol=1e-4)


def test_int8_keep_fp32_is_read_from_the_config_and_keyed_only_when_set() -> None:
    from suite.config import ConfigError
    from suite.config.overrides import _parse_int8
    from suite.config.schema import Int8Options

    options = _parse_int8("[int8]", {"keep_fp32": ["b", "a", "a"]})
    assert options.keep_fp32 == ("a", "b") and options.as_dict()["keep_fp32"] == ["a", "b"]
    assert "keep_fp32" not in Int8Options().as_dict()
    with pytest.raises(ConfigError, match="keep_fp32"):
        _parse_int8("[int8]", {"keep_fp32": "conv2"})


def test_each_layer_is_fed_by_the_nearest_compared_tensors_of_the_reference_graph() -> None:
    """The rise's topology (engines/onnx/matching.py compared_inputs): a tensor that is not compared (c2, fused into
    an NCHWc Conv with its residual) is walked through to what it is computed from; weights are no inputs."""
    from engines.onnx.matching import compared_inputs

    model = _tiny_cnn(residual=True)
    assert compared_inputs(model, {"c1", "r1", "c2", "s2", "out"}) == {
        "c1": ("image",), "r1": ("c1",), "c2": ("r1",), "s2": ("c2", "r1"), "out": ("s2",)}
    assert compared_inputs(model, {"r1", "out"}) == {"r1": ("image",), "out": ("r1",)}


def test_localizer_names_where_a_drift_within_tolerance_is_born(tmp_path) -> None:
    """ReLU -> a clip in the first layer, 2 of 2048 values clipped: no layer leaves the tolerance, the error
    accumulates downstream (the worst table names the output), and the rise over the inputs' error names the
    clipped layer."""
    from engines.onnx import seeded_changes as seeded
    from engines.onnx.intermediates import reference_arrays
    from engines.onnxrt.attribution import layer_table

    fp32 = tmp_path / "fp32.onnx"
    model = _tiny_cnn(residual=True)
    onnx.save(model, str(fp32))
    edited = tmp_path / "clipped.onnx"
    high = float(np.quantile(reference_arrays(fp32, FEED)[1]["r1"], 0.999))  # 2 of 2048 values clipped
    onnx.save(seeded.clip_activation(model, "relu1", high=high), str(edited))
    tol = Tolerance(rtol=1e-3, atol=1e-5, min_isclose_pct=99.0, min_cosine=0.999)
    comparison, _ = layer_table(fp32, edited, FEED, tol, level="ORT_ENABLE_BASIC")  # no NCHWc: every tensor
    by_name = {s.name: s for s in comparison.layers}
    assert comparison.first_divergent is None and comparison.worst[0].name == "out"
    assert comparison.born[0].name == "r1" and by_name["r1"].rise > 1000 > 2 > by_name["out"].rise
    assert by_name["r1"].inputs == ("c1",) and by_name["c1"].inputs == ("image",)


def test_both_sides_are_profiled_in_interleaved_rounds_of_their_own_sessions() -> None:
    """profile_rounds: one list of per-round medians per node and side, the duplicated Conv's nodes on the changed
    side only (what round_deltas ranks; the ranking's statistics are tests/selftest/test_node_profile.py's)."""
    from engines.onnx import seeded_changes as seeded
    from engines.onnxrt.attribution import profile_abba, profile_rounds
    from metrics.node_profile import round_deltas

    model = _tiny_cnn()
    before, after = profile_rounds([(model, "ORT_ENABLE_BASIC", ()),
                                    (seeded.duplicate_node(model, "conv2"), "ORT_ENABLE_BASIC", ())],
                                   FEED, rounds=4, runs_per_round=2, warmup=1)
    assert before and all(len(r) == 4 for r in (*before.values(), *after.values()))
    assert not any("_dup" in n for n in before) and any("_dup" in n for n in after)
    only_after = [d for d in round_deltas(before, after) if d.baseline_us is None]
    assert only_after and all(d.delta_us == d.current_us for d in only_after)
    before, after = profile_abba((model, "ORT_ENABLE_BASIC", ()),
                                 (seeded.duplicate_node(model, "conv2"), "ORT_ENABLE_BASIC", ()),
                                 FEED, rounds=2, runs_per_round=1, warmup=1)  # each side its own two sessions
    assert not any("_dup" in n for n in before) and any("_dup" in n for n in after)


@pytest.mark.parametrize("level", ["ORT_ENABLE_BASIC", "ORT_ENABLE_ALL"])
def test_a_tensor_read_only_through_casts_is_compared_as_its_consumers_read_it(tmp_path, level) -> None:
    """conv1's output rounded through fp16 and back: relu1 reads the rounded copy, so c1 is compared as that copy
    (the rise then names c1, where the rounding is made), not as the Conv's own output, which only the Cast reads
    (before: the Relu after it was named, or at ORT_ENABLE_ALL the residual Add, a miss)."""
    from engines.onnx import seeded_changes as seeded
    from engines.onnx.intermediates import collect_layer_pairs
    from engines.onnxrt.attribution import session_options

    fp32, edited = tmp_path / "fp32.onnx", tmp_path / "rounded.onnx"
    onnx.save(_tiny_cnn(), str(fp32))
    onnx.save(seeded.round_through_fp16(_tiny_cnn(), "conv1"), str(edited))
    found = collect_layer_pairs(fp32, edited, FEED, lambda: session_options(level), ["CPUExecutionProvider"])
    c1 = next(p for p in found.pairs if p.name == "c1")
    np.testing.assert_array_equal(c1.engine, c1.engine.astype(np.float16).astype(np.float32))  # fp16 values
    np.testing.assert_allclose(c1.engine, c1.reference, rtol=1e-3, atol=1e-4)
    assert not np.array_equal(c1.engine, c1.reference)


class _FakeSession:
    """A profiling session whose node times depend only on the order it was created in (``bias(k)``) and, where
    ``warm`` is set, read that much faster in a run more than 3 runs in a row after its own (a session run on right
    after itself): no load, no change, only the biases that the A B B A order cancels."""

    created = 0
    last: object = None
    streak = 0

    def __init__(self, options, bias, warm: float = 0.0) -> None:
        self.path = options.profile_file_prefix + ".json"
        self.factor = bias(_FakeSession.created)
        self.warm = warm
        _FakeSession.created += 1
        self.runs: list[float] = []

    def get_inputs(self) -> list:
        from types import SimpleNamespace

        return [SimpleNamespace(name="image", type="tensor(float)")]

    def run(self, names, feed) -> None:
        _FakeSession.streak = _FakeSession.streak + 1 if _FakeSession.last is self else 1
        _FakeSession.last = self
        self.runs.append(self.factor * (1 - self.warm if _FakeSession.streak > 3 else 1.0))

    def end_profiling(self) -> str:
        import json

        events = [{"cat": "Node", "name": f"{node}_kernel_time", "dur": us * factor, "args": {"op_name": op}}
                  for factor in self.runs for node, op, us in (("conv", "Conv", 800.0), ("relu", "Relu", 50.0))]
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump(events, f)
        return self.path


@pytest.mark.parametrize("bias", [lambda k: 0.88 if k % 2 else 1.0, lambda k: 1.0 - 0.04 * k],
                         ids=["every-second-session-12pct-faster", "each-later-session-4pct-faster"])
def test_a_session_order_bias_does_not_show_as_a_change(monkeypatch, bias) -> None:
    """The same model both sides, its sessions faster by the order they were created in (the first guess at why
    ResNet-18's second session summed 11-15 % less node time; the run order was the cause, docs/attribution.md):
    two sessions A B read it as a change; four created A B B A, each side the mean of its two, read 0 on every node
    (a bias of the second session alone would be halved, not cancelled)."""
    from engines.onnxrt import attribution
    from metrics.node_profile import round_deltas

    monkeypatch.setattr(attribution, "_session", lambda model, options, disabled=(): _FakeSession(options, bias))
    side = (_tiny_cnn(), "ORT_ENABLE_ALL", ())

    def summed_change(before: dict, after: dict) -> float:
        deltas = round_deltas(before, after)
        return sum(d.current_us for d in deltas) / sum(d.baseline_us for d in deltas) - 1

    _FakeSession.last, _FakeSession.created = None, 0
    pair = attribution.profile_rounds([side, side], FEED, rounds=4, runs_per_round=2, warmup=1)
    assert summed_change(*pair) == pytest.approx(bias(1) / bias(0) - 1)  # A B: the bias reads as a change
    _FakeSession.created = 0
    before, after = attribution.profile_abba(side, side, FEED, rounds=4, runs_per_round=2, warmup=1)
    assert _FakeSession.created == 4 and set(before) == set(after) == {"Conv conv", "Relu relu"}
    assert summed_change(before, after) == pytest.approx(0.0, abs=1e-12)
    assert all(d.delta_us == pytest.approx(0.0, abs=1e-9) for d in round_deltas(before, after))


def test_a_session_run_on_right_after_itself_does_not_show_as_a_change(monkeypatch) -> None:
    """The bias ResNet-18 showed (its second of two sessions 11-15 % less node time, in a fixed order 0-1 %): a
    session that runs on after its own round reads faster. The rounds keep one order, so no session runs twice in a
    row: the same model both sides reads 0, in two sessions and in four."""
    from engines.onnxrt import attribution
    from metrics.node_profile import round_deltas

    monkeypatch.setattr(attribution, "_session",
                        lambda model, options, disabled=(): _FakeSession(options, lambda k: 1.0, warm=0.12))
    side = (_tiny_cnn(), "ORT_ENABLE_ALL", ())
    _FakeSession.last, _FakeSession.created = None, 0
    before, after = attribution.profile_rounds([side, side], FEED, rounds=5, runs_per_round=3, warmup=1)
    assert all(d.delta_us == pytest.approx(0.0, abs=1e-9) for d in round_deltas(before, after))
    before, after = attribution.profile_abba(side, side, FEED, rounds=5, runs_per_round=3, warmup=1)
    assert all(d.delta_us == pytest.approx(0.0, abs=1e-9) for d in round_deltas(before, after))


def test_a_duplicated_convs_truth_is_its_copy_and_itself_as_run_and_nothing_else(tmp_path) -> None:
    """tools/attribution_corpus.py's truth of a duplicated Conv, from the graph: the copy, and the Conv itself as
    ONNX Runtime runs it (its name, or its NCHWc node named after its output or its fused activation's). Profiled,
    every node only one side has is one of those, and the Conv beside it (conv2, unchanged) matches none."""
    from engines.onnx import seeded_changes as seeded
    from engines.onnxrt.attribution import profile_rounds
    from metrics.attribution import matches
    from tools.attribution_corpus import duplicated_as_run

    path = tmp_path / "tiny.onnx"
    onnx.save(_tiny_cnn(), str(path))
    truth = duplicated_as_run(path, "conv1")
    assert truth == ("*_dup*", "* conv1", "* c1_nchwc", "* r1_nchwc")
    before, after = profile_rounds([(_tiny_cnn(), "ORT_ENABLE_ALL", ()),
                                    (seeded.duplicate_node(_tiny_cnn(), "conv1"), "ORT_ENABLE_ALL", ())],
                                   FEED, rounds=1, runs_per_round=1, warmup=0)
    if not any(n.endswith("_nchwc") for n in before):
        pytest.skip("ONNX Runtime chose no NCHWc kernels on this CPU (no AVX2)")
    only_one, both = set(before) ^ set(after), set(before) & set(after)
    assert only_one and all(matches(n, truth) for n in only_one), only_one  # r1_nchwc gone, c1_nchwc and the copy new
    assert both and not any(matches(n, truth) for n in both), both  # conv2 (out_nchwc), the ReorderOutput
