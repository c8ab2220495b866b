"""metrics.embedding and its place in the parity verdict: the worst row and retrieval agreement catch what a
global cosine over all rows misses, ties are not disagreement, and a tolerance without the embedding thresholds
judges exactly as before."""

import math

import numpy as np
import pytest

from metrics import Tolerance, compare_arrays
from metrics.embedding import RETRIEVAL_MIN_ROWS, nearest_neighbours, retrieval_agreement, row_cosines

pytestmark = pytest.mark.selftest

EMBEDDING = Tolerance(rtol=1e-2, atol=1e-3, min_isclose_pct=0.0, min_cosine=0.999, min_row_cosine=0.999,
                      min_retrieval_agreement_pct=95.0)


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def emb():
    return _unit(np.random.default_rng(0).normal(size=(64, 48)))


def test_row_cosines():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [1.0, 1.0]])
    b = np.array([[2.0, 0.0], [0.0, -1.0], [0.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(row_cosines(a, b), [1.0, -1.0, 1.0, 0.0])
    np.testing.assert_allclose(row_cosines(a * 1e300, b * 1e300), [1.0, -1.0, 1.0, 0.0])  # no overflow


def test_nearest_neighbours_exclude_the_row_itself():
    x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    np.testing.assert_array_equal(nearest_neighbours(x, 1), [[1], [0], [3], [2]])
    with pytest.raises(ValueError, match="needs 1 <= k < rows"):
        nearest_neighbours(x, 4)


def test_retrieval_agreement_identical_swapped_and_too_few(emb):
    assert retrieval_agreement(emb, emb) == (100.0, 5)
    shuffled = emb[np.random.default_rng(1).permutation(len(emb))]
    pct, k = retrieval_agreement(emb, shuffled)
    assert k == 5 and pct < 30.0  # another set of vectors: hardly any neighbour in common
    pct, k = retrieval_agreement(emb[: RETRIEVAL_MIN_ROWS - 1], emb[: RETRIEVAL_MIN_ROWS - 1])
    assert math.isnan(pct) and k == 0


def test_ties_at_the_kth_place_are_not_disagreement():
    """Identical rows (one short sentence, or generated rows) tie; which of them counts as k-th is arbitrary."""
    base = _unit(np.random.default_rng(2).normal(size=(10, 16)))
    ref = np.concatenate([base, np.repeat(base[:1], 20, axis=0)])  # 21 copies of row 0
    noisy = ref + np.random.default_rng(3).normal(scale=1e-9, size=ref.shape)  # breaks the ties at random
    assert retrieval_agreement(ref, noisy)[0] == 100.0


def test_one_bad_row_fails_the_worst_row_though_the_global_cosine_passes(emb):
    bad = emb.copy()
    bad[7] = _unit(np.random.default_rng(4).normal(size=(1, 48)))[0]  # one sentence's embedding is garbage
    report = compare_arrays("sentence_embedding", emb, bad, EMBEDDING)
    assert report.cosine > 0.98 and report.worst_row_cosine < 0.5
    assert not report.passed and any(f.startswith("worst row cosine") for f in report.failures)
    assert "worst row cosine" in report.explain() and "retrieval agreement" in report.explain()


def test_swapped_neighbourhoods_fail_retrieval(emb):
    """An engine whose vectors stay near the reference's but whose neighbourhoods change fails retrieval."""
    noisy = _unit(emb + np.random.default_rng(5).normal(scale=0.25, size=emb.shape))
    report = compare_arrays("sentence_embedding", emb, noisy,
                            Tolerance(rtol=1.0, atol=1.0, min_isclose_pct=0.0, min_retrieval_agreement_pct=95.0))
    assert report.retrieval_k == 5 and report.retrieval_agreement_pct < 95.0
    assert [f for f in report.failures if f.startswith("retrieval agreement")], report.failures


def test_embeddings_report_no_top1_and_nan_still_fails(emb):
    report = compare_arrays("sentence_embedding", emb, emb, EMBEDDING)
    assert report.passed and report.top1_agreement_pct is None and not report.ranks
    assert report.as_dict()["tolerance"]["min_retrieval_agreement_pct"] == 95.0
    broken = emb.copy()
    broken[3, 0] = np.nan
    report = compare_arrays("sentence_embedding", emb, broken, EMBEDDING)
    assert not report.passed and "engine output has 1 NaN/Inf values" in report.failures


def test_without_embedding_thresholds_logits_are_judged_as_before():
    ref = np.arange(20.0).reshape(2, 10)
    report = compare_arrays("logits", ref, ref, Tolerance(min_top1_agreement_pct=99.0))
    assert report.top1_agreement_pct == 100.0 and len(report.ranks) == 10
    assert report.retrieval_agreement_pct is None and report.worst_row_cosine == pytest.approx(1.0)
    assert "min_row_cosine" not in report.tolerance.as_dict()
