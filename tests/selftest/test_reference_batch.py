"""``reference_batch``: the fp32 reference runs every feed at one batch (SuiteSession.run_batched), so that a
backend's cost per new shape (cuDNN's run-time compiled depthwise plans, docs/gpu.md) is paid once per model and
process, not at every batch a test brings. What must hold: the reference sees that one batch and nothing else, its
answer for each row is the row's own (the filler rows' outputs never reach a comparison), and engines still run at
the batches under test."""

import numpy as np
import pytest

from core.cache import ArtifactCache
from core.inputs import tile_to_batch
from engines.base import EngineFacts, LoadedEngine
from suite.config import parse_config
from suite.session import Cell, SuiteSession

pytestmark = pytest.mark.selftest

T = "tests.selftest.tiny_models"
TINY = {"factory": f"{T}:two_input_net", "outputs": ["out"],
        "inputs": [{"name": "image", "shape": [1, 8, 8]}, {"name": "extra", "shape": [3], "low": -1.0, "high": 1.0}],
        "batch_sizes": [1, 4, 48], "engines": ["torch", "onnxruntime"]}
REFERENCE, ENGINE = Cell("m", "torch", "fp32"), Cell("m", "onnxruntime", "fp32")


def _session(tmp_path, **model):
    return SuiteSession(parse_config({"models": {"m": {**TINY, **model}}}), ArtifactCache(tmp_path), "cpu")


class RowWise:
    """Each output row a function of its input row alone (as an inference model's); remembers the batches it ran."""

    input_names, output_names = ("x",), ("y",)

    def __init__(self):
        self.batches = []

    def infer(self, feed):
        self.batches.append(len(feed["x"]))
        return {"y": (feed["x"] * 3.0 + 1.0).astype(np.float32)}


def _fake(monkeypatch, suite):
    runners = {REFERENCE: RowWise(), ENGINE: RowWise()}
    monkeypatch.setattr(suite, "engine", lambda cell: LoadedEngine(runners[cell], EngineFacts()))
    return runners


def _feed(rows):
    return {"x": np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)}


@pytest.mark.parametrize("rows", [1, 3, 4, 9, 50])
def test_the_reference_runs_every_feed_at_its_one_batch_and_answers_for_the_feed_rows_alone(tmp_path, monkeypatch,
                                                                                              rows):
    suite = _session(tmp_path, reference_batch=4)
    runners = _fake(monkeypatch, suite)
    out = suite.run_batched(REFERENCE, _feed(rows))
    assert set(runners[REFERENCE].batches) == {4}
    assert len(runners[REFERENCE].batches) == -(-rows // 4)
    np.testing.assert_array_equal(out["y"], _feed(rows)["x"] * 3.0 + 1.0)


def test_engines_still_run_at_the_batches_under_test(tmp_path, monkeypatch):
    """Only the reference is filled: an engine is judged at the batch a test brings, in chunks of its profile's
    largest; the dtype check of an engine that comes first runs the reference at its batch too."""
    suite = _session(tmp_path, reference_batch=4)
    runners = _fake(monkeypatch, suite)
    suite.run_batched(ENGINE, _feed(50))
    assert runners[ENGINE].batches == [48, 2]
    assert runners[REFERENCE].batches == [4]  # the dtype check: the chunk's first 4 rows


def test_without_reference_batch_the_reference_runs_as_engines_do(tmp_path, monkeypatch):
    suite = _session(tmp_path)
    runners = _fake(monkeypatch, suite)
    suite.run_batched(REFERENCE, _feed(50))
    assert runners[REFERENCE].batches == [48, 2]


def test_a_filled_reference_gives_the_real_model_the_same_answer(tmp_path):
    """The tiny torch model on the CPU, reference_batch 4 against none, at row counts below, at and above it."""
    filled, plain = _session(tmp_path / "a", reference_batch=4), _session(tmp_path / "b")
    rng = np.random.default_rng(0)
    for rows in (1, 3, 7):
        feed = {"image": rng.random((rows, 1, 8, 8), dtype=np.float32),
                "extra": rng.uniform(-1, 1, (rows, 3)).astype(np.float32)}
        a, b = filled.run_batched(filled.reference_cell("m"), feed), plain.run_batched(plain.reference_cell("m"), feed)
        assert a["out"].shape == b["out"].shape == (rows, *b["out"].shape[1:])
        np.testing.assert_allclose(a["out"], b["out"], rtol=1e-5, atol=1e-6)


def test_the_filler_repeats_the_chunks_own_rows_in_order():
    """What the reference is given (core.inputs.tile_to_batch, as latency tiles data rows): the chunk's rows first,
    then the same rows again, each input keeping its dtype."""
    feed = {"x": np.array([[1], [2], [3]]), "m": np.array([[1, 0], [1, 1], [0, 1]], np.int64)}
    out = tile_to_batch(feed, 7)
    np.testing.assert_array_equal(out["x"][:, 0], [1, 2, 3, 1, 2, 3, 1])
    np.testing.assert_array_equal(out["m"][3:6], feed["m"])
    assert out["m"].dtype == np.int64
