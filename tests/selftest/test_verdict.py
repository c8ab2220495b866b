"""The run's verdict (suite/verdict.py): every check ends passed, failed or not judged, and a run that did
not judge everything, or judged nothing, does not exit 0 unless the user accepted the reason by name."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from suite import verdict
from suite.verdict import FAILED, NOT_JUDGED, PASSED, Component, Ledger

pytestmark = pytest.mark.selftest


def _report(nodeid: str, outcome: str, when: str = "call", longrepr: Any = None, **extra: Any) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, outcome=outcome, when=when, longrepr=longrepr,
                           longreprtext=str(longrepr or ""), user_properties=extra.pop("props", []), **extra)


def _skip(nodeid: str, message: str) -> SimpleNamespace:
    return _report(nodeid, "skipped", "setup", ("file.py", 1, f"Skipped: {message}"))


def test_all_passed_is_green() -> None:
    ledger = Ledger()
    ledger.add_report(_report("t::a", "passed"))
    ledger.add_report(_report("t::a", "passed", when="teardown"))
    assert ledger.outcome() == (PASSED, []) and ledger.exit_status(0) == 0


def test_a_not_judged_check_fails_the_run_unless_its_reason_is_accepted() -> None:
    for accepted, status in (((), 1), (("busy",), 1), (("unavailable",), 0)):
        ledger = Ledger(accepted=accepted)
        ledger.add_report(_report("t::a", "passed"))
        ledger.add_report(_skip("t::b", verdict.skip_message("unavailable", "tensorrt is not installed")))
        assert ledger.exit_status(0) == status, accepted
        assert ledger.checks["t::b"].reason == "unavailable"
        assert ledger.checks["t::b"].detail == "tensorrt is not installed"


def test_a_plain_skip_is_not_judged_for_an_unnamed_reason() -> None:
    ledger = Ledger(accepted=tuple(r for r in verdict.REASONS if r != "skipped"))
    ledger.add_report(_report("t::a", "passed"))
    ledger.add_report(_skip("t::b", "some reason nobody classified"))
    assert ledger.checks["t::b"].reason == "skipped" and ledger.exit_status(0) == 1


def test_nothing_judged_is_never_green_even_with_every_reason_accepted() -> None:
    ledger = Ledger(accepted=tuple(verdict.REASONS))
    ledger.add_report(_skip("t::a", verdict.skip_message("unsupported", "torch has no int8")))
    state, why = ledger.outcome()
    assert state == NOT_JUDGED and any("nothing was judged" in w for w in why) and ledger.exit_status(0) == 1


def test_a_passing_test_whose_gate_did_not_judge_is_not_judged() -> None:
    ledger = Ledger()
    busy = Component("latency gate m-torch-fp32-bs1-all", NOT_JUDGED, "busy", "others used 80%")
    ledger.add_report(_report("t::a", "passed", props=[(verdict.USER_PROPERTY, busy.as_dict())]))
    check = ledger.checks["t::a"]
    assert check.state == NOT_JUDGED and check.reason == "busy" and "others used 80%" in check.detail
    assert ledger.exit_status(0) == 1
    accepted = Ledger(accepted=("busy",))
    accepted.add_report(_report("t::a", "passed", props=[(verdict.USER_PROPERTY, busy.as_dict())]))
    accepted.add_report(_report("t::b", "passed"))
    assert accepted.exit_status(0) == 0


def test_a_failure_wins_over_everything_and_keeps_pytests_other_codes() -> None:
    ledger = Ledger(accepted=tuple(verdict.REASONS))
    ledger.add_report(_report("t::a", "passed"))
    ledger.add_report(_report("t::a", "failed", when="teardown", longrepr="E   boom"))
    assert ledger.checks["t::a"].state == FAILED and ledger.exit_status(0) == 1
    assert ledger.exit_status(4) == 4 and ledger.exit_status(2) == 2


def test_a_known_failure_as_declared_is_counted_apart_and_does_not_fail_the_run() -> None:
    ledger = Ledger()
    ledger.add_report(_report("t::a", "passed"))
    ledger.add_report(_report("t::b", "skipped", wasxfail="known failure: ort 1.31 fusions"))
    assert ledger.exit_status(0) == 0
    counts = ledger.as_dict()["counts"]
    assert counts["known_failures"] == 1 and counts["failed"] == 0


def test_a_required_engine_fails_only_when_none_of_its_checks_could_run() -> None:
    """Every check not judged for a structural reason (unsupported, unavailable, no-data, skipped): the required
    engine fails the run. A check that ran, or one a gate could not decide, or one cut off by an interruption,
    leaves it to those checks' own verdicts."""

    def ledger_with(*reasons: str) -> Ledger:
        ledger = Ledger(accepted=tuple(verdict.REASONS))
        for i, reason in enumerate(reasons):
            ledger.add(f"t::{i}", NOT_JUDGED, reason, "why")
        ledger.require("engine tensorrt", [f"t::{i}" for i in range(len(reasons))], "it is required")
        return ledger

    failed = ledger_with("unavailable", "unsupported", "no-data", "skipped")
    assert failed.outcome()[0] == FAILED
    assert [c.id for c in failed.by_state(FAILED)] == ["required engine tensorrt"]
    assert "none of its 4 checks could run" in failed.by_state(FAILED)[0].detail
    for ran in ("busy", "no-baseline", "precision-not-run", "inconclusive", "benchmark-disabled", "interrupted"):
        assert not ledger_with("unavailable", ran).by_state(FAILED), ran
    stopped = Ledger(accepted=tuple(verdict.REASONS))
    stopped.mark_interrupted("SIGTERM", ["t::0", "t::1"])
    stopped.require("engine onnxruntime", ["t::0", "t::1"], "it is required")
    assert stopped.outcome()[0] == NOT_JUDGED and not stopped.by_state(FAILED)


def test_an_interruption_marks_every_check_that_never_ended() -> None:
    ledger = Ledger(accepted=tuple(verdict.REASONS))
    ledger.add_report(_report("t::a", "passed"))
    ledger.mark_interrupted("SIGTERM", ["t::a", "t::b", "t::c"])
    state, why = ledger.outcome()
    assert state == NOT_JUDGED and any("interrupted (SIGTERM)" in w for w in why)
    assert [c.id for c in ledger.not_judged_by_reason()["interrupted"]] == ["t::b", "t::c"]


def test_reason_codes_are_checked_where_users_write_them() -> None:
    assert verdict.check_reasons(["busy", " no-baseline "], "x") == ("busy", "no-baseline")
    assert verdict.check_reasons(["none"], "x") == ()
    with pytest.raises(verdict.NotJudgedReasonError, match="unknown reason.*'bussy'.*valid: unsupported"):
        verdict.check_reasons(["bussy"], "--accept-not-judged")
    with pytest.raises(verdict.NotJudgedReasonError):
        verdict.skip_message("because", "text")


def test_the_verdict_as_data_holds_every_check_and_the_reasons_in_words() -> None:
    ledger = Ledger(accepted=("unsupported",))
    ledger.add_report(_report("t::a", "passed"))
    ledger.add_report(_report("t::b", "failed", longrepr="E   AssertionError: cosine 0.51 < 0.98"))
    ledger.add_report(_skip("t::c", verdict.skip_message("unsupported", "no int8")))
    data = ledger.as_dict()
    assert data["verdict"] == FAILED and data["counts"]["not_judged"] == {"unsupported": 1}
    assert data["failed"][0]["detail"] == "AssertionError: cosine 0.51 < 0.98"
    assert data["reasons"] == {"unsupported": verdict.REASONS["unsupported"]}
