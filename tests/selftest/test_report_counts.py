"""Every count agrees with the verdict (issue 24): a test whose check was not judged is never shown as passed,
neither in pytest's stats line (its category, word and letter) nor in pytest-html's rows and counters nor in
pytest's --junitxml file (a <skipped> testcase, suite/hooks/junit.py), in one process and under pytest-xdist; and
identical skips are one row of the HTML report, with their count."""

from __future__ import annotations

import html as htmllib
import itertools
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _pytest.junitxml import LogXML, xml_key

from report.results_table import NOT_JUDGED_LABEL, settle
from suite import verdict
from suite.hooks.junit import JunitVerdict
from suite.hooks.verdict_wiring import VerdictPlugin
from suite.verdict import FAILED, NOT_JUDGED, PASSED, Component, Ledger
from tests.selftest.suite_runs import ROOT, explain, run_suite, timed_only
from tests.selftest.test_report import CHROMIUM, _chromium, _rendered_rows

pytestmark = pytest.mark.selftest

BUSY = Component("latency gate m-torch-fp32-bs1-all", NOT_JUDGED, "busy", "others used 80%")
TRT = verdict.skip_message("unsupported", "TensorRT needs a CUDA device")


def _report(nodeid: str, outcome: str, when: str = "call", **extra: Any) -> SimpleNamespace:
    """A test report as the ledger and pytest's terminal read it (also one sent by an xdist worker)."""
    props = extra.pop("props", [])
    longrepr = extra.pop("longrepr", None)
    return SimpleNamespace(nodeid=nodeid, outcome=outcome, when=when, longrepr=longrepr,
                           longreprtext=str(longrepr or ""), user_properties=props, passed=outcome == "passed",
                           skipped=outcome == "skipped", failed=outcome == "failed", **extra)


def _skip(nodeid: str, message: str) -> SimpleNamespace:
    return _report(nodeid, "skipped", "setup", longrepr=("file.py", 1, f"Skipped: {message}"))


# =========================================================================== pytest's stats line


def test_a_test_whose_check_was_not_judged_is_counted_not_judged_never_passed() -> None:
    """pytest's category for each report is the verdict's: a test that passed while its gate could not judge is
    'not judged' (letter n), a skip is 'not judged' (letter s); what the verdict judged keeps pytest's own status
    (None: pytest's hooks decide), and so does a known failure (xfailed)."""
    status = VerdictPlugin(config=None).pytest_report_teststatus  # type: ignore[arg-type]
    busy = _report("t::a", "passed", props=[(verdict.USER_PROPERTY, BUSY.as_dict())])
    assert status(busy) == (NOT_JUDGED, "n", ("NOT JUDGED", {"yellow": True}))  # type: ignore[arg-type]
    assert status(_skip("t::b", TRT)) == (NOT_JUDGED, "s", ("NOT JUDGED", {"yellow": True}))  # type: ignore[arg-type]
    assert status(_skip("t::c", "a plain skip")) is not None  # type: ignore[arg-type]  # not judged (skipped)
    ok = Component("drift gate x", PASSED, None, "within")
    for judged in (_report("t::d", "passed"), _report("t::d", "passed", props=[(verdict.USER_PROPERTY, ok.as_dict())]),
                   _report("t::e", "failed", longrepr="E   boom"),
                   _report("t::f", "failed", props=[(verdict.USER_PROPERTY, BUSY.as_dict())]),  # a failure wins
                   _report("t::g", "skipped", wasxfail="known failure: ort fusions"),
                   _report("t::a", "passed", when="setup"), _report("t::a", "passed", when="teardown")):
        assert status(judged) is None, judged  # type: ignore[arg-type]


# =========================================================================== pytest-html's rows and counters


def _row(nodeid: str, result: str, when: str = "call", log: str = "No log output captured.") -> dict[str, Any]:
    """A row as pytest-html 4 stores it (ReportData.data["tests"][nodeid])."""
    test_id = nodeid if when == "call" else f"{nodeid}::{when}"
    return {"extras": [], "result": result, "testId": test_id, "duration": "3 ms", "log": log,
            "resultsTableRow": [f'<td class="col-result">{result}</td>', f'<td class="col-testId">{test_id}</td>',
                                '<td class="col-duration">3 ms</td>', '<td class="col-links"></td>']}


def _outcomes() -> dict[str, dict[str, Any]]:
    """pytest-html 4's counters (ReportData.outcomes), before the settling counts them again."""
    return {k: {"label": label, "value": 99} for k, label in (
        ("failed", "Failed"), ("passed", "Passed"), ("skipped", "Skipped"), ("xfailed", "Expected failures"),
        ("xpassed", "Unexpected passes"), ("error", "Errors"), ("rerun", "Reruns"), ("retried", "Retried"))}


def _cell(row: dict[str, Any], column: str) -> str:
    match = re.search(rf'<td class="col-{column}">(.*?)</td>', "".join(row["resultsTableRow"]))
    assert match, row
    return match.group(1)


def test_the_html_table_and_counters_are_the_verdicts() -> None:
    """A run with a pass, a busy latency case, identical skips, one other skip, a failure in call, one in setup,
    a known failure, a required engine that never ran and two tests an interruption left unrun: every row says
    what the verdict says, identical skips are one row, and the counters are the verdict's counts."""
    ledger = Ledger()
    reports = [_report("t::pass", "passed"), _report("t::busy", "passed", props=[(verdict.USER_PROPERTY,
                                                                                  BUSY.as_dict())]),
               *(_skip(f"t::trt{i}", TRT) for i in range(3)),
               _skip("t::other", verdict.skip_message("unsupported", "torch has no int8 path")),
               _skip("t::same-words", verdict.skip_message("unavailable", "TensorRT needs a CUDA device")),
               _report("t::fail", "failed", longrepr="E   isclose 12% < 99%"),
               _report("t::setup", "failed", when="setup", longrepr="E   no such fixture"),
               _report("t::known", "skipped", wasxfail="known failure: ort fusions")]
    for report in reports:
        ledger.add_report(report)
    ledger.add("required engine tensorrt", FAILED, detail="tensorrt is required (--engines) and none of its checks "
                                                          "could run")
    ledger.mark_interrupted("SIGTERM", ["t::unrun", "t::unrun2"])
    result_of = {"passed": "Passed", "failed": "Failed", "skipped": "Skipped"}
    tests: dict[str, list[dict[str, Any]]] = {
        r.nodeid: [_row(r.nodeid, "Error" if r.when == "setup" and r.failed else "XFailed"
                        if hasattr(r, "wasxfail") else result_of[r.outcome], r.when)] for r in reports}
    tests["t::busy"][0]["log"] = "captured: the timed loop's output"
    outcomes = _outcomes()
    settle(tests, outcomes, {i: c.as_dict() for i, c in ledger.checks.items()})

    rows = {nodeid: rows[0] for nodeid, rows in tests.items()}
    busy = rows["t::busy"]
    assert busy["result"] == "Skipped" and _cell(busy, "result") == "Not judged (busy)"
    assert busy["log"] == ("not judged (busy): latency gate m-torch-fp32-bs1-all: others used 80%\n\n"
                           "captured: the timed loop's output")
    folded = rows["t::trt0"]
    assert "t::trt1" not in tests and "t::trt2" not in tests and folded["count"] == 3
    assert _cell(folded, "result") == "Not judged (unsupported)" and _cell(folded, "testId") == "3 tests: t::trt0 ..."
    assert folded["log"] == htmllib.escape("not judged (unsupported): TensorRT needs a CUDA device\n\n"
                                           "t::trt0\nt::trt1\nt::trt2") and _cell(folded, "duration") == "9 ms"
    for alone in ("t::other", "t::same-words"):  # other words, or the same words for another reason: rows apart
        assert "count" not in rows[alone] and rows[alone]["result"] == "Skipped", alone
    assert _cell(rows["t::same-words"], "result") == "Not judged (unavailable)"
    required = rows["required engine tensorrt"]
    assert required["result"] == "Failed" and _cell(required, "testId") == "required engine tensorrt"
    assert "none of its checks could run" in required["log"] and _cell(required, "result") == "Failed"
    unrun = rows["t::unrun"]  # never reported: a row each, folded as skips are
    assert unrun["result"] == "Skipped" and _cell(unrun, "result") == "Not judged (interrupted)"
    assert unrun["log"] == "not judged (interrupted): SIGTERM\n\nt::unrun\nt::unrun2" and unrun["count"] == 2
    assert "t::unrun2" not in tests
    assert [r["result"] for r in tests["t::known"]] == ["XFailed"]  # the known failure is not added again
    assert (rows["t::pass"]["result"], rows["t::fail"]["result"], rows["t::setup"]["result"]) == \
        ("Passed", "Failed", "Error")
    assert not [n for n, r in rows.items() if r["result"] == "Passed" and ledger.checks[n].state != PASSED]

    counts = ledger.as_dict()["counts"]
    value = {k: o["value"] for k, o in outcomes.items()}
    assert value["passed"] == counts["passed"] == 1
    assert value["skipped"] == sum(counts["not_judged"].values()) == 8 and outcomes["skipped"]["label"] == \
        NOT_JUDGED_LABEL
    assert value["failed"] + value["error"] == counts["failed"] == 3
    assert value["xfailed"] == counts["known_failures"] == 1 and value["xpassed"] == value["rerun"] == 0


def test_a_row_pytest_html_never_saw_has_its_columns_and_others_left_empty() -> None:
    """A row added for a run-level check takes an existing row's cells (a plugin may add columns), emptied."""
    tests = {"t::a": [_row("t::a", "Passed")]}
    tests["t::a"][0]["resultsTableRow"].append('<td class="col-owner">team <b>A</b></td>')
    ledger = Ledger()
    ledger.add("t::a", PASSED)
    ledger.add("pytest-benchmark --benchmark-compare-fail: t::a (0001)", FAILED, detail="Performance has regressed")
    outcomes = _outcomes()
    settle(tests, outcomes, {i: c.as_dict() for i, c in ledger.checks.items()})
    added = tests["pytest-benchmark --benchmark-compare-fail: t::a (0001)"][0]
    assert added["resultsTableRow"] == ['<td class="col-result">Failed</td>',
                                        '<td class="col-testId">pytest-benchmark --benchmark-compare-fail: t::a '
                                        '(0001)</td>', '<td class="col-duration">0 ms</td>',
                                        '<td class="col-links"></td>', '<td class="col-owner"></td>']
    assert tests["t::a"][0]["resultsTableRow"][0] == '<td class="col-result">Passed</td>'  # untouched
    assert (outcomes["passed"]["value"], outcomes["failed"]["value"], outcomes["skipped"]["value"]) == (1, 1, 0)


# =========================================================================== a real run, in one process and under xdist


def _pytest_html(path: Path) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int], dict[str, str]]:
    """The rows (pytest-html's data blob), the counters and their labels of a written report."""
    text = path.read_text()
    blob = re.search(r'data-jsonblob="([^"]*)"', text)
    assert blob, path
    counters = re.findall(r'<span class="(\w+)">(\d+) ([^<,]*),?</span>', text)
    return (json.loads(htmllib.unescape(blob.group(1)))["tests"], {k: int(n) for k, n, _ in counters},
            {k: label for k, _, label in counters})


def _stats_line(stdout: str) -> dict[str, int]:
    """pytest's stats line, as {category: count}, its tests' categories only (not warnings)."""
    line = re.findall(r"^=* ?((?:\d+ [a-z ]+(?:, )?)+) in [\d.]+s", stdout, flags=re.M)
    assert line, stdout[-3000:]
    return {word: int(n) for n, word in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", line[-1])
            if word not in ("warning", "warnings")}


@pytest.fixture(scope="module")
def not_judged_runs(suite_baseline: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same NOT JUDGED run of the tiny config twice, in one process and with -n 2: latency cases that ran
    but were not timed against a latency baseline (not judged, benchmark-disabled), identical skips (the
    device-resident path on a CPU), checks that passed (accuracy, parity) and an accepted skip (no-data)."""
    out = tmp_path_factory.mktemp("counts")
    base = next((suite_baseline / "benchmarks").rglob("0001_base.json"))
    runs: dict[str, Any] = {}
    for name, extra in (("one process", ()), ("xdist", ("-n", "2"))):
        results, report = out / f"{name}.json", out / f"{name}.html"
        done = run_suite(suite_baseline, "--models", "steady,tiny", "--latency-paths", "all,model",
                         "--latency-batch-sizes", "1", "--benchmark-disable", "--latency-baseline", str(base),
                         "--suite-results", str(results), "--html", str(report), "--self-contained-html",
                         "--junitxml", str(report.with_suffix(".xml")), *extra)
        assert results.exists() and report.exists() and report.with_suffix(".xml").exists(), explain(done)
        runs[name] = (done, json.loads(results.read_text())["verdict"], *_pytest_html(report), report)
    return runs


@pytest.mark.parametrize("name", ["one process", "xdist"])
def test_a_not_judged_run_counts_as_its_verdict_on_the_terminal_and_in_the_report(
        not_judged_runs: dict[str, Any], name: str) -> None:
    done, found, rows, counters, labels, _ = not_judged_runs[name]
    assert done.returncode == verdict.EXIT_NOT_JUDGED and found["verdict"] == NOT_JUDGED, explain(done)
    counts = found["counts"]
    not_judged = sum(counts["not_judged"].values())
    assert counts["passed"] > 0 and counts["failed"] == 0 and not_judged >= 6, found
    assert set(counts["not_judged"]) == {"benchmark-disabled", "unsupported", "no-data"}, found
    # the terminal: pytest's stats line is the verdict's counts, above the verdict block
    assert _stats_line(done.stdout) == {"passed": counts["passed"], "not judged": not_judged}, explain(done)
    assert f"checks: {counts['passed']} passed, 0 failed, {not_judged} not judged" in done.stdout
    # the report: its counters are the verdict's, and no check the verdict has as not judged is a Passed row
    assert counters["passed"] == counts["passed"] and counters["skipped"] == not_judged, (counters, counts)
    assert counters["failed"] == counters["error"] == counters["xfailed"] == 0 and labels["skipped"] == NOT_JUDGED_LABEL
    states = found["states"]
    shown = {nodeid: row for nodeid, group in rows.items() for row in group}
    ran_not_judged = [n for n, s in states.items() if s == "not judged (benchmark-disabled)"]
    assert len(ran_not_judged) == 3, states  # steady-torch, tiny-torch, tiny-onnxruntime: ran, not timed
    for nodeid, row in shown.items():
        state = states[nodeid]
        want = "Passed" if state == PASSED else "Skipped"
        assert row["result"] == want, (nodeid, state, row["result"])
        assert ('<td class="col-result">Passed</td>' in row["resultsTableRow"]) == (state == PASSED), (nodeid, row)
    # the junit file: each not-judged test a <skipped> testcase saying why, its counts the verdict's
    _assert_junit_is_the_verdict(not_judged_runs[name][-1].with_suffix(".xml"), found)
    # identical skips (the device-resident path of every CPU cell) are one row, counting and listing them
    folded = [row for row in shown.values() if row.get("count")]
    assert len(folded) == 1 and folded[0]["count"] == 3, folded
    assert "not judged (unsupported): latency-model keeps tensors on a CUDA device; cpu has none" in folded[0]["log"]
    assert sum(row.get("count", 1) for row in shown.values()) == len(states)


def test_xdist_leaves_the_verdict_and_every_count_as_in_one_process(not_judged_runs: dict[str, Any]) -> None:
    one, xdist = not_judged_runs["one process"], not_judged_runs["xdist"]
    assert one[1]["states"] == xdist[1]["states"] and one[1]["counts"] == xdist[1]["counts"]
    assert _stats_line(one[0].stdout) == _stats_line(xdist[0].stdout)
    assert one[3] == xdist[3]  # the HTML counters


@pytest.mark.skipif(CHROMIUM is None, reason=verdict.skip_message(
    "unavailable", "chromium is not installed (apt-get install chromium; .ci/run does)"))
def test_a_not_judged_run_renders_no_passed_row_for_a_check_not_judged(not_judged_runs: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    """The report as a browser shows it, after pytest-html's scripts built the table: each row's class (its
    colour, filter and sort) is its check's (passed, or not judged: pytest-html's 'skipped'), its first cell
    says 'Not judged' with the reason, and the counters are the verdict's."""
    _, found, _, _, _, report = not_judged_runs["one process"]
    dom = _chromium(tmp_path, _rendered_rows, "--virtual-time-budget=5000", "--dump-dom", report.as_uri()).stdout
    bodies = re.findall(r'<tbody class="results-table-row (\w+)" id="([^"]*)">(.*?)</tbody>', dom, flags=re.S)
    assert len(bodies) == len(found["states"]) - 2, bodies  # 3 identical skips in one row
    for row_class, test_id, body in bodies:
        result = re.search(r'<td class="col-result[^"]*">(.*?)</td>', body)
        assert result, body
        nodeid = re.sub(r"^\d+ tests: | \.\.\.$|::setup$", "", htmllib.unescape(test_id))
        if found["states"][nodeid] == PASSED:
            assert (row_class, result.group(1)) == ("passed", "Passed"), test_id
        else:
            reason = found["states"][nodeid].removeprefix("not judged (").removesuffix(")")
            assert (row_class, result.group(1)) == ("skipped", f"Not judged ({reason})"), test_id
    counts = found["counts"]
    assert f'<span class="passed">{counts["passed"]} Passed,</span>' in dom
    assert f'<span class="skipped">{sum(counts["not_judged"].values())} Not judged,</span>' in dom
    assert '<span class="failed">0 Failed,</span>' in dom and '<span class="error">0 Errors,</span>' in dom


def test_a_case_the_compared_run_lacks_is_counted_not_judged_after_the_run(tmp_path: Path) -> None:
    """pytest-benchmark's --benchmark-compare-fail compares after the last test: the cases its compared run lacks
    were counted passed as they ran and are counted not judged (no-baseline) in the stats line that follows, as
    the verdict has them, and in the report."""
    latency = (str(ROOT / "tests" / "latency" / "test_latency.py"),)
    saved = run_suite(tmp_path, "--models", "steady", "--latency-rounds", "10", "--latency-batch-sizes", "1",
                      "--benchmark-autosave", tests=latency)
    assert timed_only(saved), explain(saved)  # it only saved the baseline: timed, not judged (docs/gating.md)
    report, results, junit = tmp_path / "report.html", tmp_path / "results.json", tmp_path / "junit.xml"
    done = run_suite(tmp_path, "--models", "steady,tiny", "--latency-rounds", "10", "--latency-batch-sizes", "1",
                     "--latency-busy-limit", "100%", "--benchmark-compare=0001",
                     "--benchmark-compare-fail=median:1000%",
                     "--accept-not-judged", "no-data",  # not no-baseline, which the tiny config accepts
                     "--html", str(report), "--self-contained-html", "--suite-results", str(results),
                     "--junitxml", str(junit), tests=latency)
    assert done.returncode == verdict.EXIT_NOT_JUDGED, explain(done)
    assert "not judged (no-baseline, NOT accepted): 2" in done.stdout, explain(done)
    assert _stats_line(done.stdout) == {"passed": 1, "not judged": 2}, explain(done)
    _, counters, _ = _pytest_html(report)
    assert (counters["passed"], counters["skipped"]) == (1, 2), counters
    found = json.loads(results.read_text())["verdict"]
    late = [n for n, s in found["states"].items() if s == "not judged (no-baseline)"]
    assert len(late) == 2, found["states"]
    cases = _assert_junit_is_the_verdict(junit, found)
    for nodeid in late:  # closed by pytest's junit writer at the test's teardown, settled after the compare
        assert cases[nodeid][0][:2] == ("skipped", "pytest.skip") and "compare" in cases[nodeid][0][2], cases


def test_a_case_compare_fail_flags_is_one_failed_case_everywhere(tmp_path: Path) -> None:
    """Issue 47: --benchmark-compare-fail's findings fail the flagged case's own report, so pytest's line, the
    verdict, junit and the HTML count each case once (no passed test beside a run-level failed check), in a run
    where cases regress and others are not judged. Each finding says what the suite's noise model makes of the
    pair: bs4's baseline (stats and rounds 100x as fast) is a regression to both; bs1's (stats 100x as fast, its
    rounds 3x as slow) only to pytest-benchmark's threshold, which still decides."""
    latency = (str(ROOT / "tests" / "latency" / "test_latency.py"),)
    saved = run_suite(tmp_path, "--models", "steady", "--latency-rounds", "10", "--latency-batch-sizes", "1,4",
                      "--benchmark-autosave", tests=latency)
    assert timed_only(saved), explain(saved)
    path = next((tmp_path / "benchmarks").rglob("0001_*.json"))
    data = json.loads(path.read_text())
    for bench in data["benchmarks"]:
        for key in ("min", "max", "mean", "median"):
            bench["stats"][key] /= 100
        scale = 0.01 if bench["fullname"].endswith("-bs4]") else 3.0
        bench["extra_info"]["samples_s"] = [s * scale for s in bench["extra_info"]["samples_s"]]
    path.write_text(json.dumps(data))
    report, results, junit = tmp_path / "report.html", tmp_path / "results.json", tmp_path / "junit.xml"
    done = run_suite(tmp_path, "--models", "steady,tiny", "--latency-rounds", "10", "--latency-batch-sizes", "1,4",
                     "--latency-busy-limit", "100%", "--benchmark-compare=0001",
                     "--benchmark-compare-fail=median:1000%", "--accept-not-judged", "no-data", "--html", str(report),
                     "--self-contained-html",
                     "--suite-results", str(results), "--junitxml", str(junit), tests=latency)
    assert done.returncode == 1, explain(done)
    found = json.loads(results.read_text())["verdict"]
    assert found["counts"]["passed"] == 0 and found["counts"]["failed"] == 2, found["counts"]
    assert found["counts"]["not_judged"] == {"no-baseline": 4}, found["counts"]  # tiny: 2 cells x 2 batches
    assert all("::" in n for n in found["states"]), found["states"]  # no run-level check beside the cases
    assert _stats_line(done.stdout) == {"failed": 2, "not judged": 4}, explain(done)
    assert "checks: 0 passed, 2 failed, 4 not judged" in done.stdout, explain(done)
    rows, counters, _ = _pytest_html(report)
    assert (counters["passed"], counters["failed"], counters["skipped"]) == (0, 2, 4), counters
    assert set(rows) == set(found["states"]) and all(len(r) == 1 for r in rows.values()), rows
    for nodeid, state in found["states"].items():
        assert rows[nodeid][0]["result"] == {"failed": "Failed"}.get(state, "Skipped"), (nodeid, state)
    _assert_junit_is_the_verdict(junit, found)
    detail = {c["id"].rsplit("-", 1)[-1]: c["detail"] for c in found["failed"]}
    assert "--benchmark-compare-fail against 0001_" in detail["bs4]"], detail
    assert "the suite's noise model agrees: regression (ratio " in detail["bs4]"], detail
    assert re.search(r"the suite's noise model calls this pair improvement \(ratio [\d.]+, 99% CI \[[\d.]+, "
                     r"[\d.]+\]\): as likely noise; judge with --latency-baseline", detail["bs1]"]), detail


# =========================================================================== pytest's --junitxml file


def _junit(path: Path) -> tuple[dict[str, str], dict[str, list[tuple[str, str, str]]]]:
    """A written junit file: its <testsuite>'s attributes, and each testcase's result elements (skipped, failure,
    error: (tag, type, message)) by node id (the tests' files hold functions, no classes)."""
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None, path
    cases = {}
    for case in suite.iter("testcase"):
        nodeid = f"{str(case.get('classname')).replace('.', '/')}.py::{case.get('name')}"
        cases[nodeid] = [(e.tag, str(e.get("type")), str(e.get("message"))) for e in case
                         if e.tag in ("skipped", "failure", "error")]
    return dict(suite.attrib), cases


def _assert_junit_is_the_verdict(path: Path, found: dict[str, Any]) -> dict[str, list[tuple[str, str, str]]]:
    """Each testcase has the result of its check in the verdict (``found``, the results file's): none for passed,
    one <failure> or <error> for failed, one <skipped> saying 'not judged (REASON)' for not judged (a known failure
    is pytest's xfail, a skipped testcase); and the <testsuite>'s counts are the verdict's counts of those tests.
    Returns the testcases."""
    attrs, cases = _junit(path)
    states = {n: s for n, s in found["states"].items() if "::" in n}  # the tests (not the run-level checks)
    assert set(cases) == set(states), (sorted(cases), sorted(states))
    for nodeid, results in cases.items():
        state = states[nodeid]
        if state == PASSED:
            assert results == [], (nodeid, results)
        elif state.endswith("(known failure)"):  # pytest's xfail: skipped there, counted apart by the verdict
            assert [r[:2] for r in results] == [("skipped", "pytest.xfail")], (nodeid, results)
        elif state == FAILED:
            assert len(results) == 1 and results[0][0] in ("failure", "error"), (nodeid, results)
        else:
            reason = state.removeprefix("not judged (").removesuffix(")")
            assert len(results) == 1 and results[0][:2] == ("skipped", "pytest.skip"), (nodeid, results)
            assert results[0][2].startswith(f"not judged ({reason}): "), (nodeid, results)
    counted = [s.split(" (")[0] for s in states.values()]
    known = sum(s.endswith("(known failure)") for s in states.values())
    assert int(attrs["tests"]) == len(states), attrs
    assert int(attrs["skipped"]) == counted.count(NOT_JUDGED) + known, (attrs, found["counts"])
    assert int(attrs["failures"]) + int(attrs["errors"]) == counted.count(FAILED) - known, (attrs, found["counts"])
    passed = int(attrs["tests"]) - int(attrs["skipped"]) - int(attrs["failures"]) - int(attrs["errors"])
    assert passed == counted.count(PASSED) == found["counts"]["passed"], (attrs, found["counts"])
    return cases


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_a_failed_runs_junit_file_keeps_its_failure_and_counts_as_its_verdict(suite_baseline: Path, tmp_path: Path,
                                                                              extra: tuple[str, ...]) -> None:
    """A run with a failure (an injected accuracy drop the drift gate catches), checks that passed (parity, the
    reference's accuracy) and latency cases timed without a baseline (not judged, no-baseline): the failure keeps
    its <failure>, each case timed is a <skipped> testcase, and the counts are the verdict's."""
    results, junit = tmp_path / "results.json", tmp_path / "junit.xml"
    done = run_suite(suite_baseline, "--models", "tiny", "--accuracy-baseline", str(suite_baseline / "base.json"),
                     "--inject-accuracy-drop", "10%", "--latency-batch-sizes", "1", "--latency-rounds", "4",
                     "--latency-busy-limit", "100%", "--suite-results", str(results), "--junitxml", str(junit), *extra,
                     tests=(str(ROOT / "tests" / "accuracy"), str(ROOT / "tests" / "parity" / "test_parity.py"
                                                               "::test_parity_on_dataset"),
                            str(ROOT / "tests" / "latency" / "test_latency.py")))
    assert done.returncode == 1 and junit.exists(), explain(done)
    found = json.loads(results.read_text())["verdict"]
    counts = found["counts"]
    assert counts["passed"] and counts["failed"] and counts["not_judged"].get("no-baseline") == 2, counts
    cases = _assert_junit_is_the_verdict(junit, found)
    assert [c[0] for c in cases["tests/accuracy/test_accuracy.py::test_top1_top5[tiny-onnxruntime-fp32]"]] == \
        ["failure"], cases


def _test_report(nodeid: str, outcome: str, when: str = "call", node: object = None, **extra: Any) -> pytest.TestReport:
    """A real pytest TestReport, as pytest's junit writer reads it (``node``: the xdist worker that sent it)."""
    longrepr, props = extra.pop("longrepr", None), extra.pop("props", [])
    report = pytest.TestReport(nodeid, ("t.py", 1, nodeid), {}, outcome, longrepr, when,  # type: ignore[arg-type]
                               user_properties=props, duration=0.5)
    if node is not None:
        report.node = node  # type: ignore[attr-defined]
    return report


@pytest.mark.parametrize("workers", [1, 2], ids=["one process", "two xdist workers"])
def test_the_junit_file_is_the_verdicts(tmp_path: Path, workers: int) -> None:
    """pytest's own junit writer (LogXML) fed real reports, with suite/hooks/junit.py beside it as the suite registers
    it: a test that passed while its gate could not judge, whether the gate said so in call or teardown, and one a
    comparison after the run left not judged, are <skipped> testcases saying why; a pass has no child; a failure
    keeps its <failure> (also one whose gate could not judge) and a teardown error its <error>; a skip is pytest's
    own <skipped>, once; the <testsuite>'s counts are the ledger's. With two workers, reports come interleaved from
    two xdist nodes, as the controller receives them; the test reports are never changed."""
    late = Component("pytest-benchmark --benchmark-compare-fail", NOT_JUDGED, "no-baseline", "not in run 0001")
    busy = [(verdict.USER_PROPERTY, BUSY.as_dict())]
    nodes = [object() for _ in range(workers)]
    tests: list[list[pytest.TestReport]] = []
    for i, (nodeid, setup, call, teardown) in enumerate([
            ("t.py::pass", "passed", {"outcome": "passed"}, {"outcome": "passed"}),
            ("t.py::busy", "passed", {"outcome": "passed", "props": busy}, {"outcome": "passed", "props": busy}),
            ("t.py::busy-in-teardown", "passed", {"outcome": "passed"}, {"outcome": "passed", "props": busy}),
            ("t.py::late", "passed", {"outcome": "passed"}, {"outcome": "passed"}),
            ("t.py::trt", "skipped", None, {"outcome": "passed"}),
            ("t.py::fail", "passed", {"outcome": "failed", "longrepr": "E   isclose 12% < 99%"},
             {"outcome": "passed"}),
            ("t.py::fail-busy", "passed", {"outcome": "failed", "longrepr": "E   boom", "props": busy},
             {"outcome": "passed", "props": busy}),
            ("t.py::teardown-error", "passed", {"outcome": "passed", "props": busy},
             {"outcome": "failed", "longrepr": "E   leaked", "props": busy})]):
        node = nodes[i % workers]
        reports = [_test_report(nodeid, setup, "setup", node, longrepr=("t.py", 1, f"Skipped: {TRT}")
                                if setup == "skipped" else None)]
        if call is not None:
            reports.append(_test_report(nodeid, when="call", node=node, **call))
        reports.append(_test_report(nodeid, when="teardown", node=node, **teardown))
        tests.append(reports)
    streams = [[r for reports in tests[w::workers] for r in reports] for w in range(workers)]
    order = [r for step in itertools.zip_longest(*streams) for r in step if r is not None]  # workers interleaved
    xml = LogXML(str(tmp_path / "junit.xml"), None, family="xunit2")
    config = SimpleNamespace(stash={xml_key: xml})
    plugin, ledger = JunitVerdict(config), Ledger()  # type: ignore[arg-type]
    xml.pytest_sessionstart()
    before = [(r.outcome, list(r.user_properties)) for r in order]
    hooks = (xml, plugin) if workers == 1 else (plugin, xml)  # pytest calls LogXML's first; either order works
    for report in order:
        for hook in hooks:
            hook.pytest_runtest_logreport(report)
        ledger.add_report(report)
    ledger.add_component("t.py::late", late)  # pytest-benchmark's compare, after the last test
    assert plugin.settle(ledger) == 3
    assert plugin.settle(ledger) == 0  # once
    xml.pytest_sessionfinish()
    assert [(r.outcome, list(r.user_properties)) for r in order] == before

    attrs, cases = _junit(tmp_path / "junit.xml")
    assert set(cases) == set(ledger.checks) and len(cases) == 8, cases
    message = "not judged (busy): latency gate m-torch-fp32-bs1-all: others used 80%"
    assert cases["t.py::pass"] == []
    assert cases["t.py::busy"] == cases["t.py::busy-in-teardown"] == [("skipped", "pytest.skip", message)]
    assert cases["t.py::late"] == [("skipped", "pytest.skip", "not judged (no-baseline): pytest-benchmark "
                                                              "--benchmark-compare-fail: not in run 0001")]
    assert cases["t.py::trt"] == [("skipped", "pytest.skip", TRT)]
    assert cases["t.py::fail"] == [("failure", "None", "E   isclose 12% < 99%")]
    assert [c[0] for c in cases["t.py::fail-busy"]] == ["failure"]
    assert [c[0] for c in cases["t.py::teardown-error"]] == ["error"]
    counts = ledger.as_dict()["counts"]
    assert (counts["passed"], counts["failed"], sum(counts["not_judged"].values())) == (1, 3, 4), counts
    assert attrs["tests"] == "8" and attrs["skipped"] == "4", attrs
    assert int(attrs["failures"]) + int(attrs["errors"]) == 3, attrs
    text = (tmp_path / "junit.xml").read_text()  # the element's text lists the comparisons that could not judge
    assert "latency gate m-torch-fp32-bs1-all: not judged (busy): others used 80%</skipped>" in text
