"""Self-tests of the metrics package: hand-made arrays with known answers plus
hypothesis properties. If these are wrong, every engine verdict is wrong."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from metrics import (
    AccuracyThreshold,
    LatencySummary,
    ParityReport,
    RankStat,
    Tolerance,
    compare_arrays,
    compare_outputs,
    judge_accuracy,
    paired_overhead,
    rank_table,
    summarize_latency,
    topk_accuracy,
    topk_correct,
)

pytestmark = pytest.mark.selftest

FAST = settings(max_examples=25, deadline=None, database=None)

finite_f64 = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6)


def _json_roundtrip(d: dict[str, object]) -> dict[str, object]:
    out = json.loads(json.dumps(d, allow_nan=False))
    assert isinstance(out, dict)
    return out


# =========================================================================== parity


def test_identical_arrays_pass_with_perfect_figures() -> None:
    ref = np.linspace(-3.0, 3.0, 60, dtype=np.float32).reshape(6, 10)
    rep = compare_arrays("logits", ref, ref.copy(), Tolerance())
    assert rep.passed and rep.failures == ()
    assert rep.isclose_pct == 100.0
    assert rep.mae == 0.0 and rep.max_abs_error == 0.0 and rep.max_rel_error == 0.0
    assert rep.cosine == pytest.approx(1.0, abs=1e-15)
    assert rep.shape == (6, 10) and rep.n_elements == 60
    assert rep.nonfinite_ref == 0 and rep.nonfinite_test == 0
    assert rep.top1_agreement_pct == 100.0
    assert rep.topk_agreement_pct == {1: 100.0, 5: 100.0}
    assert [s.rank for s in rep.ranks] == list(range(1, 11))
    assert all(s.mae == 0.0 and s.disagreement_pct == 0.0 for s in rep.ranks)


def test_one_element_off_gives_exact_figures() -> None:
    ref = np.ones(200)
    test = ref.copy()
    test[7] += 0.5
    rep = compare_arrays("y", ref, test, Tolerance(min_isclose_pct=99.0))
    assert rep.isclose_pct == 99.5
    assert rep.max_abs_error == 0.5
    assert rep.mae == pytest.approx(0.5 / 200)
    assert rep.max_rel_error == pytest.approx(0.5)
    assert rep.passed

    strict = compare_arrays("y", ref, test, Tolerance(min_isclose_pct=99.6))
    assert not strict.passed
    assert strict.failures == ("isclose 99.50% < 99.60% required (rtol=0.001, atol=1e-05)",)


def test_isclose_boundary_follows_numpy_semantics() -> None:
    # |test - ref| <= atol + rtol * |ref| is close; the reference is the "b" side.
    tol = Tolerance(rtol=0.5, atol=0.0, min_isclose_pct=100.0)
    assert compare_arrays("b", np.array([2.0]), np.array([3.0]), tol).passed  # 1 <= 0.5*2
    assert not compare_arrays("b", np.array([2.0]), np.array([3.0001]), tol).passed
    # Swapping sides changes the verdict: the tolerance scales with |ref|, not |test|.
    assert compare_arrays("b", np.array([3.0001]), np.array([2.0]), tol).passed


def test_low_precision_and_integer_inputs_are_widened() -> None:
    ref = np.arange(12, dtype=np.int32).reshape(3, 4)
    test = ref.astype(np.float16)
    rep = compare_arrays("ints", ref, test, Tolerance(min_isclose_pct=100.0))
    assert rep.passed and rep.mae == 0.0
    # float16 rounding of 0.1 is ~2.4e-5 away: beyond atol=1e-5 + rtol 0 -> not close.
    rep16 = compare_arrays("f16", np.array([0.1]), np.array([0.1], dtype=np.float16), Tolerance(rtol=0.0))
    assert rep16.max_abs_error == pytest.approx(abs(float(np.float16(0.1)) - 0.1))
    assert not rep16.passed


def test_nan_in_engine_output_fails_and_stats_use_finite_elements() -> None:
    ref = np.ones(1000)
    test = ref.copy()
    test[3] = np.nan
    rep = compare_arrays("out", ref, test, Tolerance(min_isclose_pct=0.0))
    assert not rep.passed
    assert rep.nonfinite_test == 1 and rep.nonfinite_ref == 0
    assert rep.failures == ("engine output has 1 NaN/Inf values",)
    assert rep.isclose_pct == 100.0 and rep.mae == 0.0 and rep.cosine == 1.0
    assert "engine output has 1 NaN/Inf values" in rep.explain()


def test_nan_and_inf_in_reference_fail() -> None:
    ref = np.array([[1.0, np.inf, 3.0], [np.nan, 2.0, 1.0], [0.0, 1.0, 2.0]])
    test = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    rep = compare_arrays("ref_bad", ref, test, Tolerance())
    assert not rep.passed
    assert rep.failures == ("reference has 2 NaN/Inf values",)
    assert rep.n_elements == 9 and rep.nonfinite_ref == 2
    assert rep.isclose_pct == 100.0  # over the 7 finite pairs
    # Row-wise stats only over the one fully finite row.
    assert rep.top1_agreement_pct == 100.0


def test_matching_inf_in_both_still_fails() -> None:
    # numpy.isclose calls inf == inf "close"; a parity suite must not.
    ref = np.array([1.0, np.inf, -np.inf])
    rep = compare_arrays("inf", ref, ref.copy(), Tolerance(min_isclose_pct=0.0))
    assert not rep.passed
    assert set(rep.failures) == {
        "reference has 2 NaN/Inf values",
        "engine output has 2 NaN/Inf values",
    }


def test_all_nan_output_fails_every_check_and_serialises() -> None:
    ref = np.zeros((2, 3))
    test = np.full((2, 3), np.nan)
    tol = Tolerance(min_isclose_pct=0.0, max_abs_error=1.0, min_cosine=-1.0, min_top1_agreement_pct=0.0)
    rep = compare_arrays("nan", ref, test, tol)
    assert not rep.passed
    assert math.isnan(rep.isclose_pct) and math.isnan(rep.mae)
    # Even the most permissive thresholds fail on undefined (NaN) figures.
    assert len(rep.failures) == 5
    assert rep.ranks == ()
    d = _json_roundtrip(rep.as_dict())
    assert d["isclose_pct"] is None and d["passed"] is False
    assert "n/a" in rep.explain()


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"):
        compare_arrays("x", np.zeros((2, 3)), np.zeros((3, 2)), Tolerance())
    with pytest.raises(ValueError, match=r"\(4, 0\).*\(4, 1\)"):
        compare_arrays("x", np.zeros((4, 0)), np.zeros((4, 1)), Tolerance())
    with pytest.raises(ValueError, match="complex"):
        compare_arrays("x", np.zeros(2, dtype=complex), np.zeros(2), Tolerance())


@pytest.mark.parametrize("shape", [(4, 0), (0, 3), (2, 0, 5)])
def test_an_empty_output_is_compared_by_its_shape(shape: tuple[int, ...]) -> None:
    """Issue 43: an output (B, 0) of the reference's shape failed as "nothing to compare"; it passes, its figures
    n/a, the message saying it was compared by shape alone (a shape mismatch still raises, above)."""
    tol = Tolerance(min_cosine=0.99999, min_top1_agreement_pct=99.0, min_row_cosine=0.9, max_row_rel_error=1e-5)
    rep = compare_arrays("empty", np.zeros(shape), np.zeros(shape, dtype=np.float32), tol)
    assert rep.passed and rep.failures == () and rep.n_elements == 0 and rep.shape == shape
    assert math.isnan(rep.isclose_pct) and math.isnan(rep.cosine) and rep.worst_row_rel_error is None
    assert "compared by its shape alone" in rep.explain()
    d = _json_roundtrip(rep.as_dict())
    assert d["passed"] is True and d["isclose_pct"] is None and d["n_elements"] == 0


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_integer_and_boolean_outputs_are_compared_exactly(dtype: type) -> None:
    """Issue 43: token ids (argmax + 30000) one id off in every row passed as floats (isclose 100%: rtol 1e-3 x
    30000 = 30). An integer or boolean output must equal the reference's, element for element."""
    ref = (np.arange(24).reshape(6, 4) % 2).astype(dtype) if dtype is np.bool_ else \
        (np.arange(24).reshape(6, 4) + (30000 if dtype in (np.int64, np.int32) else 0)).astype(dtype)
    assert compare_arrays("ids", ref, ref.copy(), Tolerance()).exact_match_pct == 100.0
    assert compare_arrays("ids", ref, ref.copy(), Tolerance()).passed
    wrong = ref.copy()
    wrong[5, 3] = ~wrong[5, 3] if dtype is np.bool_ else wrong[5, 3] + 1
    rep = compare_arrays("ids", ref, wrong, Tolerance(min_isclose_pct=0.0 + 95.0))
    assert rep.exact_match_pct == pytest.approx(100.0 * 23 / 24)
    assert rep.failures[-1].startswith("exact match 95.83% < 100.00% required"), rep.failures
    assert "exact match 95.83%" in rep.explain()
    assert _json_roundtrip(rep.as_dict())["exact_match_pct"] == rep.exact_match_pct


def test_an_id_off_by_one_in_every_row_fails_though_isclose_reads_100() -> None:
    ids = np.arange(256, dtype=np.int64) % 10 + 30000
    rep = compare_arrays("token", ids, ids + 1, Tolerance())
    assert rep.isclose_pct == 100.0 and rep.cosine > 0.999999
    assert [f.split(" (")[0] for f in rep.failures] == ["exact match 0.00% < 100.00% required"]


def test_approximate_outputs_compares_named_integer_outputs_within_tolerance() -> None:
    """The config's way out (``parity.approximate_outputs``): the named integer outputs are judged as floats are;
    others still exactly."""
    ids = np.arange(256, dtype=np.int64) % 10 + 30000
    loose = Tolerance(approximate_outputs=("token",))
    rep = compare_arrays("token", ids, ids + 1, loose)
    assert rep.passed and rep.exact_match_pct is None
    assert not compare_arrays("other", ids, ids + 1, loose).passed
    assert loose.as_dict()["approximate_outputs"] == ["token"] and "approximate_outputs" not in Tolerance().as_dict()
    assert Tolerance(approximate_outputs=["a"]).approximate_outputs == ("a",)  # type: ignore[arg-type]
    for bad in ("token", ("",), (1,)):
        with pytest.raises(ValueError, match="approximate_outputs must be a list of output names"):
            Tolerance(approximate_outputs=bad)  # type: ignore[arg-type]


def test_one_row_five_percent_off_fails_the_row_relative_error() -> None:
    """Issue 43: at batch 256 one row scaled by 1.05 kept isclose at 99.61%, cosine 0.9999956 and the row's cosine
    at 1 (scaling keeps a direction); the worst row's relative error (5e-2) is gated."""
    ref = np.random.default_rng(0).normal(size=(256, 10))
    test = ref.copy()
    test[17] *= 1.05
    tol = Tolerance(min_cosine=0.99999, min_row_cosine=0.99999, max_row_rel_error=1e-5)
    rep = compare_arrays("logits", ref, test, tol)
    assert rep.isclose_pct > 99.0 and rep.cosine > 0.99999 and rep.worst_row_cosine == pytest.approx(1.0)
    assert rep.worst_row_rel_error == pytest.approx(0.05) and rep.worst_row == 17
    assert rep.failures == ("worst row relative error 5.000e-02 > 1.000e-05 allowed (row 17)",)
    assert compare_arrays("logits", ref, test, dataclasses.replace(tol, max_row_rel_error=0.0500001)).passed
    assert compare_arrays("logits", ref, test, dataclasses.replace(tol, max_row_rel_error=None)).passed
    assert "worst row relative error 5.000e-02 (row 17) (<= 1.000e-05 allowed)" in rep.explain()
    assert _json_roundtrip(rep.as_dict())["worst_row"] == 17


def test_the_row_relative_error_is_floored_at_atol_and_exact_for_known_rows() -> None:
    ref = np.array([[3.0, 4.0], [0.0, 0.0], [1e-9, 0.0], [1e300, -1e300]])
    test = np.array([[3.0, 4.5], [0.0, 0.0], [2e-9, 0.0], [1e300, -1e300]])
    rep = compare_arrays("x", ref, test, Tolerance(atol=1e-5, min_isclose_pct=50.0, max_row_rel_error=0.1001))
    # Row 0: |(0, 0.5)| / |(3, 4)| = 0.1; row 2's error 1e-9 against atol x sqrt(2), not against |ref| = 1e-9.
    assert rep.worst_row_rel_error == pytest.approx(0.1) and rep.worst_row == 0 and rep.passed
    tight = Tolerance(atol=1e-5, min_isclose_pct=50.0, max_row_rel_error=0.0999)
    assert compare_arrays("x", ref, test, tight).failures == (
        "worst row relative error 1.000e-01 > 9.990e-02 allowed (row 0)",)
    zero_floor = compare_arrays("x", ref[1:3], test[1:3], Tolerance(atol=0.0, max_row_rel_error=0.5))
    assert zero_floor.worst_row_rel_error == pytest.approx(1.0) and zero_floor.worst_row == 1
    one_d = compare_arrays("y", np.array([2.0, 4.0]), np.array([2.0, 5.0]),
                           Tolerance(min_isclose_pct=50.0, max_row_rel_error=0.3))
    assert one_d.worst_row_rel_error == pytest.approx(0.25) and one_d.worst_row == 1 and one_d.passed
    nan_rows = compare_arrays("n", np.array([[np.nan, 1.0]]), np.array([[1.0, 1.0]]), Tolerance(max_row_rel_error=1.0))
    assert math.isnan(nan_rows.worst_row_rel_error) and nan_rows.worst_row is None
    assert any(f.startswith("worst row relative error n/a") for f in nan_rows.failures)
    with pytest.raises(ValueError, match="max_row_rel_error must be finite and >= 0"):
        Tolerance(max_row_rel_error=-1.0)
    with pytest.raises(ValueError, match="max_row_rel_error must be finite and >= 0"):
        Tolerance(max_row_rel_error=math.inf)


def test_compare_outputs_checks_names() -> None:
    a = np.ones(3)
    with pytest.raises(ValueError, match=r"missing from engine \['b'\].*not in reference \['c'\]"):
        compare_outputs({"a": a, "b": a}, {"a": a, "c": a}, Tolerance())
    with pytest.raises(ValueError, match=r"missing from engine \['b'\]"):
        compare_outputs({"a": a, "b": a}, {"a": a}, Tolerance())
    reps = compare_outputs({"z": a, "a": a * 2}, {"a": a * 2, "z": a + 1}, Tolerance())
    assert list(reps) == ["z", "a"]
    assert isinstance(reps["a"], ParityReport)
    assert reps["a"].passed and not reps["z"].passed


def test_rank_permutation_gives_known_disagreement() -> None:
    ref = np.array(
        [
            [0.1, 0.5, 0.3, 0.9, 0.2, 0.0],
            [0.8, 0.1, 0.6, 0.0, 0.2, 0.3],
            [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
            [0.5, 0.4, 0.3, 0.2, 0.1, 0.0],
        ]
    )
    test = ref.copy()
    # Swap the values of the top-2 classes in rows 0 and 1 only.
    test[0, [3, 1]] = test[0, [1, 3]]
    test[1, [0, 2]] = test[1, [2, 0]]
    rep = compare_arrays("logits", ref, test, Tolerance(min_isclose_pct=0.0, min_top1_agreement_pct=60.0))
    assert [s.disagreement_pct for s in rep.ranks] == [50.0, 50.0, 0.0, 0.0, 0.0, 0.0]
    # Rank-1 MAE: |0.9-0.5| and |0.8-0.6| at the reference's top-1, 0 elsewhere.
    assert rep.ranks[0].mae == pytest.approx((0.4 + 0.2) / 4)
    assert rep.ranks[1].mae == pytest.approx((0.4 + 0.2) / 4)
    assert rep.ranks[2].mae == 0.0
    assert rep.top1_agreement_pct == 50.0
    assert rep.topk_agreement_pct == {1: 50.0, 5: 100.0}
    assert rep.failures == ("top-1 agreement 50.00% < 60.00% required",)
    table = rank_table(ref, test, k=2)
    assert all(isinstance(s, RankStat) for s in table)
    assert [(s.rank, s.disagreement_pct) for s in table] == [(1, 50.0), (2, 50.0)]
    assert [s.mae for s in table] == pytest.approx([0.15, 0.15])


def test_rank_mae_is_taken_at_reference_ranking() -> None:
    # Engine promotes class 1: MAE at rank 1 is measured at the reference's
    # top class (index 0: |0.9 - 0.2|), not at the engine's (index 1: |0.5 - 0.6|).
    ref = np.array([[0.9, 0.5, 0.1]])
    test = np.array([[0.2, 0.6, 0.1]])
    table = rank_table(ref, test)
    assert [s.mae for s in table] == pytest.approx([0.7, 0.1, 0.0])
    assert [s.disagreement_pct for s in table] == [100.0, 100.0, 0.0]


def test_wide_ties_use_stable_order() -> None:
    # 32 equal logits (long enough that an unstable sort would scramble them);
    # the engine lifts class 5 by 1e-12 so it ranks first, then 0, 1, 2, ...
    ref = np.zeros((1, 32))
    test = ref.copy()
    test[0, 5] = 1e-12
    rep = compare_arrays("tie", ref, test, Tolerance())
    assert rep.passed
    assert [s.disagreement_pct for s in rep.ranks] == [100.0] * 6 + [0.0] * 4
    assert rep.topk_agreement_pct == {1: 0.0, 5: 80.0}


def test_rank_depth_and_topk_keys_are_capped() -> None:
    wide = np.arange(24.0).reshape(2, 12)
    assert len(compare_arrays("w", wide, wide, Tolerance()).ranks) == 10
    narrow = np.array([[3.0, 1.0, 2.0]])
    rep = compare_arrays("n", narrow, narrow, Tolerance())
    assert len(rep.ranks) == 3 and rep.topk_agreement_pct == {1: 100.0, 3: 100.0}
    one_col = compare_arrays("c", np.ones((4, 1)), np.ones((4, 1)), Tolerance())
    assert one_col.top1_agreement_pct is None


def test_ties_broken_towards_lower_index() -> None:
    ref = np.array([[1.0, 1.0, 0.0]])
    assert rank_table(ref, ref)[0].disagreement_pct == 0.0
    # Engine breaks the tie the other way: rank 1 and 2 indices swap.
    test = np.array([[1.0, 1.0 + 1e-9, 0.0]])
    assert [s.disagreement_pct for s in rank_table(ref, test)] == [100.0, 100.0, 0.0]


def test_top1_is_judged_on_two_column_outputs() -> None:
    """Two classes are the smallest output where "top-1" means a decision (a binary classifier's logits): judged
    there, and only there (a one-column output has no top-1)."""
    ref = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    flipped = ref[:, ::-1].copy()
    flipped[0] = ref[0]  # one row of four agrees
    rep = compare_arrays("logits", ref, flipped, Tolerance(min_isclose_pct=0.0, min_top1_agreement_pct=50.0))
    assert rep.top1_agreement_pct == 25.0 and rep.topk_agreement_pct == {1: 25.0, 2: 100.0}
    assert rep.failures == ("top-1 agreement 25.00% < 50.00% required",)
    assert "top-1 agreement 25.00% (>= 50.00% required)" in rep.explain()
    one = compare_arrays("score", ref[:, :1], flipped[:, :1], Tolerance(min_isclose_pct=0.0, min_top1_agreement_pct=99))
    assert one.top1_agreement_pct is None and one.passed


@pytest.mark.parametrize("agree,passed", [(95, True), (94, False), (90, False), (96, True)])
def test_the_top1_threshold_is_exact(agree: int, passed: bool) -> None:
    """95 % required: 95 of 100 rows pass, 94 fail (a threshold moved by a point, or five, shows)."""
    ref = np.tile([3.0, 2.0, 1.0], (100, 1))
    test = ref.copy()
    test[agree:] = [2.0, 3.0, 1.0]  # the rows from ``agree`` on pick another class
    rep = compare_arrays("logits", ref, test, Tolerance(min_isclose_pct=0.0, min_top1_agreement_pct=95.0))
    assert rep.top1_agreement_pct == float(agree)
    assert rep.passed is passed
    assert rep.failures == (() if passed else (f"top-1 agreement {agree:.2f}% < 95.00% required",))


def test_a_row_is_finite_only_when_every_element_of_it_is() -> None:
    """Row statistics (top-k, ranks, worst row cosine) are taken over the rows finite in both arrays: a row with
    one NaN is left out whole, even where its other elements would disagree."""
    ref = np.array([[4.0, 3.0, 2.0, 1.0], [4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    test = ref.copy()
    test[1] = [1.0, 2.0, np.nan, 4.0]  # finite elsewhere, and ranked the other way round
    rep = compare_arrays("logits", ref, test, Tolerance(min_isclose_pct=0.0, min_top1_agreement_pct=100.0,
                                                           min_row_cosine=0.999))
    assert rep.top1_agreement_pct == 100.0 and rep.topk_agreement_pct == {1: 100.0, 4: 100.0}
    assert all(s.disagreement_pct == 0.0 and s.mae == 0.0 for s in rep.ranks)
    assert rep.worst_row_cosine == pytest.approx(1.0)
    assert rep.failures == ("engine output has 1 NaN/Inf values",)
    nd = compare_arrays("maps", ref.reshape(3, 2, 2), test.reshape(3, 2, 2),
                        Tolerance(min_isclose_pct=0.0, min_row_cosine=0.999))
    assert nd.worst_row_cosine == pytest.approx(1.0) and nd.failures == ("engine output has 1 NaN/Inf values",)


def test_an_embedding_row_with_one_nan_is_left_out_of_retrieval() -> None:
    from metrics.embedding import RETRIEVAL_MIN_ROWS

    rng = np.random.default_rng(5)
    ref = rng.normal(size=(RETRIEVAL_MIN_ROWS + 1, 8))
    test = ref.copy()
    test[0, 3] = np.nan
    rep = compare_arrays("emb", ref, test, Tolerance(min_isclose_pct=0.0, min_retrieval_agreement_pct=100.0))
    assert rep.retrieval_agreement_pct == 100.0 and rep.retrieval_k is not None
    assert rep.failures == ("engine output has 1 NaN/Inf values",)
    too_few = test.copy()
    too_few[1, 0] = np.inf  # one finite row fewer than retrieval needs
    rep = compare_arrays("emb", ref, too_few, Tolerance(min_isclose_pct=0.0, min_retrieval_agreement_pct=100.0))
    assert rep.retrieval_agreement_pct is None and rep.retrieval_k is None


def test_non_2d_outputs_have_no_row_stats() -> None:
    rep = compare_arrays("v", np.arange(5.0), np.arange(5.0), Tolerance(min_top1_agreement_pct=100))
    assert rep.top1_agreement_pct is None and rep.topk_agreement_pct == {} and rep.ranks == ()
    assert rep.passed


def test_each_optional_tolerance_reports_figure_and_threshold() -> None:
    ref = np.array([1.0, 2.0, 3.0, 4.0])
    test = np.array([1.0, 2.0, 3.0, 4.5])
    tol = Tolerance(min_isclose_pct=0.0, max_abs_error=0.1, min_cosine=0.9999)
    rep = compare_arrays("o", ref, test, tol)
    assert rep.failures == (
        "max abs error 5.000e-01 > 1.000e-01 allowed",
        f"cosine {rep.cosine:.9g} < 0.9999 required",
    )
    assert rep.cosine < 0.9999
    text = rep.explain()
    for needle in ("rtol=0.001", "atol=1e-05", "(<= 1.000e-01 allowed)", "(>= 0.9999 required)"):
        assert needle in text
    assert compare_arrays("o", ref, test, Tolerance(min_isclose_pct=0.0, max_abs_error=0.5)).passed


def test_percent_message_never_shows_equal_figures() -> None:
    ref = np.ones(100001)
    test = ref.copy()
    test[0] = 2.0  # 99.999% close
    rep = compare_arrays("o", ref, test, Tolerance(min_isclose_pct=100.0))
    assert rep.failures[0].startswith("isclose 99.999% < 100.000% required")


def test_cosine_and_relative_error_edge_cases() -> None:
    z = np.zeros(4)
    assert compare_arrays("z", z, z, Tolerance()).cosine == 1.0
    assert compare_arrays("z", z, np.ones(4), Tolerance(min_isclose_pct=0)).cosine == 0.0
    x = np.array([1e200, -3e200])
    assert compare_arrays("big", x, -x, Tolerance(min_isclose_pct=0)).cosine == pytest.approx(-1.0)
    # Scaled by the largest magnitude first, huge values cannot overflow the dot product (an overflow's NaN would be
    # clamped to -1 above, and not seen there).
    assert compare_arrays("big", x, x.copy(), Tolerance()).cosine == 1.0
    assert compare_arrays("big", x, x / 2, Tolerance(min_isclose_pct=0)).cosine == pytest.approx(1.0)
    # |ref| <= atol is excluded from the relative error (0 -> 1e-3 would be infinite).
    ref, test = np.array([0.0, 1e-6, 1.0]), np.array([1e-3, 2e-6, 1.01])
    assert compare_arrays("r", ref, test, Tolerance()).max_rel_error == pytest.approx(0.01)
    # With atol=0 every non-zero reference element counts.
    assert compare_arrays("r", ref, test, Tolerance(atol=0.0)).max_rel_error == pytest.approx(1.0)


def test_tolerance_validation() -> None:
    for bad in (
        {"rtol": -1.0},
        {"atol": float("nan")},
        {"min_isclose_pct": 101.0},
        {"max_abs_error": -0.1},
        {"min_cosine": 1.5},
        {"min_top1_agreement_pct": float("nan")},
    ):
        with pytest.raises(ValueError):
            Tolerance(**bad)


def test_rank_table_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="2-D"):
        rank_table(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="finite"):
        rank_table(np.array([[np.nan, 1.0]]), np.ones((1, 2)))
    with pytest.raises(ValueError, match="k"):
        rank_table(np.ones((1, 2)), np.ones((1, 2)), k=0)


def test_report_as_dict_is_json() -> None:
    ref = np.arange(20.0).reshape(2, 10)
    d = _json_roundtrip(compare_arrays("l", ref, ref + 0.5, Tolerance()).as_dict())
    assert d["shape"] == [2, 10] and d["passed"] is False
    assert d["topk_agreement_pct"] == {"1": 100.0, "5": 100.0}
    assert d["tolerance"] == {
        "rtol": 1e-3,
        "atol": 1e-5,
        "min_isclose_pct": 99.0,
        "max_abs_error": None,
        "min_cosine": None,
        "min_top1_agreement_pct": None,
    }
    assert isinstance(d["ranks"], list) and len(d["ranks"]) == 10


@FAST
@given(hnp.arrays(np.float64, shapes, elements=finite_f64))
def test_prop_self_comparison_passes(x: np.ndarray) -> None:
    rep = compare_arrays("x", x, x.copy(), Tolerance(min_isclose_pct=100.0, max_abs_error=0.0))
    assert rep.passed, rep.explain()
    assert rep.isclose_pct == 100.0 and rep.mae == 0.0
    assert rep.cosine == pytest.approx(1.0, abs=1e-12)


@FAST
@given(
    hnp.arrays(np.float64, shapes, elements=finite_f64).flatmap(
        lambda a: st.tuples(st.just(a), hnp.arrays(np.float64, a.shape, elements=finite_f64))
    )
)
def test_prop_stats_bounded_and_match_numpy(pair: tuple[np.ndarray, np.ndarray]) -> None:
    ref, test = pair
    tol = Tolerance(rtol=1e-2, atol=1e-1)
    rep = compare_arrays("x", ref, test, tol)
    assert 0.0 <= rep.isclose_pct <= 100.0
    assert rep.mae <= rep.max_abs_error
    assert -1.0 <= rep.cosine <= 1.0
    expected = 100.0 * np.isclose(test, ref, rtol=tol.rtol, atol=tol.atol).mean()
    assert rep.isclose_pct == pytest.approx(expected)
    assert rep.passed == (rep.isclose_pct >= 99.0)


@FAST
@given(
    hnp.arrays(np.float64, shapes, elements=finite_f64),
    st.floats(0.0, 0.1),
    st.floats(1e-8, 1.0),
)
def test_prop_noise_beyond_tolerance_is_never_close(x: np.ndarray, rtol: float, atol: float) -> None:
    signs = np.where(np.arange(x.size).reshape(x.shape) % 2 == 0, 1.0, -1.0)
    test = x + signs * 2.0 * (atol + rtol * np.abs(x))
    rep = compare_arrays("x", x, test, Tolerance(rtol=rtol, atol=atol, min_isclose_pct=0.0))
    assert rep.isclose_pct == 0.0


@FAST
@given(hnp.arrays(np.float64, shapes, elements=finite_f64), st.data())
def test_prop_any_nonfinite_value_fails(x: np.ndarray, data: st.DataObject) -> None:
    idx = data.draw(st.integers(0, x.size - 1))
    bad = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    in_ref = data.draw(st.booleans())
    poisoned = x.copy()
    poisoned.flat[idx] = bad
    ref, test = (poisoned, x) if in_ref else (x, poisoned)
    rep = compare_arrays("x", ref, test, Tolerance(min_isclose_pct=0.0))
    assert not rep.passed
    assert (rep.nonfinite_ref, rep.nonfinite_test) == ((1, 0) if in_ref else (0, 1))
    assert x.size == 1 or math.isfinite(rep.mae)


# =========================================================================== accuracy

# Hand-made 6-class logits (see comments for each label's rank).
LOGITS = np.array(
    [
        [0.1, 0.9, 0.0, 0.0, 0.0, 0.0],  # label 1: rank 0
        [0.5, 0.4, 0.3, 0.2, 0.1, 0.0],  # label 2: rank 2
        [0.5, 0.4, 0.3, 0.2, 0.1, 0.0],  # label 5: rank 5 (outside top-5)
        [0.2, 0.2, 0.0, 0.0, 0.0, 0.0],  # label 1: tie with class 0 -> rank 1
    ]
)
LABELS = np.array([1, 2, 5, 1])


def test_topk_correct_known_answers() -> None:
    assert topk_correct(LOGITS, LABELS, 1).tolist() == [True, False, False, False]
    assert topk_correct(LOGITS, LABELS, 2).tolist() == [True, False, False, True]
    assert topk_correct(LOGITS, LABELS, 3).tolist() == [True, True, False, True]
    assert topk_correct(LOGITS, LABELS, 6).tolist() == [True, True, True, True]
    assert topk_correct(LOGITS, LABELS, 100).tolist() == [True, True, True, True]
    # Tie goes to the lower index, as np.argmax does.
    assert topk_correct(LOGITS[3:], np.array([0]), 1).tolist() == [True]


def test_topk_accuracy_known_answers() -> None:
    assert topk_accuracy(LOGITS, LABELS) == {1: 0.25, 5: 0.75}
    assert topk_accuracy(LOGITS, LABELS, ks=(2, 10)) == {2: 0.5, 10: 1.0}


def test_nonfinite_rows_count_as_wrong() -> None:
    logits = np.array([[5.0, np.nan, 0.0], [5.0, 1.0, 0.0], [np.inf, 1.0, 0.0]])
    labels = np.array([0, 0, 0])
    assert topk_correct(logits, labels, 1).tolist() == [False, True, False]
    v = judge_accuracy(logits, labels, None, AccuracyThreshold())
    assert v.top1 == pytest.approx(1 / 3)
    assert not v.passed and v.nonfinite_rows == 2
    assert v.failures == ("engine logits have 2 rows with NaN/Inf (counted wrong)",)
    ref_bad = judge_accuracy(np.eye(3), labels, logits, AccuracyThreshold())
    assert ref_bad.failures == ("reference logits have 2 rows with NaN/Inf (counted wrong)",)


@pytest.mark.parametrize(
    "logits, labels, k, match",
    [
        (np.ones(3), np.array([0]), 1, "2-D"),
        (np.ones((2, 3)), np.array([[0, 1]]), 1, "1-D"),
        (np.ones((2, 3)), np.array([0]), 1, "2 rows"),
        (np.ones((2, 3)), np.array([0, 3]), 1, "out of range"),
        (np.ones((2, 3)), np.array([-1, 0]), 1, "out of range"),
        (np.ones((2, 3)), np.array([0.0, 1.0]), 1, "integers"),
        (np.ones((0, 3)), np.array([], dtype=int), 1, "empty"),
        (np.ones((2, 3)), np.array([0, 1]), 0, "k"),
    ],
)
def test_accuracy_input_validation(logits: np.ndarray, labels: np.ndarray, k: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        topk_correct(logits, labels, k)


def _logits_with(n_correct: int, n_top5_only: int, n: int, classes: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Rows with label 0: first n_correct rank it 1st, next n_top5_only 2nd, rest last."""
    logits = np.tile(np.arange(classes, 0, -1, dtype=np.float64), (n, 1))  # class 0 highest
    logits[n_correct : n_correct + n_top5_only, [0, 1]] = logits[n_correct : n_correct + n_top5_only, [1, 0]]
    logits[n_correct + n_top5_only :, 0] = 0.0
    return logits, np.zeros(n, dtype=np.int64)


def test_judge_accuracy_drop_boundaries_are_exact() -> None:
    ref, labels = _logits_with(760, 200, 1000)
    eng, _ = _logits_with(755, 205, 1000)
    ok = judge_accuracy(eng, labels, ref, AccuracyThreshold(max_top1_drop=0.005))
    assert ok.passed, ok.explain()  # 0.76 - 0.755 is 0.005000000000000004 in floats
    assert (ok.top1, ok.ref_top1, ok.top5, ok.ref_top5, ok.n) == (0.755, 0.76, 0.96, 0.96, 1000)
    bad = judge_accuracy(eng, labels, ref, AccuracyThreshold(max_top1_drop=0.0049))
    assert bad.failures == ("top-1 drop 0.50 pts (reference 76.00% -> engine 75.50%) > 0.49 pts allowed",)


def test_judge_accuracy_mlperf_ratio_and_top5() -> None:
    ref, labels = _logits_with(760, 200, 1000)
    thr = AccuracyThreshold(min_top1_ratio=0.99, max_top5_drop=0.01)
    assert judge_accuracy(_logits_with(753, 207, 1000)[0], labels, ref, thr).passed
    # Top-5 96% -> 95% is exactly the allowed 1-point drop (not a failure)...
    v = judge_accuracy(_logits_with(752, 198, 1000)[0], labels, ref, thr)
    assert v.failures == ("top-1 75.20% < 0.99 x reference 76.00% = 75.24% required",)
    # ... while 94.9% is.
    w = judge_accuracy(_logits_with(752, 197, 1000)[0], labels, ref, thr)
    assert len(w.failures) == 2
    assert w.failures[1] == ("top-5 drop 1.10 pts (reference 96.00% -> engine 94.90%) > 1.00 pts allowed")


def test_judge_accuracy_min_top1_and_explain() -> None:
    eng, labels = _logits_with(500, 100, 1000)
    v = judge_accuracy(eng, labels, None, AccuracyThreshold(min_top1=0.6))
    assert v.ref_top1 is None and v.failures == ("top-1 50.00% < 60.00% required",)
    text = v.explain()
    for needle in ("top-1 50.00%", "top-5 60.00%", "min top-1 60.00%", "n=1000"):
        assert needle in text
    assert _json_roundtrip(v.as_dict())["passed"] is False
    assert judge_accuracy(eng, labels, None, AccuracyThreshold(min_top1=0.5)).passed


def test_judge_accuracy_argument_errors() -> None:
    eng, labels = _logits_with(5, 0, 10)
    with pytest.raises(ValueError, match="ref_logits"):
        judge_accuracy(eng, labels, None, AccuracyThreshold(max_top1_drop=0.01))
    with pytest.raises(ValueError, match="shape mismatch"):
        judge_accuracy(eng, labels, np.ones((10, 7)), AccuracyThreshold())
    with pytest.raises(ValueError):
        AccuracyThreshold(min_top1=50.0)  # percent instead of fraction
    with pytest.raises(ValueError):
        AccuracyThreshold(min_top1_ratio=0.0)


@FAST
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 8), st.integers(1, 7)),
        elements=st.integers(-3, 3).map(float),  # small ints -> many ties
    ),
    st.data(),
)
def test_prop_topk_matches_stable_argsort_and_is_monotone(x: np.ndarray, data: st.DataObject) -> None:
    n, c = x.shape
    labels = np.array(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    order = np.argsort(-x, axis=1, kind="stable")
    accs = topk_accuracy(x, labels, ks=tuple(range(1, c + 1)))
    for k in range(1, c + 1):
        brute = (order[:, :k] == labels[:, None]).any(axis=1)
        assert topk_correct(x, labels, k).tolist() == brute.tolist()
    values = [accs[k] for k in range(1, c + 1)]
    assert values == sorted(values) and values[-1] == 1.0
    assert accs[1] == pytest.approx(np.mean(np.argmax(x, axis=1) == labels))


# =========================================================================== latency


def test_latency_known_summary() -> None:
    s = summarize_latency([0.001, 0.002, 0.003, 0.004, 0.005], batch_size=4)
    assert isinstance(s, LatencySummary)
    assert (s.n, s.warmup_dropped, s.batch_size) == (5, 0, 4)
    assert s.median_ms == pytest.approx(3.0) and s.mean_ms == pytest.approx(3.0)
    assert s.min_ms == pytest.approx(1.0) and s.max_ms == pytest.approx(5.0)
    assert s.p90_ms == pytest.approx(4.6) and s.p99_ms == pytest.approx(4.96)
    assert s.std_ms == pytest.approx(math.sqrt(2.0))
    assert s.throughput_per_s == pytest.approx(4 / 0.003)
    assert _json_roundtrip(s.as_dict())["n"] == 5


@pytest.mark.parametrize("n, frac, dropped", [(10, 0.1, 1), (30, 0.1, 3), (10, 0.25, 3), (7, 0.0, 0), (3, 0.5, 2)])
def test_latency_warmup_drop(n: int, frac: float, dropped: int) -> None:
    samples = [1.0] * dropped + [0.01] * (n - dropped)  # warm-up samples are slow outliers
    s = summarize_latency(samples, batch_size=1, warmup_fraction=frac)
    assert (s.warmup_dropped, s.n) == (dropped, n - dropped)
    assert s.max_ms == pytest.approx(10.0)


@pytest.mark.parametrize(
    "samples, batch, frac",
    [
        ([], 1, 0.0),
        ([0.1, 0.2], 1, 1.0),
        ([0.1], 0, 0.0),
        ([0.1, -0.1], 1, 0.0),
        ([0.1, float("nan")], 1, 0.0),
        ([float("inf")], 1, 0.0),
        ([[0.1]], 1, 0.0),
        ([0.1], 1, -0.1),
        ([0.1], 1, float("nan")),
    ],
)
def test_latency_rejects_bad_input(samples: list[float], batch: int, frac: float) -> None:
    with pytest.raises(ValueError):
        summarize_latency(samples, batch_size=batch, warmup_fraction=frac)


def test_latency_zero_median_gives_inf_throughput() -> None:
    s = summarize_latency(np.zeros(3), batch_size=2)
    assert s.throughput_per_s == math.inf
    assert _json_roundtrip(s.as_dict())["throughput_per_s"] is None


@FAST
@given(
    st.lists(st.floats(1e-6, 10.0), min_size=2, max_size=50),
    st.integers(1, 256),
    st.floats(0.0, 0.5),
)
def test_prop_latency_summary_consistent(samples: list[float], batch: int, frac: float) -> None:
    s = summarize_latency(samples, batch_size=batch, warmup_fraction=frac)
    assert s.n + s.warmup_dropped == len(samples)
    assert s.warmup_dropped == math.ceil(frac * len(samples) - 1e-9)
    assert s.min_ms <= s.median_ms <= s.p90_ms <= s.p99_ms <= s.max_ms
    assert s.min_ms <= s.mean_ms <= s.max_ms
    assert s.throughput_per_s == pytest.approx(batch / (s.median_ms / 1e3), rel=1e-12)
    assert s.median_ms == pytest.approx(1e3 * float(np.median(samples[s.warmup_dropped :])))


# ---- paired overhead (harness self-check) ------------------------------------------------------------


def test_paired_overhead_cancels_drift_shared_by_both_calls():
    """Launch-bound rounds drift 2x between blocks; both calls of a round see the same drift, so the
    per-round ratio recovers a 1 % overhead with a tight interval."""
    rng = np.random.default_rng(7)
    drift = np.repeat([1.0, 2.0, 1.0, 2.0], [45, 46, 45, 44])
    b = 4e-3 * drift * rng.normal(1.0, 0.002, drift.size)
    a = 4e-3 * 1.01 * drift * rng.normal(1.0, 0.002, drift.size)
    r = paired_overhead(a, b)
    assert r.n == 180
    assert abs(r.overhead - 0.01) < 0.002
    assert r.low <= r.overhead <= r.high and r.low < 0.01 < r.high
    assert r.high - r.low < 0.004


def test_paired_overhead_of_identical_calls_is_zero_within_its_interval():
    rng = np.random.default_rng(3)
    b = rng.lognormal(np.log(2e-3), 0.05, 200)
    a = b * rng.lognormal(0.0, 0.01, 200)
    r = paired_overhead(a, b)
    assert r.low <= 0.0 <= r.high
    assert abs(r.overhead) < 0.003


def test_paired_overhead_interval_covers_the_true_median_at_its_confidence():
    """The order-statistic interval is distribution-free: check its coverage on skewed ratios."""
    rng = np.random.default_rng(11)
    trials, n, hits = 400, 180, 0
    for _ in range(trials):
        ratio = 1.02 * rng.lognormal(0.0, 0.03, n) ** 3  # skewed; median 1.02
        r = paired_overhead(ratio * 1e-3, np.full(n, 1e-3), confidence=0.95)
        hits += r.low <= 0.02 <= r.high
    assert hits / trials >= 0.93


@pytest.mark.parametrize("a,b,match", [
    ([1.0, 2.0], [1.0], "one non-zero length"),
    ([], [], "one non-zero length"),
    ([1.0, float("nan")], [1.0, 1.0], "not finite positive"),
    ([1.0, 1.0], [1.0, 0.0], "not finite positive"),
])
def test_paired_overhead_rejects_what_is_not_a_pair_of_timings(a, b, match):
    with pytest.raises(ValueError, match=match):
        paired_overhead(a, b)


# =========================================================================== parity: exact edges (tools/mutation.sh)


def test_every_threshold_passes_when_met_exactly() -> None:
    """Each check is `measured >= required` (`<=` for max abs error): a figure exactly at its threshold passes."""
    ref = np.array([[3.0, 1.0, 2.0], [1.0, 3.0, 2.0]])
    rep = compare_arrays("logits", ref, ref.copy(), Tolerance(min_isclose_pct=100.0, max_abs_error=0.0, min_cosine=1.0,
                                                              min_top1_agreement_pct=100.0, min_row_cosine=1.0))
    assert (rep.isclose_pct, rep.max_abs_error, rep.cosine, rep.top1_agreement_pct, rep.worst_row_cosine) == (
        100.0, 0.0, 1.0, 100.0, 1.0)
    assert rep.passed


def test_a_cosine_is_clamped_to_minus_one() -> None:
    r = np.array([-0.1321048632913019, 0.6404226504432821, 0.10490011715303971, -0.535669373161111,
                  0.36159505490948474, 1.3040000451301372, 0.9470809631292422])  # r . -r rounds below -|r|^2
    assert compare_arrays("o", r, -r, Tolerance(min_isclose_pct=0.0)).cosine == -1.0


def test_relative_error_is_taken_only_where_the_reference_exceeds_atol() -> None:
    tol = Tolerance(atol=0.5, min_isclose_pct=0.0)
    assert compare_arrays("o", np.array([0.5, 2.0]), np.array([1.0, 2.0]), tol).max_rel_error == 0.0
    assert compare_arrays("o", np.array([0.5, 2.0]), np.array([1.0, 3.0]), tol).max_rel_error == 0.5
    assert compare_arrays("o", np.zeros(3), np.ones(3), Tolerance(atol=0.0, min_isclose_pct=0.0)).max_rel_error == 0.0


@pytest.mark.parametrize("field,edges,outside", [
    ("rtol", (0.0, 1e300), (-1e-12, math.inf, math.nan)),
    ("atol", (0.0, 1e300), (-1e-12, math.inf, math.nan)),
    ("min_isclose_pct", (0.0, 100.0), (-1e-9, 100.000001, math.nan)),
    ("max_abs_error", (0.0, 1e300, None), (-1e-12, math.inf, math.nan)),
    ("min_cosine", (-1.0, 1.0, None), (-1.000001, 1.000001, math.nan)),
    ("min_top1_agreement_pct", (0.0, 100.0, None), (-1e-9, 100.000001, math.nan)),
    ("min_row_cosine", (-1.0, 1.0, None), (-1.000001, 1.000001, math.nan)),
    ("min_retrieval_agreement_pct", (0.0, 100.0, None), (-1e-9, 100.000001, math.nan)),
])
def test_each_tolerance_accepts_its_range_and_names_itself_outside_it(field: str, edges: tuple[float | None, ...],
                                                                      outside: tuple[float, ...]) -> None:
    ranges = {"rtol": "must be finite and >= 0", "atol": "must be finite and >= 0",
              "max_abs_error": "must be finite and >= 0", "min_cosine": r"must be in \[-1, 1\]",
              "min_row_cosine": r"must be in \[-1, 1\]"}
    for value in edges:
        kwargs: dict[str, Any] = {field: value}
        assert getattr(Tolerance(**kwargs), field) == value
    expected = ranges.get(field, r"must be in \[0, 100\]")
    for value in outside:
        with pytest.raises(ValueError, match=f"^{field} {expected}, got {re.escape(repr(value))}$"):
            Tolerance(**{field: value})


def test_rank_table_takes_one_rank_and_one_element_and_names_bad_input() -> None:
    ref, test = np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, 3.0, 2.0]])
    assert rank_table(ref, test, k=1) == (RankStat(1, 1.0, 100.0),)
    assert rank_table(np.array([[2.0]]), np.array([[1.0]])) == (RankStat(1, 1.0, 0.0),)
    with pytest.raises(ValueError, match=r"^k must be an int >= 1, got True$"):
        rank_table(ref, test, k=True)
    with pytest.raises(ValueError, match=r"^rank_table got an empty array \(0, 3\)$"):
        rank_table(np.ones((0, 3)), np.ones((0, 3)))
    with pytest.raises(ValueError, match=r"^shape mismatch: reference \(1, 3\) vs engine \(1, 2\)$"):
        rank_table(ref, np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"^rank_table needs finite values; drop non-finite rows first$"):
        rank_table(ref, np.array([[1.0, np.inf, 2.0]]))
    with pytest.raises(ValueError, match=r"^reference: complex dtype complex128 is not supported$"):
        rank_table(ref.astype(complex), test)
    with pytest.raises(ValueError, match=r"^engine output: cannot convert dtype <U1 to float64$"):
        rank_table(ref, np.array([["a", "b", "c"]]))


def test_bad_outputs_are_named_in_the_error() -> None:
    with pytest.raises(ValueError, match=r"^reference output 'logits': complex dtype complex128 is not supported$"):
        compare_arrays("logits", np.ones(2, complex), np.ones(2), Tolerance())
    with pytest.raises(ValueError, match=r"^engine output 'logits': cannot convert dtype <U1 to float64$"):
        compare_arrays("logits", np.ones(2), np.array(["a", "b"]), Tolerance())
    with pytest.raises(ValueError, match=r"^engine outputs do not match reference outputs: missing from engine "
                                         r"\['b'\], not in reference \['c'\]$"):
        compare_outputs({"a": np.ones(1), "b": np.ones(1)}, {"a": np.ones(1), "c": np.ones(1)}, Tolerance())
    reports = compare_outputs({"a": np.ones(1), "b": np.ones(2)}, {"b": np.ones(2), "a": np.ones(1)}, Tolerance())
    assert [(k, r.name) for k, r in reports.items()] == [("a", "a"), ("b", "b")]


def test_a_percentage_shows_at_most_ten_decimals() -> None:
    ref = np.ones(1000)
    rep = compare_arrays("o", ref, ref.copy(), Tolerance(min_isclose_pct=100.0))
    failing = dataclasses.replace(rep, isclose_pct=100.0 - 1e-12)
    from metrics.parity_report import _fmt_pct_pair

    assert _fmt_pct_pair(failing.isclose_pct, 100.0) == ("100.0000000000%", "100.0000000000%")
    assert _fmt_pct_pair(math.nan, 99.0) == ("n/a (no finite values)", "99.00%")


def test_the_report_explains_every_figure_and_threshold() -> None:
    """The failure message of a parity test, whole: what a reader of a red run sees."""
    ref = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    test = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 4.0, 3.0]])
    tol = Tolerance(rtol=0.0, atol=0.0, min_isclose_pct=80.0, max_abs_error=0.5, min_cosine=0.99,
                    min_top1_agreement_pct=75.0, min_row_cosine=0.97)
    rep = compare_arrays("logits", ref, test, tol)
    assert rep.explain() == (
        "output 'logits' (2, 4): isclose 75.00% < 80.00% required (rtol=0, atol=0); max abs error 1.000e+00 > "
        "5.000e-01 allowed; cosine 0.983333333 < 0.99 required; top-1 agreement 50.00% < 75.00% required; worst row "
        "cosine 0.966666667 < 0.97 required\n"
        "  isclose 75.00% (>= 80.00% required, rtol=0, atol=0); MAE 2.500e-01; max abs 1.000e+00 (<= 5.000e-01 "
        "allowed); max rel 3.333e-01 (where |ref| > atol); cosine 0.983333333 (>= 0.99 required); worst row cosine "
        "0.966666667 (>= 0.97 required)\n"
        "  worst row relative error 2.582e-01 (row 1)\n"
        "  non-finite values: reference 0, engine 0 (of 8 elements)\n"
        "  top-1 agreement 50.00% (>= 75.00% required); top-4 overlap 100.00%\n"
        "  rank MAE/disagreement: r1 5.000e-01/50.00%, r2 5.000e-01/50.00%, r3 0.000e+00/0.00%, r4 0.000e+00/0.00%")
    plain = compare_arrays("v", np.array([1.0, 2.0]), np.array([1.0, 2.0]), Tolerance())
    assert plain.explain() == (
        "output 'v' (2,): passed\n"
        "  isclose 100.00% (>= 99.00% required, rtol=0.001, atol=1e-05); MAE 0.000e+00; max abs 0.000e+00; "
        "max rel 0.000e+00 (where |ref| > atol); cosine 1\n"
        "  worst row relative error 0.000e+00 (row 0)\n"
        "  non-finite values: reference 0, engine 0 (of 2 elements)")
    gated = compare_arrays("v", np.array([1.0, 2.0]), np.array([1.0, 2.0]), Tolerance(max_row_rel_error=1e-4))
    assert gated.explain().splitlines()[2] == "  worst row relative error 0.000e+00 (row 0) (<= 1.000e-04 allowed)"
    ids = compare_arrays("i", np.array([1, 2]), np.array([1, 2]), Tolerance(max_row_rel_error=1e-4))
    assert ids.explain().splitlines()[2:4] == ["  exact match 100.00% (integer/boolean output: 100% required)",
                                              "  worst row relative error 0.000e+00 (row 0)"]
    nan = compare_arrays("n", np.full((2, 3), np.nan), np.full((2, 3), np.nan), Tolerance())
    assert nan.explain().splitlines()[1:3] == [
        "  isclose n/a (>= 99.00% required, rtol=0.001, atol=1e-05); MAE n/a; max abs n/a; max rel n/a "
        "(where |ref| > atol); cosine n/a; worst row cosine n/a",
        "  worst row relative error n/a"]
    assert nan.explain().splitlines()[3:5] == ["  non-finite values: reference 6, engine 6 (of 6 elements)",
                                               "  top-1 agreement n/a; top-3 overlap n/a"]


def test_an_embeddings_explanation_shows_retrieval_not_top1() -> None:
    from metrics.embedding import RETRIEVAL_MIN_ROWS

    emb = np.random.default_rng(2).normal(size=(RETRIEVAL_MIN_ROWS, 8))
    rep = compare_arrays("e", emb, emb.copy(), Tolerance(min_row_cosine=0.9, min_retrieval_agreement_pct=95.0))
    lines = rep.explain().splitlines()
    assert lines[1].endswith("cosine 1; worst row cosine 1 (>= 0.9 required)")
    assert lines[4:] == ["  retrieval agreement 100.00% (5 nearest rows) (>= 95.00% required)"]
    without = compare_arrays("e", emb, emb.copy(), Tolerance(min_retrieval_agreement_pct=95.0))
    assert without.explain().splitlines()[1].endswith("cosine 1; worst row cosine 1")


def test_the_report_as_data_holds_every_figure_by_its_name() -> None:
    """--suite-results and the drift gate read these names: a renamed field is a lost one."""
    ref = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    test = np.array([[4.0, 3.0, 2.0, np.nan], [1.0, 2.0, 4.0, 3.0]])
    d = compare_arrays("logits", ref, test, Tolerance(min_isclose_pct=0.0)).as_dict()
    assert d == {
        "name": "logits", "shape": [2, 4], "n_elements": 8, "nonfinite_ref": 0, "nonfinite_test": 1,
        "isclose_pct": pytest.approx(100.0 * 5 / 7), "mae": pytest.approx(2 / 7), "max_abs_error": 1.0,
        "max_rel_error": pytest.approx(1 / 3), "cosine": pytest.approx(58 / 59), "top1_agreement_pct": 0.0,
        "topk_agreement_pct": {"1": 0.0, "4": 100.0},
        "ranks": [{"rank": 1, "mae": 1.0, "disagreement_pct": 100.0},
                  {"rank": 2, "mae": 1.0, "disagreement_pct": 100.0},
                  {"rank": 3, "mae": 0.0, "disagreement_pct": 0.0}, {"rank": 4, "mae": 0.0, "disagreement_pct": 0.0}],
        "tolerance": Tolerance(min_isclose_pct=0.0).as_dict(), "failures": ["engine output has 1 NaN/Inf values"],
        "passed": False, "worst_row_cosine": pytest.approx(29 / 30), "retrieval_agreement_pct": None,
        "retrieval_k": None, "exact_match_pct": None, "worst_row_rel_error": pytest.approx(math.sqrt(2 / 30)),
        "worst_row": 1,
    }
    nan = compare_arrays("n", np.full((2, 3), np.nan), np.full((2, 3), np.nan), Tolerance()).as_dict()
    assert (nan["worst_row_cosine"], nan["top1_agreement_pct"], nan["ranks"]) == (None, None, [])
    assert compare_arrays("v", np.ones(3), np.ones(3), Tolerance()).as_dict()["worst_row_cosine"] is None
    from metrics.embedding import RETRIEVAL_MIN_ROWS

    emb = np.random.default_rng(2).normal(size=(RETRIEVAL_MIN_ROWS, 8))
    e = compare_arrays("e", emb, emb.copy(), Tolerance(min_retrieval_agreement_pct=95.0)).as_dict()
    assert (e["retrieval_agreement_pct"], e["retrieval_k"], e["top1_agreement_pct"]) == (100.0, 5, None)


@pytest.mark.parametrize("size", [3, 1000, 64_000])
def test_identical_outputs_read_a_cosine_of_exactly_one(size: int) -> None:
    """The dot products and the norms are summed the same way: on an AVX2-only CPU np.linalg.norm's sums made
    identical outputs read 0.9999999999999999, which failed a min_cosine of 1.0."""
    ref = np.random.default_rng(size).standard_normal((size // 3 or 1, 3)).astype(np.float32)
    rep = compare_arrays("logits", ref, ref.copy(), Tolerance(min_cosine=1.0))
    assert rep.cosine == 1.0 and rep.passed
