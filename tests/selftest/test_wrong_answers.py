"""Issue 23, "No green over a wrong answer": every engine the suite builds is compared with the reference, and
each latency case checks what its timed calls returned. End to end in tests/selftest/test_hostile_inputs.py
(cases dynamic-engine-wrong-at-its-largest-batch, static-engine-never-compared, ...); here the pieces."""

import numpy as np
import pytest

from core.cache import ArtifactCache
from engines.base import EngineFacts, LoadedEngine, ShapeProfile, StaticBatchRunner, path_outputs
from suite.checks.latency_protocol import _set_up, check_timed_outputs
from suite.config import parse_config
from suite.session import Cell, SuiteSession
from suite.timing import TimedCall
from tests.parity.test_parity import compared_batches, engine_batches
from tests.selftest.tiny_models import Data

pytestmark = pytest.mark.selftest

T = "tests.selftest.tiny_models"
TINY = {"factory": f"{T}:two_input_net", "outputs": ["out"],
        "inputs": [{"name": "image", "shape": [1, 8, 8]}, {"name": "extra", "shape": [3], "low": -1.0, "high": 1.0}],
        "batch_sizes": [1, 4, 48], "latency_batch_sizes": [1, 4], "engines": ["torch", "onnxruntime"]}


def _session(tmp_path, **model):
    config = parse_config({"models": {"m": {**TINY, **model}}})
    return SuiteSession(config, ArtifactCache(tmp_path), "cpu")


def test_a_model_is_compared_at_its_smallest_opt_and_largest_batch_and_every_configured_one(tmp_path):
    suite = _session(tmp_path, batch_sizes=[1, 4, 48, 64], opt_batch=32, latency_batch_sizes=[2])
    assert engine_batches(suite, suite.model("m")) == [1, 2, 4, 32, 48, 64]


def test_dataset_chunks_and_the_latency_option_are_compared_too(tmp_path):
    """The chunk sizes run_batched cuts datasets into (the last one's remainder included) and the batches
    --latency-batch-sizes adds: for a static model each is an engine of its own."""
    suite = _session(tmp_path, parity_dataset=f"{T}:tiny_data", parity_samples=6, accuracy_dataset=f"{T}:tiny_data",
                     static_batch=True)
    model = suite.model("m")
    assert engine_batches(suite, model) == [1, 4, 6, 16, 48]  # 64 accuracy rows: 48 + 16; 6 parity rows
    assert engine_batches(suite, model, "3,47") == [1, 3, 4, 6, 16, 47, 48]


def test_a_static_cell_is_compared_at_every_batch_it_built(tmp_path):
    """An engine built by a test the enumeration does not foresee (padding invariance draws its row counts) is
    compared too, once built."""
    suite = _session(tmp_path, static_batch=True)

    class Built:
        built = [48, 7]

    assert compared_batches(suite, suite.model("m"), Built()) == [1, 4, 7, 48]
    assert compared_batches(suite, suite.model("m"), object()) == [1, 4, 48]


# ---- correctness inside the timed loop (suite/checks/latency_protocol.py check_timed_outputs, suite.timing.TimedCall)

class StaleGraphRunner:
    """A stand-in for a device runner (prepare_path / run_path / path_outputs, as torch's and ONNX Runtime's): its
    'graph' replays write the bound output buffer for the first ``fresh`` runs, then stop, and the buffer holds
    zeros (``stale='zeros'``: cleared in place, as a re-allocation) or the outputs of another feed, the one it was
    captured with (``stale='first-feed'``)."""

    input_names = ("image", "extra")
    output_names = ("out",)

    def __init__(self, reference, fresh=3, stale="zeros"):
        self.reference, self.fresh, self.stale, self.runs = reference, fresh, stale, 0

    def infer(self, feed):
        return self.reference.infer(feed)

    def prepare_path(self, path, feed):
        self.feed = feed
        self.buffer = {"out": np.zeros_like(self.reference.infer(feed)["out"])}
        if self.stale == "first-feed":
            self.buffer = self.reference.infer({k: v[::-1].copy() for k, v in feed.items()})
        return "stand-in clock"

    def run_path(self, path):
        self.runs += 1
        if self.runs <= self.fresh:
            self.buffer["out"][...] = self.reference.infer(self.feed)["out"]
        elif self.runs == self.fresh + 1 and self.stale == "zeros":
            self.buffer["out"][...] = 0  # re-allocated, cleared, and never written again by the replays
        return 1e-3

    def path_outputs(self, path):
        return self.buffer  # the live buffer, as a device runner's bound outputs: TimedCall must copy it


class Same:
    """The protocol's Expected for a case of one feed: the reference's outputs, and the engine's own untimed ones."""

    def __init__(self, reference, own=None):
        self._reference, self._own = reference, reference if own is None else own

    def reference(self, feed_id):
        return self._reference

    def own(self, feed_id):
        return self._own


def _latency_parts(tmp_path, **model):
    suite = _session(tmp_path, parity_dataset=f"{T}:tiny_data", **model)
    cell = Cell("m", "onnxruntime", "fp32")
    reference = suite.engine(suite.reference_cell("m")).runner
    feed = {k: v[:4].copy() for k, v in Data(8).feeds.items()}
    return suite, cell, reference, feed


def _timed(runner, path, feed, rounds=6, warmup=1):
    call = TimedCall(runner, path, feed)
    call.first_timed_round = warmup
    for _ in range(rounds):
        call()
    return call


def test_a_replay_whose_output_goes_stale_fails_its_latency_case_at_the_last_call(tmp_path):
    suite, cell, reference, feed = _latency_parts(tmp_path)
    expected = reference.infer(feed)
    call = _timed(StaleGraphRunner(reference, fresh=3, stale="zeros"), "graph", feed)
    np.testing.assert_array_equal(call.first_outputs["out"], expected["out"])  # round 2: written
    assert not np.any(call.last_outputs()["out"])  # round 6: the buffer stopped being written, zeros
    said = (r"(?m)^m-onnxruntime-fp32-bs4-graph: the last call \(round 6\) returned outputs that differ from the "
            r"reference's for this feed; the engine's own untimed run on this feed agrees with the reference, so the "
            r"timed path returned something else \(a stale or unwritten output buffer\?\): output 'out' \(4, 5\): "
            r"isclose 0\.00%")
    with pytest.raises(pytest.fail.Exception, match=said):
        check_timed_outputs(cell, "bs4", "graph", call, Same(expected), suite.model("m"))


def test_a_replay_stale_from_its_first_timed_round_fails_at_the_first_call(tmp_path):
    """A buffer holding another feed's outputs (the one it was captured with) from the start."""
    suite, cell, reference, feed = _latency_parts(tmp_path)
    expected = reference.infer(feed)
    call = _timed(StaleGraphRunner(reference, fresh=0, stale="first-feed"), "graph", feed)
    with pytest.raises(pytest.fail.Exception, match=r"the first timed call \(round 2\) returned outputs that differ"):
        check_timed_outputs(cell, "bs4", "graph", call, Same(expected), suite.model("m"))


def test_a_device_path_keeps_its_set_up_seconds_for_the_record(tmp_path):
    """What prepare_path took (a capture, an extra session) is no round's time; the record keeps it, with the
    runner's own split (issue 22: most of the latency tests' time outside their rounds)."""
    _, _, reference, feed = _latency_parts(tmp_path)
    runner = StaleGraphRunner(reference, fresh=100)
    runner.prepare_parts = {"capture": 0.25}
    call = _timed(runner, "graph", feed)
    assert call.prepare_s is not None and call.prepare_s >= 0 and call.prepare_parts == {"capture": 0.25}
    assert _set_up(call) == {"prepare_s": round(call.prepare_s, 4), "prepare_parts": {"capture": 0.25}}
    host = _timed(reference, "all", feed)
    assert host.prepare_s is None and _set_up(host) == {}


def test_a_replay_that_stays_fresh_passes_and_says_what_it_checked(tmp_path):
    suite, cell, reference, feed = _latency_parts(tmp_path)
    expected = reference.infer(feed)
    call = _timed(StaleGraphRunner(reference, fresh=100), "graph", feed)
    assert check_timed_outputs(cell, "bs4", "graph", call, Same(expected), suite.model("m")) == {
        "first timed call": "round 2: agrees with the reference", "last call": "round 6: agrees with the reference",
        "audited rounds": "3 of the timed rounds between the first and the last, drawn at random after the run: 3 "
                          "agree with the reference"}


def test_the_first_outputs_are_a_copy_that_later_calls_cannot_overwrite(tmp_path):
    """A runner handing out its live buffer (all path or device path) must not make first == last by aliasing."""
    _, _, reference, feed = _latency_parts(tmp_path)
    runner = StaleGraphRunner(reference, fresh=2)
    call = _timed(runner, "graph", feed, rounds=4, warmup=0)
    assert np.any(call.first_outputs["out"] != 0) and not np.any(runner.buffer["out"] != 0)

    class Reused:
        input_names, output_names = ("image", "extra"), ("out",)
        buffer = np.zeros((4, 5), np.float32)

        def infer(self, feed):
            self.buffer += 1
            return {"out": self.buffer}

    call = _timed(Reused(), "all", feed, rounds=4, warmup=1)  # the first timed round is the 2nd call
    assert call.first_outputs["out"][0, 0] == 2 and call.last_outputs()["out"][0, 0] == 4


def test_the_engines_own_error_is_said_and_a_declared_known_failure_is_parity_s(tmp_path):
    """An engine wrong on this feed in its untimed run too: the case fails and says so, unless the cell's known
    failure (covering parity, its pattern found) declares it."""
    suite, cell, reference, feed = _latency_parts(tmp_path)
    expected = reference.infer(feed)
    wrong = {"out": expected["out"] * 1.5}

    class Wrong:
        input_names, output_names = ("image", "extra"), ("out",)

        def infer(self, feed):
            return {"out": reference.infer(feed)["out"] * 1.5}

    call = _timed(Wrong(), "all", feed)
    with pytest.raises(pytest.fail.Exception, match=r"own untimed run on this feed differs from the reference too"):
        check_timed_outputs(cell, "bs4", "all", call, Same(expected, wrong), suite.model("m"))
    known = {"onnxruntime-fp32": {"reason": "r", "match": r"\(4, 5\): isclose 0\.00% < 99\.00% required",
                                  "checks": ["parity"], "outputs": ["out"],
                                  "metrics": ["isclose_pct", "cosine", "worst_row_rel_error"],
                                  "expected": {"isclose_pct": {"value": 0.0, "margin": 0.0},
                                               "cosine": {"value": 0.99, "margin": 0.01},
                                               "worst_row_rel_error": {"value": 0.05, "margin": 0.01}}}}
    declared = _session(tmp_path, parity_dataset=f"{T}:tiny_data", known_failures=known).model("m")
    said = check_timed_outputs(cell, "bs4", "all", call, Same(expected, wrong), declared)
    assert said["last call"].startswith("round 6: the cell's known failure (r): output 'out' (4, 5): isclose 0.00%")


def test_path_outputs_of_runners_without_their_own(tmp_path):
    """TensorRT's runner shows its outputs through staged_outputs(); a device runner with neither cannot be checked,
    which is an error; a static-batch runner reads the engine of the prepared feed's batch."""
    class Staged:
        def staged_outputs(self):
            return {"y": np.ones(2)}

    assert path_outputs(Staged(), "model")["y"].tolist() == [1.0, 1.0]
    with pytest.raises(NotImplementedError, match=r"latency-graph: object has no path_outputs\(path\)"):
        path_outputs(object(), "graph")
    _, _, reference, feed = _latency_parts(tmp_path)
    inner = StaleGraphRunner(reference, fresh=100)
    loaded = LoadedEngine(inner, EngineFacts())
    static = StaticBatchRunner(ShapeProfile(4, 4, 4, static_batch=True), lambda profile: loaded, "s")
    call = _timed(static, "graph", feed, rounds=2, warmup=0)
    np.testing.assert_array_equal(call.last_outputs()["out"], reference.infer(feed)["out"])


# ---- each engine gets its own copy of the feeds --------------------------------------------------------------------

class DoublesInPlace:
    """A runner whose model changes its input in place, as torch's does with ``x.mul_(2)`` (TorchRunner hands the
    module the arrays as they are); it records the arrays it was given."""

    input_names, output_names = ("x",), ("y",)

    def __init__(self):
        self.given = []

    def infer(self, feed):
        self.given.append(feed["x"])
        feed["x"] *= 2
        return {"y": feed["x"].sum(axis=1, keepdims=True)}


def test_run_batched_gives_each_call_its_own_copy_of_the_feed(tmp_path, monkeypatch):
    """The reference's in-place change reaches neither the caller's feed nor the engine run after it."""
    suite = _session(tmp_path, batch_sizes=[1, 4])
    runner = DoublesInPlace()
    monkeypatch.setattr(suite, "engine", lambda cell: LoadedEngine(runner, EngineFacts()))
    monkeypatch.setattr(suite, "_check_dtypes", lambda *a: None)
    feed = {"x": np.ones((6, 2), np.float32)}
    first = suite.run_batched(Cell("m", "torch", "fp32"), feed)
    second = suite.run_batched(Cell("m", "onnxruntime", "fp32"), feed)
    assert np.all(feed["x"] == 1)
    np.testing.assert_array_equal(first["y"], second["y"])
    np.testing.assert_array_equal(first["y"], np.full((6, 1), 4.0))


def test_a_timed_round_runs_on_its_own_feed_once_a_call_changes_it():
    """The all path: the caller's feed is never changed; a runner that changes its input gets a fresh copy each
    round after the first (so every round sees the case's feed), and one that does not gets the same arrays every
    round (nothing is copied: the case times what it timed before)."""
    feed = {"x": np.ones((4, 2), np.float32)}
    runner = DoublesInPlace()
    call = _timed(runner, "all", feed, rounds=4, warmup=1)
    assert np.all(feed["x"] == 1)
    np.testing.assert_array_equal(call.first_outputs["y"], np.full((4, 1), 4.0))
    np.testing.assert_array_equal(call.last_outputs()["y"], np.full((4, 1), 4.0))
    assert len({id(a) for a in runner.given}) == 4

    class Reads:
        input_names, output_names, given = ("x",), ("y",), []

        def infer(self, feed):
            self.given.append(feed["x"])
            return {"y": feed["x"].sum(axis=1, keepdims=True)}

    reads = Reads()
    _timed(reads, "all", feed, rounds=4, warmup=1)
    assert len({id(a) for a in reads.given}) == 1 and reads.given[0] is not feed["x"]
