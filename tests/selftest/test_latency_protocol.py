"""Issue 45: a latency case's protocol (suite/checks/latency_protocol.py) driven directly, without a child pytest run,
as pytest-benchmark's own tests drive BenchmarkFixture: a stand-in benchmark, suite, runner and gate, and the record the
protocol hands ``suite.record`` read back. End to end (child runs) in test_gate.py, test_wall_bound.py and the rest."""

import statistics
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest

from suite.checks.latency_protocol import LatencyProtocol
from suite.config import parse_config
from suite.config.schema import LatencyShape
from suite.options import SuiteOptions
from suite.session import Cell
from suite.timing import FEED_POOL, TimedCall

pytestmark = pytest.mark.selftest

T = "tests.selftest.tiny_models"
TINY = {"factory": f"{T}:two_input_net", "outputs": ["out"],
        "inputs": [{"name": "image", "shape": [1, 8, 8]}, {"name": "extra", "shape": [3], "low": -1.0, "high": 1.0}],
        "batch_sizes": [1, 4], "latency_batch_sizes": [4], "engines": ["torch", "onnxruntime"]}
ROUNDS = 6


def _echo(feed):
    """What the stand-in engine and the reference both return: a function of the feed, so every round agrees."""
    image = feed["image"].reshape(len(feed["image"]), -1)
    return {"out": np.concatenate([image[:, :2], feed["extra"]], axis=1).astype(np.float32)}


class EchoRunner:
    """A host runner (the ``all`` path): ``infer`` only, counting its calls."""

    def __init__(self):
        self.calls = 0

    def infer(self, feed):
        self.calls += 1
        return _echo(feed)


class Suite:
    """The SuiteSession calls the protocol makes, on a parsed config; ``run_batched`` runs no engine."""

    device = "cpu"

    def __init__(self):
        self.config = parse_config({"models": {"m": TINY}})
        self.records = []

    def model(self, name):
        return self.config.models[name]

    def reference_cell(self, model_name):
        return Cell(model_name, "torch", "fp32")

    def run_batched(self, cell, feeds):
        return _echo(feeds)

    def timed_call(self, cell, engine, feed, path, vary=None):
        return TimedCall(engine.runner, path, feed, vary)

    def gpu_monitor(self, cell):
        return nullcontext(SimpleNamespace(summary=dict))

    def record(self, kind, cell, **data):
        entry = {"kind": kind, "cell": cell.id, **data}
        self.records.append(entry)
        return entry


class Benchmark:
    """pytest-benchmark's fixture as the protocol uses it: ``pedantic`` calls ``setup`` then the target for every
    warm-up round and round, and keeps the rounds' host seconds in ``stats.stats.data``."""

    def __init__(self, disabled=False):
        self.extra_info, self.group, self.disabled = {}, None, disabled
        self.stats = SimpleNamespace(stats=SimpleNamespace(data=[]))
        self.asked = []

    def pedantic(self, target, setup, rounds, warmup_rounds, iterations):
        self.asked.append((rounds, warmup_rounds, iterations))
        for i in range(warmup_rounds + rounds):
            setup()
            target()
            if i >= warmup_rounds:
                self.stats.stats.data.append(float(i))


class Gate:
    """The gate's GateCheck, its calls recorded; ``busy`` re-measures a case that many times, as settle_latency
    does for a case measured busy (the record's samples become the last attempt's)."""

    def __init__(self, busy=0):
        self.busy, self.calls = busy, []

    def settle_latency(self, record, remeasure):
        self.calls.append("settle_latency")
        attempts = [{"median_ms": record["median_ms"]}]
        for _ in range(self.busy):
            record["samples_s"] = list(remeasure(None))
            attempts.append({"median_ms": statistics.median(record["samples_s"]) * 1e3})
        return attempts

    def prove_speedup(self, record, attempts, prove):
        self.calls.append("prove_speedup")

    def smoke(self, cell, shape, path):
        self.calls.append("smoke")

    def check(self):
        self.calls.append("check")


def _run(gate, benchmark=None):
    """The case run by the protocol: the stand-in suite, runner and benchmark after it, and its TimedCall."""
    suite, runner, calls = Suite(), EchoRunner(), []
    benchmark = Benchmark() if benchmark is None else benchmark
    protocol = LatencyProtocol(suite, Cell("m", "onnxruntime", "fp32"), LatencyShape(4), "all",
                               SimpleNamespace(runner=runner), benchmark, SuiteOptions(latency_rounds=ROUNDS),
                               lambda call: calls.append(call) or call, gate)
    protocol.run()
    return suite, runner, benchmark, calls[0]


def test_the_record_holds_the_timed_rounds_without_the_warm_up():
    gate = Gate()
    suite, runner, benchmark, call = _run(gate)
    warmup = benchmark.extra_info["warmup_rounds"]
    assert warmup >= 1 and benchmark.asked == [(ROUNDS, warmup, 1)]
    assert runner.calls == warmup + ROUNDS  # pedantic's calls only: the expected outputs run no engine here
    [record] = suite.records
    assert record["kind"] == "latency" and record["shape"] == "bs4" and record["path"] == "all"
    assert len(record["samples_s"]) == ROUNDS and record["samples_s"] == benchmark.extra_info["samples_s"]
    assert len(record["host_ref_s"]) == ROUNDS and all(s > 0 for s in record["host_ref_s"])
    assert record["host_ref_s"] == call.host_refs(warmup, ROUNDS)  # each timed round's, the warm-up's left out
    assert record["median_ms"] == pytest.approx(statistics.median(record["samples_s"]) * 1e3)
    assert record["n"] == ROUNDS and record["warmup_dropped"] == 0
    assert record["bound"] in ("device", "host") and record["bound_why"]
    assert set(record["outputs_checked"]) >= {"first timed call", "last call"}
    assert record["outputs_audited"]["rounds_judged"] == ROUNDS
    assert record["attempts"] == [{"median_ms": record["median_ms"]}]
    assert benchmark.group == "m-bs4-all" and benchmark.extra_info["path"] == "latency-all"
    assert benchmark.stats.stats.data == [float(i) for i in range(warmup, warmup + ROUNDS)]  # pedantic's, kept
    assert gate.calls == ["settle_latency", "prove_speedup", "check"]


def test_a_re_measured_case_keeps_its_last_attempt_in_the_record_and_the_benchmark():
    gate = Gate(busy=1)
    suite, runner, benchmark, call = _run(gate)
    warmup = benchmark.extra_info["warmup_rounds"]
    assert runner.calls == 2 * (warmup + ROUNDS)
    [record] = suite.records
    assert len(record["samples_s"]) == ROUNDS and len(record["host_ref_s"]) == ROUNDS
    assert all(s > 0 for s in record["host_ref_s"]) and len(record["attempts"]) == 2
    assert record["samples_s"] == call.samples_s[-ROUNDS:] and record["host_ref_s"] == call.host_refs(
        2 * warmup + ROUNDS, ROUNDS)  # the second attempt's rounds, its warm-up left out
    stats = benchmark.stats.stats.data
    assert len(stats) == ROUNDS and stats != [float(i) for i in range(warmup, warmup + ROUNDS)]  # the re-measure's
    assert record["outputs_audited"]["feeds"] == FEED_POOL
    assert gate.calls == ["settle_latency", "prove_speedup", "check"]


def test_a_disabled_benchmark_runs_the_case_once_and_records_nothing():
    gate = Gate()
    suite, runner, benchmark, _ = _run(gate, Benchmark(disabled=True))
    assert benchmark.asked == [(1, 0, 1)] and runner.calls == 1
    assert suite.records == [] and gate.calls == ["smoke"]
