"""Issue 43, "Timed rounds are audited at two calls": the rounds of a latency case cycle through distinct feeds
(suite.timing.FEED_POOL; MLPerf's TEST04), a random sample of them is kept and checked (suite/round_audit.py; MLPerf's
TEST01), and a case more than IMPLAUSIBLE_SPEEDUP times faster than its baseline is not judged until every one of its
rounds, each on a feed of its own, is shown right (suite/gate/latency.py unproven_speedup). End to end in
tests/selftest/test_hostile_inputs.py (result-cache-reads-as-a-speed-up, zeros-between-the-audited-calls); here the
pieces, on stand-in runners: nothing is timed."""

import random
import re

import numpy as np
import pytest

from suite import verdict
from suite.checks.latency_protocol import check_timed_outputs
from suite.gate.latency import IMPLAUSIBLE_SPEEDUP, unproven_speedup
from suite.round_audit import RoundSample
from suite.timing import FEED_POOL, TimedCall
from tests.selftest.test_gate_outcomes import BASE, RECORD, _gate

pytestmark = pytest.mark.selftest


def feed_of(i):
    """Feed id -> a feed whose one input says its id (and differs from every other id's)."""
    return {"x": np.full((4, 2), float(i), np.float32)}


class Echo:
    """A device runner whose output is its staged input's first column (prepare_path / restage_path / run_path /
    path_outputs); ``zeros`` lists the calls (1-based) whose output it leaves at zero instead."""

    input_names, output_names = ("x",), ("y",)

    def __init__(self, zeros=(), restage=True):
        self.zeros, self.calls, self.restaged = set(zeros), 0, []
        if not restage:
            self.restage_path = None

    def infer(self, feed):
        return {"y": feed["x"][:, :1].copy()}

    def prepare_path(self, path, feed):
        self.staged = feed["x"].copy()
        return "stand-in clock"

    def restage_path(self, path, feed):
        self.restaged.append(int(feed["x"][0, 0]))
        self.staged[...] = feed["x"]

    def run_path(self, path):
        self.calls += 1
        self.out = np.zeros((4, 1), np.float32) if self.calls in self.zeros else self.staged[:, :1].copy()
        return 1e-3

    def path_outputs(self, path):
        return {"y": self.out}


class Expected:
    """The protocol's Expected for feed_of: the reference's outputs per feed id, and the engine's own (right)."""

    def reference(self, i):
        return {"y": feed_of(i)["x"][:, :1].astype(np.float64)}

    own = reference


def _run(runner, path="model", rounds=40, warmup=3):
    call = TimedCall(runner, path, feed_of(0), vary=feed_of)
    call.first_timed_round = warmup
    for _ in range(warmup + rounds):
        call.setup()  # as pytest-benchmark's setup does, outside its timing
        call()
    return call


def test_the_rounds_cycle_through_distinct_feeds_staged_between_calls():
    """No two calls in a row run one input; the device path takes each next feed into its bound inputs between
    calls, and a runner that cannot (no restage_path) runs feed 0 every time."""
    runner = Echo()
    call = _run(runner, rounds=6, warmup=0)
    assert call.feed_ids == [i % FEED_POOL for i in range(6)] and FEED_POOL >= 2
    assert runner.restaged == [1, 2, 0, 1, 2]
    host = _run(Echo(), path="all", rounds=6, warmup=0)
    assert host.feed_ids == call.feed_ids and host.last_outputs()["y"][0, 0] == host.feed_ids[-1]
    fixed = _run(Echo(restage=False), rounds=6, warmup=0)
    assert fixed.pool == 1 and fixed.feed_ids == [0] * 6


def test_fresh_feeds_give_every_call_a_feed_of_its_own():
    call = _run(Echo(), rounds=4, warmup=0)
    call.fresh_feeds()
    for _ in range(5):
        call()
    assert call.feed_ids[4:] == [FEED_POOL + i for i in range(4, 9)]
    assert call.audit_summary(5)["fresh_feeds"] and not call.audit_summary(6)["fresh_feeds"]


def test_every_round_between_the_first_and_the_last_can_be_wrong_and_the_audit_sees_it():
    """Calls 8-45 of 46 return zeros: the first timed round (call 4) and the last call are right, as the two calls
    checked before issue 43 were; the random sample of the rounds between them is not."""
    runner = Echo(zeros=range(8, 46))
    call = _run(runner, rounds=43, warmup=3)
    assert runner.calls == 46 and len(call.audited()) == 8
    with pytest.raises(pytest.fail.Exception, match=r"m-torch-fp32-bs4-model: the audited round \(round \d+, feed \d\) "
                       r"returned outputs that differ from the reference's for this feed; the engine's own untimed "
                       r"run on this feed agrees"):
        check_timed_outputs(_Cell(), "bs4", "model", call, Expected(), _Model())
    right = _run(Echo(), rounds=43, warmup=3)
    said = check_timed_outputs(_Cell(), "bs4", "model", right, Expected(), _Model())
    assert re.match(r"[678] of the timed rounds between the first and the last, drawn at random after the run: "
                    r"[678] agree", said["audited rounds"])  # the sample's 8, less the first and the last if drawn


def test_the_sample_is_uniform_and_read_only_where_drawn():
    """Algorithm R: every round equally likely to be kept (checked over many draws); ``read`` only for a round that
    enters; ``size=None`` keeps every round."""
    counts = np.zeros(40)
    reads = 0
    for seed in range(2000):
        sample = RoundSample(8, random.Random(seed))

        def read(i):
            nonlocal reads
            reads += 1
            return i

        for i in range(40):
            sample.offer(i, lambda i=i: read(i))
        kept = sample.kept()
        assert len(kept) == 8 and list(kept) == sorted(kept) and all(k == v for k, v in kept.items())
        counts[list(kept)] += 1
    assert np.all(np.abs(counts / 2000 - 0.2) < 0.04)  # 8 of 40: each round kept a fifth of the time
    assert reads / 2000 < 8 * (1 + np.log(40 / 8)) + 1  # about k(1 + ln(n/k)) reads, not n
    every = RoundSample(None)
    for i in range(5):
        every.offer(i, lambda i=i: i)
    assert list(every.kept()) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="at least 1"):
        RoundSample(0)


def _improvement(factor, **audit):
    gate = _gate()
    record = {**RECORD, "samples_s": [x / factor for x in BASE], **({"outputs_audited": audit} if audit else {})}
    outcome, _ = gate.check_latency(record, "t::a", 0.0)
    assert outcome is not None and outcome.status == "improvement"
    return outcome, record


def test_an_implausible_speed_up_is_not_judged_until_every_round_is_shown_right_on_fresh_feeds():
    outcome, record = _improvement(IMPLAUSIBLE_SPEEDUP * 1.5, feeds=3, rounds_audited=8, rounds_judged=40,
                                   every_round=False, fresh_feeds=False)
    component = unproven_speedup(outcome, record)
    assert component is not None and (component.state, component.reason) == (verdict.NOT_JUDGED, "unproven-speedup")
    assert outcome.status == "unproven-speedup" and "unproven-speedup" in verdict.REASONS
    assert "more than 3x faster than its baseline, and only 8 of its 40 rounds were checked, on 3 feed(s)" in \
        component.detail
    for audit in ({"every_round": True, "fresh_feeds": False}, {"every_round": False, "fresh_feeds": True}, {}):
        outcome, record = _improvement(IMPLAUSIBLE_SPEEDUP * 1.5, **audit)
        assert unproven_speedup(outcome, record) is not None, audit
    proven, record = _improvement(IMPLAUSIBLE_SPEEDUP * 1.5, every_round=True, fresh_feeds=True)
    assert unproven_speedup(proven, record) is None and proven.status == "improvement"
    plausible, record = _improvement(IMPLAUSIBLE_SPEEDUP * 0.9)
    assert unproven_speedup(plausible, record) is None and plausible.status == "improvement"


def test_every_round_audited_only_where_the_audit_covered_the_judged_rounds():
    call = _run(Echo(), rounds=10, warmup=2)
    assert not call.audit_summary(10)["every_round"]
    call.audit_from(len(call.samples_s) + 2, every_round=True)
    call.fresh_feeds()
    for _ in range(12):
        call.setup()
        call()
    summary = call.audit_summary(10)
    assert summary == {"feeds": 10, "rounds_audited": 10, "rounds_judged": 10, "every_round": True,
                       "fresh_feeds": True}
    assert not call.audit_summary(11)["every_round"]  # a round before the audit's window


class _Cell:
    id, engine, precision = "m-torch-fp32", "torch", "fp32"


class _Model:
    known_failures = {}

    def tolerance(self, precision):
        from metrics.parity_report import Tolerance
        return Tolerance()


def test_the_runners_take_another_feed_into_the_inputs_they_bound_in_place():
    """A CUDA graph replays at the addresses it captured: torch's staged tensors and ONNX Runtime's bound values keep
    theirs when another feed comes (shown on CPU tensors and values, which take the same calls)."""
    import onnxruntime as ort
    import torch

    from engines.onnxrt.backend import OnnxRuntimeRunner
    from engines.pytorch.backend import TorchRunner

    runner = TorchRunner(torch.nn.Identity(), ("x",), ("y",))
    runner._static = [torch.zeros(4, 2)]
    address = runner._static[0].data_ptr()
    runner.restage_path("graph", feed_of(2))
    assert runner._static[0].data_ptr() == address and torch.all(runner._static[0] == 2)

    value = ort.OrtValue.ortvalue_from_numpy(np.zeros((4, 2), np.float32), "cpu")
    onnx = OnnxRuntimeRunner.__new__(OnnxRuntimeRunner)
    onnx.input_names, onnx.label, onnx._dtypes = ("x",), "m-onnxruntime-fp32", {"x": np.dtype(np.float32)}
    onnx._bound = {"graph": (None, None, [value])}
    pointer = value.data_ptr()
    onnx.restage_path("graph", feed_of(3))
    assert value.data_ptr() == pointer and np.all(value.numpy() == 3)
