"""The run's verdict (suite/verdict.py): every check ends passed, failed or not judged, and a run that did
not judge everything, or judged nothing, does not exit 0 unless the user accepted the reason by name. It exits
1 when a check failed and 75 (EXIT_NOT_JUDGED) when it could not judge, so CI tells the two apart."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from suite import verdict
from suite.verdict import EXIT_NOT_JUDGED, FAILED, NOT_JUDGED, PASSED, Component, Ledger

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
    for accepted, status in (((), EXIT_NOT_JUDGED), (("busy",), EXIT_NOT_JUDGED), (("unavailable",), 0)):
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
    assert ledger.checks["t::b"].reason == "skipped" and ledger.exit_status(0) == EXIT_NOT_JUDGED


def test_nothing_judged_is_never_green_even_with_every_reason_accepted() -> None:
    ledger = Ledger(accepted=tuple(verdict.REASONS))
    ledger.add_report(_skip("t::a", verdict.skip_message("unsupported", "torch has no int8")))
    state, why = ledger.outcome()
    assert state == NOT_JUDGED and any("nothing was judged" in w for w in why)
    assert ledger.exit_status(0) == EXIT_NOT_JUDGED


def test_a_passing_test_whose_gate_did_not_judge_is_not_judged() -> None:
    ledger = Ledger()
    busy = Component("latency gate m-torch-fp32-bs1-all", NOT_JUDGED, "busy", "others used 80%")
    ledger.add_report(_report("t::a", "passed", props=[(verdict.USER_PROPERTY, busy.as_dict())]))
    check = ledger.checks["t::a"]
    assert check.state == NOT_JUDGED and check.reason == "busy" and "others used 80%" in check.detail
    assert ledger.exit_status(0) == EXIT_NOT_JUDGED
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


def test_failed_exits_1_not_judged_75_and_pytests_own_codes_stand() -> None:
    """CI retries a run that could not judge and pages someone for one that failed: the two exit apart, a
    failure outranks not judged, and 75 collides with none of pytest's codes (0-6; 6 is --max-warnings), which
    stand."""
    assert EXIT_NOT_JUDGED == 75 and EXIT_NOT_JUDGED not in {int(code) for code in pytest.ExitCode}
    assert verdict.EXIT_STATUS == {PASSED: 0, FAILED: int(pytest.ExitCode.TESTS_FAILED), NOT_JUDGED: 75}
    busy = Ledger()
    busy.add("t::a", PASSED)
    busy.add("t::b", NOT_JUDGED, "busy", "others used 80%")
    assert busy.exit_status(0) == 75
    for code in (1, 2, 3, 4, 5, 6):  # a failed collection, interrupted, internal, usage, nothing collected, warnings
        assert busy.exit_status(code) == code
    # settled again after a run-level failure (the HTML report not written): 75 becomes 1, and 1 stays
    busy.add("the HTML report written", FAILED, detail="No space left on device")
    assert busy.exit_status(busy.exit_status(0)) == 1 and busy.exit_status(75) == 1
    both = Ledger()
    both.add("t::a", FAILED, detail="cosine 0.5")
    both.add("t::b", NOT_JUDGED, "busy", "others used 80%")
    assert both.exit_status(0) == 1
    passed = Ledger()
    passed.add("t::a", PASSED)
    assert passed.exit_status(0) == 0 and passed.exit_status(75) == 0


def test_a_known_failure_as_declared_is_counted_apart_and_does_not_fail_the_run() -> None:
    ledger = Ledger()
    ledger.add_report(_report("t::a", "passed"))
    ledger.add_report(_report("t::b", "skipped", wasxfail="known failure: ort 1.31 fusions"))
    assert ledger.exit_status(0) == 0
    counts = ledger.as_dict()["counts"]
    assert counts["known_failures"] == 1 and counts["failed"] == 0


def test_a_run_in_which_nothing_passed_is_not_passed() -> None:
    """issue 43, item 1: '0 passed ... 6 known failures' ended VERDICT: PASSED, exit 0. Every judged check a known
    failure: nothing was shown right, so the run is not judged (75); one check that passed makes it green again."""
    ledger = Ledger()
    for i in range(6):
        ledger.add_report(_report(f"t::{i}", "skipped", wasxfail="known failure: ort 1.31 fusions"))
    assert ledger.outcome() == (NOT_JUDGED, ["nothing passed: every judged check (6) is a known failure, so "
                                             "nothing was shown right"])
    assert ledger.exit_status(0) == verdict.EXIT_NOT_JUDGED
    ledger.add("t::ok", PASSED)
    assert ledger.outcome() == (PASSED, []) and ledger.exit_status(0) == 0
    failed = Ledger()
    failed.add("t::a", FAILED, detail="cosine 0.5")
    assert failed.outcome() == (FAILED, ["1 check(s) failed"])  # nothing passed, but that is no known failure's


def test_a_teardown_failure_after_a_known_failure_fails_the_check() -> None:
    """issue 43, item 1: the call's known failure absorbed a later teardown failure of the same test (VERDICT:
    PASSED, results.json passed, pytest exit 1). A plain failure outranks a known one; a known one never replaces a
    plain one."""
    ledger = Ledger()
    ledger.add("t::ok", PASSED)
    ledger.add_report(_report("t::a", "skipped", wasxfail="known failure: ort 1.31 fusions"))
    ledger.add_report(_report("t::a", "failed", when="teardown", longrepr="E   RuntimeError: session leaked"))
    check = ledger.checks["t::a"]
    assert (check.state, check.known_failure, check.detail) == (FAILED, False, "RuntimeError: session leaked")
    assert ledger.outcome()[0] == FAILED and ledger.exit_status(0) == 1
    ledger.add("t::a", FAILED, detail="known again", known_failure=True)
    assert not ledger.checks["t::a"].known_failure
    ledger.add("t::b", FAILED, detail="first", known_failure=True)
    ledger.add("t::b", FAILED, detail="second", known_failure=True)
    assert ledger.checks["t::b"].detail == "first"  # the same rank: the first stands


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


# ---- the ranking of states (issue 23's mutants: NOT_JUDGED outranking FAILED) -----------------------------


def test_a_failure_outranks_not_judged_whichever_comes_first() -> None:
    """A check's worst outcome stands: a teardown error after a skip fails the check, and a later skip (or a
    not-judged gate comparison) never turns a failure back into 'not judged'."""
    skipped_then_failed = Ledger()
    skipped_then_failed.add_report(_skip("t::a", verdict.skip_message("unavailable", "no tensorrt")))
    skipped_then_failed.add_report(_report("t::a", "failed", when="teardown", longrepr="E   leaked a file"))
    check = skipped_then_failed.checks["t::a"]
    assert (check.state, check.reason, check.detail) == (FAILED, None, "leaked a file")
    failed_then_skipped = Ledger()
    failed_then_skipped.add("t::a", FAILED, detail="cosine 0.5")
    failed_then_skipped.add("t::a", NOT_JUDGED, "busy", "others used 80%")
    check = failed_then_skipped.checks["t::a"]
    assert (check.state, check.reason, check.detail) == (FAILED, None, "cosine 0.5")
    failed_then_skipped.add_component("t::a", Component("latency gate x", NOT_JUDGED, "busy", "others used 80%"))
    assert failed_then_skipped.checks["t::a"].state == FAILED
    assert failed_then_skipped.checks["t::a"].detail == "cosine 0.5"
    not_judged = Ledger()
    not_judged.add("t::a", NOT_JUDGED, "no-baseline", "no such case")
    not_judged.add_component("t::a", Component("drift gate x", FAILED, None, "top-1 -3 pts"))
    check = not_judged.checks["t::a"]
    assert (check.state, check.reason, check.detail) == (FAILED, None, "drift gate x: top-1 -3 pts")
    assert verdict._rank(PASSED) < verdict._rank(NOT_JUDGED) < verdict._rank(FAILED)


def test_a_run_with_a_failure_is_failed_however_much_else_went_unjudged() -> None:
    ledger = Ledger()
    ledger.add_report(_report("t::a", "failed", longrepr="E   AssertionError: isclose 12% < 99%"))
    ledger.add_report(_skip("t::b", verdict.skip_message("busy", "others used 80%")))
    ledger.mark_interrupted("SIGTERM", ["t::a", "t::b", "t::c"])
    state, why = ledger.outcome()
    assert state == FAILED and why[0] == "1 check(s) failed"
    assert "the run was interrupted (SIGTERM)" in why and "1 not judged (busy), a reason not accepted" in why
    assert ledger.as_dict()["verdict"] == FAILED and ledger.exit_status(0) == 1


def test_only_a_reason_named_is_accepted_busy_included() -> None:
    """No reason is accepted by default, busy no more than any other: a busy case leaves the run not judged
    until the user names 'busy'."""
    assert Ledger().accepted == ()
    for accepted, state in (((), NOT_JUDGED), (("inconclusive", "no-baseline"), NOT_JUDGED), (("busy",), PASSED)):
        ledger = Ledger(accepted=accepted)
        ledger.add("t::a", PASSED)
        ledger.add("t::b", PASSED)
        ledger.add_component("t::b", Component("latency gate x", NOT_JUDGED, "busy", "others used 80%"))
        assert ledger.outcome()[0] == state, accepted
        assert ledger.exit_status(0) == (0 if state == PASSED else EXIT_NOT_JUDGED)
        assert list(ledger.unaccepted()) == ([] if state == PASSED else ["busy"])


# ---- what a check says, and what the verdict file holds (mutation testing: tools/mutation.sh) ----------------


def _crash(message: str) -> SimpleNamespace:
    """A longrepr as pytest makes it for a failure: reprcrash.message is the exception's line."""
    return SimpleNamespace(reprcrash=SimpleNamespace(message=message))


def test_a_failures_detail_is_its_exception_line_on_one_line_and_at_most_300_characters() -> None:
    ledger = Ledger()
    ledger.add_report(_report("t::a", "failed", longrepr=_crash("AssertionError: cosine 0.51\n  < 0.98 required")))
    assert ledger.checks["t::a"].detail == "AssertionError: cosine 0.51 < 0.98 required"
    ledger.add_report(_report("t::b", "failed", longrepr=_crash("x" * 400)))
    assert ledger.checks["t::b"].detail == "x" * 300
    text = "    def test_x():\n>       assert f(1) == 2\nE       assert 3 == 2\nE        +  where 3 = f(1)\n"
    ledger.add_report(_report("t::c", "failed", longrepr=text))  # no reprcrash: the first "E" line
    assert ledger.checks["t::c"].detail == "assert 3 == 2"
    ledger.add_report(_report("t::d", "failed", longrepr="E" + "y" * 400))
    assert ledger.checks["t::d"].detail == "E" + "y" * 299
    ledger.add_report(_report("t::d2", "failed", longrepr="E   " + "y" * 400))
    assert ledger.checks["t::d2"].detail == "y" * 300
    ledger.add_report(_report("t::e", "failed", when="setup",
                              longrepr="\n@pytest.fixture\ndef cell():\n>   raise KeyError\n" + "z" * 400))
    assert ledger.checks["t::e"].detail == "z" * 300  # neither the code nor the decorator around it
    ledger.add_report(_report("t::f", "failed", when="setup", longrepr=""))
    assert ledger.checks["t::f"].detail == "setup failed"
    nothing = SimpleNamespace(nodeid="t::g", outcome="failed", when="call", user_properties=[])
    ledger.add_report(nothing)  # a report without longrepr or longreprtext
    assert ledger.checks["t::g"].detail == "call failed"


def test_a_skips_detail_is_its_words_after_the_reason_code() -> None:
    ledger = Ledger()
    ledger.add_report(_skip("t::a", verdict.skip_message("unavailable", "XLA is not installed")))
    ledger.add_report(_skip("t::b", verdict.skip_message("busy", "as not judged (no-data) said")))
    ledger.add_report(_report("t::c", "skipped", "setup", "def f():\n>   x\nSkipped: 'tensorrt' missing"))
    ledger.add_report(_report("t::d", "skipped", "setup", ("file.py", 1, "no prefix")))
    ledger.add_report(_report("t::e", "skipped", "setup", "odd"))  # a text of three characters is no location tuple
    ledger.add_report(_report("t::f", "skipped", "setup", "w" * 400))
    assert [(c.reason, c.detail) for c in ledger.checks.values()] == [
        ("unavailable", "XLA is not installed"), ("busy", "as not judged (no-data) said"),
        ("skipped", "Skipped: 'tensorrt' missing"), ("skipped", "no prefix"), ("skipped", "odd"),
        ("skipped", "w" * 300)]


def test_a_known_failure_keeps_what_was_declared_and_a_setup_that_passed_is_no_verdict() -> None:
    ledger = Ledger()
    ledger.add_report(_report("t::a", "skipped", wasxfail="known failure: ort 1.31 fusions"))
    assert ledger.checks["t::a"].detail == "known failure: ort 1.31 fusions"
    ledger.add_report(_report("t::b", "passed", when="setup"))  # the call never reported: the run stopped
    assert "t::b" not in ledger.checks
    ledger.mark_interrupted("SIGTERM", ["t::a", "t::b"])
    assert (ledger.checks["t::b"].state, ledger.checks["t::b"].detail) == (NOT_JUDGED, "SIGTERM")
    bare = SimpleNamespace(nodeid="t::c", outcome="passed", when="call", longrepr=None)  # no user_properties
    ledger.add_report(bare)
    assert ledger.checks["t::c"].state == PASSED


def test_a_checks_first_outcome_of_a_rank_stands_and_keeps_its_components() -> None:
    ledger = Ledger()
    assert ledger.add("t::a", PASSED).detail == ""
    ledger.add_component("t::a", Component("drift gate x", PASSED, None, "within"))
    ledger.add("t::a", FAILED, "busy", detail="call: boom")  # a reason only travels with 'not judged'
    ledger.add("t::a", FAILED, detail="teardown: leaked")
    check = ledger.checks["t::a"]
    assert (check.state, check.reason, check.detail) == (FAILED, None, "call: boom")
    assert check.components == [Component("drift gate x", PASSED, None, "within")]
    with pytest.raises(ValueError, match=r"^unknown state 'green'$"):
        ledger.add("t::b", "green")
    with pytest.raises(verdict.NotJudgedReasonError, match=r"^t::b: unknown not-judged reason 'bussy'$"):
        ledger.add("t::b", NOT_JUDGED, "bussy")


def test_components_are_added_once_and_a_passing_one_changes_nothing() -> None:
    ledger = Ledger()
    ledger.add("t::a", PASSED)
    ok = Component("drift gate x", PASSED, None, "within")
    ledger.add_component("t::a", ok)
    ledger.add_component("t::a", ok)
    ledger.add_component("t::nowhere", ok)  # a comparison for a check never reported: dropped
    assert ledger.checks["t::a"].state == PASSED and ledger.checks["t::a"].components == [ok]
    assert "t::nowhere" not in ledger.checks
    busy = Component("latency gate y", NOT_JUDGED, "busy", "others used 80%")
    ledger.add("t::b", NOT_JUDGED, "no-baseline", "no case")
    ledger.add_component("t::b", busy)  # a not-judged check keeps its first reason
    assert (ledger.checks["t::b"].reason, ledger.checks["t::b"].detail) == ("no-baseline", "no case")
    ledger.add_component("t::b", ok)
    assert ledger.checks["t::b"].state == NOT_JUDGED


def test_a_component_travels_on_the_test_report_and_back() -> None:
    node = SimpleNamespace(user_properties=[("other", 1)])
    component = Component("latency gate m-torch-fp32-bs1-all", NOT_JUDGED, "busy", "others used 80%")
    verdict.report_component(node, component)
    assert node.user_properties == [("other", 1), (verdict.USER_PROPERTY, component.as_dict())]
    assert Component.from_dict(component.as_dict()) == component
    assert Component.from_dict({"label": 7, "state": PASSED}) == Component("7", PASSED, None, "")
    ledger = Ledger()
    ledger.add_report(_report("t::a", "passed", props=node.user_properties))
    assert ledger.checks["t::a"].components == [component]


def test_one_reports_check_is_the_one_the_ledger_makes_of_it() -> None:
    """What pytest's terminal shows for a report (suite/hooks/verdict_wiring.py's pytest_report_teststatus): the
    ledger's own reading of that report alone, None for a report that is no verdict."""
    busy = Component("latency gate m-torch-fp32-bs1-all", NOT_JUDGED, "busy", "others used 80%")
    for report in (_report("t::a", "passed", props=[(verdict.USER_PROPERTY, busy.as_dict())]),
                   _report("t::b", "passed"), _skip("t::c", verdict.skip_message("unavailable", "no tensorrt")),
                   _report("t::d", "failed", longrepr="E   boom"),
                   _report("t::e", "skipped", wasxfail="known failure: ort fusions")):
        ledger = Ledger()
        ledger.add_report(report)
        check = verdict.check_of_report(report)
        assert check is not None and check.as_dict() == ledger.checks[report.nodeid].as_dict(), report
    check = verdict.check_of_report(_report("t::a", "passed", props=[(verdict.USER_PROPERTY, busy.as_dict())]))
    assert check is not None and (check.state, check.reason) == (NOT_JUDGED, "busy")
    assert verdict.check_of_report(_report("t::f", "passed", when="setup")) is None
    assert verdict.check_of_report(_report("t::f", "passed", when="teardown")) is None


def test_skip_raises_pytests_skip_with_the_reason_code_first() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"^not judged \(no-data\): no accuracy_dataset$"):
        verdict.skip("no-data", "no accuracy_dataset")
    with pytest.raises(verdict.NotJudgedReasonError,
                       match=r"^unknown not-judged reason 'because'; valid: unsupported, unavailable, no-data, "):
        verdict.skip_message("because", "text")


def test_reason_lists_explain_what_is_wrong() -> None:
    with pytest.raises(verdict.NotJudgedReasonError,
                       match=r"^\[run\]: 'none' means no reason and cannot be combined with others$"):
        verdict.check_reasons(["none", "busy"], "[run]")
    with pytest.raises(verdict.NotJudgedReasonError,
                       match=r"^x: unknown reason\(s\) 'a', 'b'; valid: unsupported, unavailable, no-data, "
                             r"precision-not-run, .*, skipped \(or none\)$"):
        verdict.check_reasons(["a", "busy", "b"], "x")
    assert verdict.check_reasons(["", " "], "x") == ()


def test_the_first_error_that_ended_a_run_stands() -> None:
    ledger = Ledger()
    ledger.note_error("usage: --models x: unknown model")
    ledger.note_error("internal: teardown")
    assert ledger.error == "usage: --models x: unknown model"
    assert ledger.as_dict()["error"] == "usage: --models x: unknown model"
    assert "error" not in Ledger().as_dict()


def test_nothing_judged_says_whether_there_were_checks() -> None:
    assert Ledger().outcome() == (NOT_JUDGED, ["nothing was judged: the run had no checks"])
    ledger = Ledger(accepted=("unavailable",))
    ledger.add("t::a", NOT_JUDGED, "unavailable", "no GPU")
    assert ledger.outcome() == (NOT_JUDGED, ["nothing was judged: every check ended without a verdict"])


def test_a_required_engines_failure_names_its_reasons_and_an_example() -> None:
    ledger = Ledger(accepted=tuple(verdict.REASONS))
    ledger.add("t::0", NOT_JUDGED, "unsupported", "no int8 path")
    ledger.add("t::1", NOT_JUDGED, "unavailable", "tensorrt is not installed")
    ledger.require("engine tensorrt", ["t::0", "t::1", "t::missing"], "--engines names it")
    assert ledger.checks["required engine tensorrt"].detail == (
        "--engines names it and none of its 2 checks could run (not judged: unavailable, unsupported; "
        "e.g. no int8 path)")


def test_the_verdict_file_holds_every_field_by_its_name() -> None:
    """--suite-results and the HTML report read these names: a renamed field is a lost one."""
    ledger = Ledger(accepted=("unsupported",))
    ledger.add_report(_report("t::a", "passed"))
    ledger.add_report(_report("t::b", "failed", longrepr=_crash("AssertionError: cosine 0.51 < 0.98")))
    ledger.add_report(_report("t::c", "skipped", wasxfail="known: ort 1.31"))
    ledger.add_report(_skip("t::d", verdict.skip_message("unsupported", "no int8")))
    ledger.add_component("t::a", Component("latency gate x", NOT_JUDGED, "busy", "others used 80%"))
    ledger.mark_interrupted("SIGTERM", ["t::e"])
    data = ledger.as_dict()
    assert {k: data[k] for k in ("verdict", "why", "accepted", "interrupted", "counts", "reasons")} == {
        "verdict": FAILED,
        "why": ["1 check(s) failed", "the run was interrupted (SIGTERM)", "1 not judged (busy), a reason not accepted",
                "1 not judged (interrupted), a reason not accepted"],
        "accepted": ["unsupported"], "interrupted": "SIGTERM",
        "counts": {"passed": 0, "failed": 1, "known_failures": 1,
                   "not_judged": {"busy": 1, "interrupted": 1, "unsupported": 1}},
        "reasons": {r: verdict.REASONS[r] for r in ("busy", "interrupted", "unsupported")},
    }
    assert data["failed"] == [{"id": "t::b", "state": FAILED, "reason": None,
                               "detail": "AssertionError: cosine 0.51 < 0.98", "known_failure": False,
                               "components": []}]
    assert data["known_failures"] == [{"id": "t::c", "state": FAILED, "reason": None, "detail": "known: ort 1.31",
                                       "known_failure": True, "components": []}]
    assert data["not_judged"]["busy"] == [{
        "id": "t::a", "state": NOT_JUDGED, "reason": "busy", "detail": "latency gate x: others used 80%",
        "known_failure": False, "components": [{"label": "latency gate x", "state": NOT_JUDGED, "reason": "busy",
                                                "detail": "others used 80%"}]}]
    assert [c["id"] for c in data["not_judged"]["interrupted"]] == ["t::e"]
    assert [c["id"] for c in data["not_judged"]["unsupported"]] == ["t::d"]
    assert list(data["states"].items()) == [  # every check's end by id, sorted (tools/compare_runs.py)
        ("t::a", "not judged (busy)"), ("t::b", "failed"), ("t::c", "failed (known failure)"),
        ("t::d", "not judged (unsupported)"), ("t::e", "not judged (interrupted)")]
    ledger.add("t::0", PASSED)
    assert ledger.as_dict()["states"]["t::0"] == "passed" and next(iter(ledger.as_dict()["states"])) == "t::0"


def test_the_verdict_file_names_the_required_engines_a_run_left_out() -> None:
    """A run that narrowed a config-required engine away in the open (--engines, --models) says so in its verdict,
    sorted by engine; a run that left none out has no such key."""
    ledger = verdict.Ledger()
    ledger.add("a", verdict.PASSED)
    assert "required_engines_left_out" not in ledger.as_dict()
    ledger.left_out = {"tensorrt": "left out by --engines torch", "onnxruntime": "no selected model lists it"}
    assert list(ledger.as_dict()["required_engines_left_out"].items()) == [
        ("onnxruntime", "no selected model lists it"), ("tensorrt", "left out by --engines torch")]


def test_a_start_up_failure_is_the_failed_setup_that_carries_its_property() -> None:
    """verdict.start_up_failure: a test whose model failed its start-up check fails in setup, marked by the
    START_UP_FAILURE user property (suite/hooks/startup_check.py); any other setup failure, or the property elsewhere,
    is not one."""
    def report(when: str, outcome: str, *props: tuple[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(when=when, outcome=outcome, user_properties=list(props))

    marked = (verdict.START_UP_FAILURE, "m")
    assert verdict.start_up_failure(report("setup", "failed", ("x", 1), marked)) is True
    assert verdict.start_up_failure(report("setup", "failed", ("x", 1))) is False
    assert verdict.start_up_failure(report("call", "failed", marked)) is False
    assert verdict.start_up_failure(report("setup", "passed", marked)) is False
    assert verdict.start_up_failure(SimpleNamespace(when="setup", outcome="failed")) is False


def test_the_verdict_names_thresholds_other_than_the_defaults_in_the_block_and_the_report() -> None:
    """Issue 43 item 7: a model's loosened thresholds are named in the verdict (results.json), in the terminal's
    verdict block (suite/hooks/summary.py) and in the report's first section (report/verdict_section.py); a run without
    any has no such key, line or box."""
    from report.verdict_section import verdict_section
    from suite.hooks.summary import threshold_lines

    ledger = verdict.Ledger()
    ledger.add("a", verdict.PASSED)
    assert "thresholds_not_default" not in ledger.as_dict() and threshold_lines(ledger.thresholds) == []
    assert "Thresholds other than" not in verdict_section(ledger.as_dict(), None)
    ledger.thresholds = {"m int8": ["parity.min_cosine 0.99 (default 0.98, tighter)"],
                         "m fp32": ["parity.rtol 0.5 (default 0.001, looser)", "accuracy.max_top1_drop off (default "
                                    "0.005, looser)"]}
    assert list(ledger.as_dict()["thresholds_not_default"]) == ["m fp32", "m int8"]
    assert threshold_lines(ledger.thresholds) == [
        "judged against thresholds other than the precision's defaults (README 'Defaults per precision'):",
        "  m fp32: parity.rtol 0.5 (default 0.001, looser), accuracy.max_top1_drop off (default 0.005, looser)",
        "  m int8: parity.min_cosine 0.99 (default 0.98, tighter)"]
    html = verdict_section(ledger.as_dict(), None)
    assert html.index("Thresholds other than the precision's defaults") < html.index("</section>")
    assert ('<li><b>m fp32</b>: <span class="not-accepted">parity.rtol 0.5 (default 0.001, looser)</span>' in html)
    assert '<span class="accepted">parity.min_cosine 0.99 (default 0.98, tighter)</span>' in html


def test_a_settled_check_reads_back_whole_and_a_merge_keeps_the_worse() -> None:
    """suite-merge (tools/merge.py) reads each shard's settled checks back (Check.from_dict) and absorbs them into one
    ledger: every field kept, an unknown state or reason refused, and of one id made by two shards the worse stands."""
    check = verdict.Check("t[x]", NOT_JUDGED, "busy", "why", False, [Component("gate", NOT_JUDGED, "busy", "d")])
    assert verdict.Check.from_dict(check.as_dict()) == check
    known = verdict.Check("k", FAILED, None, "as declared", True)
    assert verdict.Check.from_dict(known.as_dict()) == known
    assert verdict.Check.from_dict({"id": "p", "state": PASSED, "reason": "busy"}).reason is None
    for bad in ({**check.as_dict(), "reason": "nope"}, {**check.as_dict(), "state": "fine"},
                {**check.as_dict(), "reason": None}):
        with pytest.raises(verdict.NotJudgedReasonError, match=r"^t\[x\]: unknown state"):
            verdict.Check.from_dict(bad)
    bare = verdict.Check.from_dict({"id": "b", "state": FAILED})  # what an older verdict may leave out
    assert (bare.detail, bare.known_failure, bare.components) == ("", False, [])
    ledger = Ledger()
    ledger.absorb(verdict.Check("r", NOT_JUDGED, "busy"))
    ledger.absorb(verdict.Check("r", PASSED))
    ledger.absorb(verdict.Check("r", NOT_JUDGED, "inconclusive"))  # as bad: the first stands
    assert ledger.checks["r"].state == NOT_JUDGED and ledger.checks["r"].reason == "busy"
    ledger.absorb(verdict.Check("r", FAILED, None, "broken"))
    assert ledger.checks["r"].state == FAILED and ledger.checks["r"].detail == "broken"
    ledger.absorb(verdict.Check("r", NOT_JUDGED, "busy"))
    assert ledger.checks["r"].state == FAILED
    ledger.absorb(verdict.Check("s", PASSED))
    assert ledger.outcome()[0] == FAILED and ledger.checks["s"].state == PASSED


def test_shard_lost_is_a_reason_no_default_accepts() -> None:
    ledger = Ledger(accepted=("no-baseline",))
    ledger.add("a", PASSED)
    ledger.add("shard 2/3: m-torch-fp32", NOT_JUDGED, "shard-lost", "missing")
    assert ledger.outcome()[0] == NOT_JUDGED and ledger.exit_status(0) == EXIT_NOT_JUDGED
    assert Ledger(accepted=verdict.check_reasons(["shard-lost"], "x")).accepted == ("shard-lost",)
