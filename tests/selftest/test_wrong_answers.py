"""Issue 23, "No green over a wrong answer": every engine the suite builds is compared with the reference, and
each latency case checks what its timed calls returned. End to end in tests/selftest/test_hostile_inputs.py
(cases dynamic-engine-wrong-at-its-largest-batch, static-engine-never-compared, ...); here the pieces."""

import pytest

from suite.cache import ArtifactCache
from suite.config import parse_config
from suite.session import SuiteSession
from tests.parity.test_parity import compared_batches, engine_batches

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
