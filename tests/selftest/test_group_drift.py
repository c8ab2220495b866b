"""A whole group of latency cases slower by a little (metrics/group_drift.py, suite/gate/latency.py group_drifts):
what one case's interval cannot catch, the median over an engine's cases does, against the kept nights' own noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from metrics.distributions import student_t_quantile
from metrics.drift import DriftTolerances
from metrics.group_drift import MIN_CASES, MIN_HALF, MIN_NIGHTS, GroupCase, GroupDrift, judge_groups, leave_one_out
from suite import verdict
from suite.gate.baselines import load_latency_baselines
from suite.gate.latency import GROUP_MIN_EFFECT
from suite.gate.state import Gate

GROUP = ("cuda", "device", "torch")


def _cases(change: float, nights: int = 5, cases: int = 8, noise: float = 0.002, seed: int = 0) -> list[GroupCase]:
    """``cases`` cases whose kept nights share a night-to-night wobble of about ``noise`` (log), each with its own
    level; every case's current change is ``change`` (log) plus a little of its own."""
    rng = np.random.default_rng(seed)
    wobble = rng.normal(0.0, noise, nights)
    out = []
    for i in range(cases):
        level = math.log(1e-3 * (i + 1))
        logs = tuple(level + w + rng.normal(0.0, noise / 4) for w in wobble)
        out.append(GroupCase(f"c{i}", change + rng.normal(0.0, noise / 4), logs))
    return out


def test_leave_one_out_is_each_night_against_the_others() -> None:
    assert leave_one_out([0.0, 0.0, 3.0]) == pytest.approx([-1.5, -1.5, 3.0])


def test_a_two_percent_slowdown_of_every_case_fails_the_group_and_none_passes() -> None:
    slow = judge_groups({GROUP: _cases(math.log(1.02))}, 0.99, 0.01)[0]
    assert slow.verdict == "regression" and slow.cases == 8 and slow.nights == 5
    assert slow.half is not None and slow.half < math.log(1.02)
    assert slow.change_pct == pytest.approx(2.0, abs=0.2) and "regression" in slow.explain()
    same = judge_groups({GROUP: _cases(0.0)}, 0.99, 0.01)[0]
    assert same.verdict == "unchanged"
    fast = judge_groups({GROUP: _cases(math.log(0.97))}, 0.99, 0.01)[0]
    assert fast.verdict == "improvement"


def test_one_case_that_moved_alone_does_not_move_the_group() -> None:
    cases = _cases(0.0)
    cases[0] = GroupCase("c0", math.log(1.5), cases[0].nights)
    drift = judge_groups({GROUP: cases}, 0.99, 0.01)[0]
    assert drift.verdict == "unchanged" and drift.largest[0][0] == "c0"


def test_noisy_nights_widen_the_interval_so_the_same_change_passes() -> None:
    assert judge_groups({GROUP: _cases(math.log(1.02), noise=0.03)}, 0.99, 0.01)[0].verdict == "unchanged"


def test_nights_that_agree_exactly_still_need_the_smallest_interval_and_the_effect() -> None:
    still = [GroupCase(f"c{i}", math.log(1.004), (0.0,) * 5) for i in range(12)]
    assert judge_groups({GROUP: still}, 0.99, 0.001)[0].verdict == "unchanged"  # 0.4 % < MIN_HALF
    assert MIN_HALF == pytest.approx(math.log(1.005))
    moved = [GroupCase(f"c{i}", math.log(1.007), (0.0,) * 5) for i in range(12)]
    assert judge_groups({GROUP: moved}, 0.99, 0.001)[0].verdict == "regression"
    assert judge_groups({GROUP: moved}, 0.99, 0.01)[0].verdict == "unchanged"  # under the effect that counts


def test_too_few_nights_or_cases_is_not_judged() -> None:
    few_nights = judge_groups({GROUP: _cases(math.log(1.5), nights=MIN_NIGHTS - 1)}, 0.99, 0.01)[0]
    assert few_nights.verdict == "not-judged" and few_nights.half is None and "not judged" in few_nights.explain()
    few_cases = judge_groups({GROUP: _cases(math.log(1.5), cases=MIN_CASES - 1)}, 0.99, 0.01)[0]
    assert few_cases.verdict == "not-judged"
    # a case with fewer nights than the rest (new since) is left out, not aligned wrongly
    cases = _cases(math.log(1.02))
    cases.append(GroupCase("new", math.log(3.0), cases[0].nights[:2]))
    assert judge_groups({GROUP: cases}, 0.99, 0.01)[0].cases == 8


def test_the_interval_is_the_nights_level_over_the_groups_judged() -> None:
    one = judge_groups({GROUP: _cases(0.0)}, 0.99, 0.01)[0]
    many = judge_groups({(*GROUP, str(i)): _cases(0.0) for i in range(10)}, 0.99, 0.01)[0]
    assert one.half is not None and many.half is not None and many.half > one.half


def _night(path: Path, scale: float, bound: str = "device") -> Path:
    benchmarks = [{"name": f"test_latency[m{i}-torch-fp16-bs1-graph]",
                   "extra_info": {"model": f"m{i % 2}", "engine": "torch", "precision": "fp16", "batch_size": i + 1,
                                  "path": "latency-graph", "device": "cuda:0", "bound": bound,
                                  "samples_s": [1e-3 * (i + 1) * scale * (1 + 0.001 * (r % 3)) for r in range(30)],
                                  "gate": {"interference": 0.0}}} for i in range(12)]
    path.write_text(json.dumps({"machine_info": {"suite_environment": {"device": "cuda:0"}},
                                "datetime": "2026-01-01T00:00:00", "benchmarks": benchmarks}))
    return path


def _gate_over(tmp_path: Path) -> Gate:
    scales = (1.0, 1.002, 0.999, 1.001, 0.998)
    files = [_night(tmp_path / f"n{i}.json", s) for i, s in enumerate(scales)]
    return Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={}, latency_baseline=load_latency_baselines(files))


def _judge(gate: Gate, scale: float, busy: float = 0.0) -> verdict.Ledger:
    for i in range(12):
        record = {"kind": "latency", "model": f"m{i % 2}", "engine": "torch", "precision": "fp16",
                  "batch_size": i + 1, "path": "graph", "device": "cuda:0", "bound": "device",
                  "samples_s": [1e-3 * (i + 1) * scale * (1 + 0.001 * (r % 3)) for r in range(30)]}
        outcome, _ = gate.check_latency(record, f"node{i}", interference=busy)
        assert outcome is not None and outcome.group == ("cuda", "device", "torch", f"m{i % 2}")
    ledger = verdict.Ledger()
    gate.take_group_drifts(ledger)
    return ledger


def test_the_gate_fails_the_run_when_an_engines_cases_are_slower_as_a_group(tmp_path: Path) -> None:
    gate = _gate_over(tmp_path)
    ledger = _judge(gate, 1.02)
    assert all(o.status != "regression" for o in gate.latency)  # no case alone fails on 2 %
    failed = {c.id: c for c in ledger.checks.values() if c.state == verdict.FAILED}
    assert set(failed) == {"latency group cuda/device/torch", "latency group cuda/device/torch/m0",
                           "latency group cuda/device/torch/m1"}
    assert "median +2.0" in failed["latency group cuda/device/torch"].detail
    assert GROUP_MIN_EFFECT == 0.01
    shown = gate.as_dict()["groups"]
    assert {tuple(g["group"]) for g in shown} >= {("cuda", "device", "torch")}
    json.dumps(shown, allow_nan=False)


def test_an_unchanged_night_fails_no_group(tmp_path: Path) -> None:
    gate = _gate_over(tmp_path)
    ledger = _judge(gate, 1.0005)
    assert not ledger.checks and {g.verdict for g in gate.groups} == {"unchanged"}


def test_cases_a_neighbour_kept_busy_count_in_no_group(tmp_path: Path) -> None:
    gate = _gate_over(tmp_path)
    for o in gate.latency:
        assert o.status != "busy"
    gate.latency.clear()
    _judge(gate, 1.02, busy=0.9)  # device-bound: judged whatever the CPUs did, so they still count
    assert any(g.verdict == "regression" for g in gate.groups)
    for o in gate.latency:
        o.status = "busy"
    assert all(g.verdict == "not-judged" for g in gate.group_drifts()) or not gate.group_drifts()


# ---- the rule's exact arithmetic and boundaries (each line a mutant of metrics/group_drift.py it kills) -------------


def _still(current: float, nights: int = 5, cases: int = 5) -> list[GroupCase]:
    """Cases whose kept nights agree exactly (the interval is MIN_HALF), each changed by ``current`` (log)."""
    return [GroupCase(f"c{i}", current, (0.0,) * nights) for i in range(cases)]


def test_the_half_width_is_t_at_the_nights_bonferroni_level_times_the_leave_one_out_rms() -> None:
    nights = (0.0, 0.01, -0.01, 0.02)
    cases = [GroupCase(f"c{i}", 0.0, tuple(v + i for v in nights)) for i in range(5)]
    drift = judge_groups({GROUP: cases}, 0.99, 0.01)[0]
    loo = leave_one_out(list(nights))
    rms = math.sqrt(sum(d * d for d in loo) / 4)
    expected = student_t_quantile(1 - 0.01 / 2, 3) * rms * math.sqrt((1 + 1 / 4) / (1 + 1 / 3))
    assert drift.half == pytest.approx(expected, rel=1e-12) and drift.nights == 4 and drift.cases == 5
    two = judge_groups({GROUP: cases, ("other",): cases}, 0.99, 0.01)[0]
    assert two.half == pytest.approx(student_t_quantile(1 - 0.01 / 4, 3) * rms * math.sqrt((1 + 1 / 4) / (1 + 1 / 3)))


def test_exactly_the_least_nights_and_cases_are_judged_and_a_group_not_judged_says_why() -> None:
    assert judge_groups({GROUP: _still(0.0, nights=MIN_NIGHTS, cases=MIN_CASES)}, 0.99, 0.01)[0].verdict == "unchanged"
    few = judge_groups({GROUP: _still(0.0, cases=MIN_CASES - 1)}, 0.99, 0.01)[0]
    assert few == _not_judged(GROUP, MIN_CASES - 1, 5)
    empty = judge_groups({GROUP: []}, 0.99, 0.01)[0]
    assert empty == _not_judged(GROUP, 0, 0)
    assert empty.explain() == ("cuda/device/torch: 0 case(s), not judged (needs 3 kept nights and 5 cases every one "
                               "holds)")
    # a group not judged does not stop the next one from being judged
    after = judge_groups({("a",): _still(0.0, nights=2), GROUP: _still(math.log(1.02))}, 0.99, 0.01)
    assert [d.verdict for d in after] == ["not-judged", "regression"]


def _not_judged(group: tuple[str, ...], cases: int, nights: int) -> GroupDrift:
    return GroupDrift(group, cases, nights, 0.0, None, "not-judged",
                      "needs 3 kept nights and 5 cases every one holds")


@pytest.mark.parametrize(("current", "effect", "verdict"), [
    (MIN_HALF, 0.001, "unchanged"),  # the change exactly at the interval's edge is inside it
    (math.log1p(0.01), 0.01, "regression"),  # exactly the effect that counts, beyond the interval
    (-MIN_HALF, 0.001, "unchanged"),
    (-math.log1p(0.01), 0.01, "improvement"),
    (math.log1p(-0.003), 0.001, "unchanged"),  # beyond the effect, inside the interval
    (math.log1p(-0.007), 0.01, "unchanged"),  # beyond the interval, under the effect
    (math.log1p(0.007), 0.01, "unchanged"),
])
def test_the_decision_at_its_edges(current: float, effect: float, verdict: str) -> None:
    drift = judge_groups({GROUP: _still(current)}, 0.99, effect)[0]
    assert drift.half == MIN_HALF and drift.verdict == verdict


def test_what_a_judged_group_says() -> None:
    cases = [GroupCase(f"c{i}", math.log(1 + i / 100), (0.0,) * 5) for i in range(6)]
    drift = judge_groups({GROUP: cases}, 0.99, 0.01)[0]
    assert drift.largest == (("c5", math.log(1.05)), ("c4", math.log(1.04)), ("c3", math.log(1.03)))
    assert drift.explain() == (
        "cuda/device/torch: median +2.50% over 6 cases, between-night interval +-0.50% from 5 kept nights: regression "
        "(the whole group slower by more than its interval and 1.0%); most moved: c5 +5.0%, c4 +4.0%, c3 +3.0%")
    same = judge_groups({GROUP: _still(0.0)}, 0.99, 0.01)[0]
    assert same.why == "within its interval or under the effect that counts"
    assert same.explain() == ("cuda/device/torch: median +0.00% over 5 cases, between-night interval +-0.50% from 5 "
                              "kept nights: unchanged; most moved: c0 +0.0%, c1 +0.0%, c2 +0.0%")
    fast = judge_groups({GROUP: _still(math.log(0.97))}, 0.99, 0.01)[0]
    assert fast.why == "the whole group faster by more than its interval and 1.0%"


# ---- which cases count in which group (suite/gate/latency.py group_drifts) -------------------------------------------


def _outcome(label: str, model: str, change: float, status: str = "unchanged", engine: str = "torch",
             group: bool = True, nights: bool = True) -> object:
    from dataclasses import replace

    from metrics.regression import compare_latency
    from suite.gate.latency import LatencyOutcome

    comparison = replace(compare_latency([[1e-3] * 10, [1e-3] * 10], [1e-3] * 10), ratio=math.exp(change))
    return LatencyOutcome(label, label, status, comparison, group=("cuda", "device", engine, model) if group else None,
                          nights=(0.0,) * 5 if nights else None)


def _groups_of(outcomes: list[object]) -> dict[tuple[str, ...], object]:
    gate = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={})
    gate.latency.extend(outcomes)  # type: ignore[arg-type]
    return {d.group: d for d in gate.group_drifts()}


def test_an_engine_of_one_model_is_one_group_and_a_model_of_exactly_five_cases_is_its_own() -> None:
    one = _groups_of([_outcome(f"a{i}", "a", 0.02) for i in range(6)])
    assert set(one) == {("cuda", "device", "torch")}
    two = _groups_of([_outcome(f"a{i}", "a", 0.02) for i in range(5)] + [_outcome(f"b{i}", "b", 0.0) for i in range(4)])
    assert set(two) == {("cuda", "device", "torch"), ("cuda", "device", "torch", "a")}  # b's 4 cases: none of its own
    assert two[("cuda", "device", "torch", "a")].verdict == "regression"
    assert [label for label, _ in two[("cuda", "device", "torch", "a")].largest] == ["a0", "a1", "a2"]


def test_a_case_busy_slower_by_its_clock_without_kept_nights_or_without_a_group_counts_in_none() -> None:
    cases = [_outcome("busy", "a", 0.5, status="busy"), _outcome("no-nights", "a", 0.5, nights=False),
             _outcome("clock", "a", 0.5, status="slower-clock"),
             _outcome("no-group", "a", 0.5, group=False)]
    cases += [_outcome(f"a{i}", "a", 0.0) for i in range(5)]
    drift = _groups_of(cases)[("cuda", "device", "torch")]
    assert drift.cases == 5 and drift.verdict == "unchanged"


def test_a_cpu_case_is_grouped_as_the_cpus_and_a_record_without_a_bound_as_host_bound(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"machine_info": {}, "benchmarks": [{"name": "x", "extra_info": {
        "model": "m", "engine": "onnxruntime", "precision": "fp32", "batch_size": 1, "path": "latency-all",
        "samples_s": [1e-3] * 20}}]}))
    gate = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={}, latency_baseline=load_latency_baselines([path]))
    record = {"kind": "latency", "model": "m", "engine": "onnxruntime", "precision": "fp32", "batch_size": 1,
              "path": "all", "samples_s": [1e-3] * 20}
    outcome, _ = gate.check_latency(record, "node", interference=0.0)
    assert outcome is not None and outcome.group == ("cpu", "host", "onnxruntime", "m")
    assert outcome.nights == pytest.approx((math.log(1e-3),))
