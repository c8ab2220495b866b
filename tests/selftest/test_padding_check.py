"""tests/parity/test_embeddings.py can fail: an engine that lets padded positions into a sentence's embedding
fails its comparison, whatever fills them, and one that honours the mask passes."""

import numpy as np
import pytest

from core.inputs import synthetic_feed
from metrics import Tolerance, compare_outputs
from tests.parity.test_embeddings import FILLERS, repad
from tests.selftest import tiny_transformer as tt

pytestmark = pytest.mark.selftest

TOLERANCE = Tolerance(rtol=1e-3, atol=1e-5, min_isclose_pct=99.0, min_cosine=0.99999, min_row_cosine=0.99999)
TABLE = np.random.default_rng(0).normal(size=(tt.VOCAB, 8))


class MeanRunner:
    """Mean of a token table over the positions the mask keeps, or (leaky) over every position."""

    def __init__(self, leaky):
        self.leaky = leaky

    def infer(self, feed):
        vectors = TABLE[feed["input_ids"]]
        keep = np.ones_like(feed["attention_mask"]) if self.leaky else feed["attention_mask"]
        return {"sentence_embedding": (vectors * keep[..., None]).sum(1) / keep.sum(1, keepdims=True)}


@pytest.fixture(scope="module")
def feeds():
    return synthetic_feed(tt.INPUTS, 6, "uniform", seed=1, dims={"seq": 12})


def _compare(runner, feeds, filler):
    rng = np.random.default_rng(2)
    rows = [0, 2, 3, 5]
    short = int(feeds["attention_mask"][rows].sum(1).max())
    a = runner.infer(repad(feeds, tt.INPUTS, "attention_mask", rows, short, "pad", rng))
    b = runner.infer(repad(feeds, tt.INPUTS, "attention_mask", rows, 24, filler, rng))
    return compare_outputs(a, b, TOLERANCE)["sentence_embedding"]


@pytest.mark.parametrize("filler", FILLERS)
def test_a_leaky_engine_fails_and_a_masked_one_passes(feeds, filler):
    assert not _compare(MeanRunner(leaky=True), feeds, filler).passed
    report = _compare(MeanRunner(leaky=False), feeds, filler)
    assert report.passed, report.explain()


def test_repad_keeps_tokens_and_fills_only_padding(feeds):
    rng = np.random.default_rng(3)
    out = repad(feeds, tt.INPUTS, "attention_mask", [1, 4], 20, "random", rng)
    lengths = feeds["attention_mask"][[1, 4]].sum(1)
    assert out["attention_mask"].shape == (2, 20)
    np.testing.assert_array_equal(out["attention_mask"].sum(1), lengths)
    for i, n in enumerate(lengths):
        np.testing.assert_array_equal(out["input_ids"][i, :n], feeds["input_ids"][[1, 4][i], :n])
    assert out["input_ids"].min() >= 0 and out["input_ids"].max() < tt.VOCAB
