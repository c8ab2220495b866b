"""pytest-html's results table and its counters, settled from the verdict (suite/verdict.py) before it is written.

Why: pytest-html counts and colours each test by its report's outcome, so a test that ran while its gate could not
judge (busy, no-baseline, precision-not-run, ...) was a green "Passed" row, counted passed, in a report whose
verdict said NOT JUDGED; and every skip was a row of its own (43 identical "unsupported" boxes led the GPU tier's
table). pytest-html 4 knows a fixed set of results (its filters and sort), so the verdict's "not judged" is its
"skipped" result, labelled "Not judged" and shown with its reason:

* a row of a check the verdict has as not judged is a not-judged row ("Not judged (busy)"), whatever pytest said,
  its log opening with the verdict's words;
* a check of the verdict with no row (a required engine that never ran, pytest-benchmark's compare, a test an
  interruption left unrun) gets one, so the table is the verdict's whole list;
* tests that did not run (skips, tests left unrun) with the same reason and words fold into one row that counts
  them and lists their tests;
* the counters are counted again from the rows, a folded row for each test in it: Passed, Not judged, and Failed
  plus Errors (failures in setup or teardown) are the verdict's counts, except that a test that passed and then
  failed in teardown keeps pytest-html's two rows (Passed, then Error).

Pure functions of pytest-html's data (``ReportData.data["tests"]``, ``ReportData.outcomes``) and the checks as
plain data (``Check.as_dict()``); report/plugin.py calls ``settle`` from pytest_html_results_summary.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, MutableMapping
from typing import Any

from suite.verdict import FAILED, NOT_JUDGED, PASSED

#: pytest-html's result for a not-judged row (its "skipped": the one of its results that means neither passed nor
#: failed), and the label its counter and rows show instead.
NOT_JUDGED_RESULT, NOT_JUDGED_LABEL = "Skipped", "Not judged"
_RESULT_OF = {PASSED: "Passed", FAILED: "Failed", NOT_JUDGED: NOT_JUDGED_RESULT}
_CELL = re.compile(r'(<td class="col-(\w+)"[^>]*>).*?(</td>)', re.S)
_MS = re.compile(r"^(\d+) ms$")

Rows = MutableMapping[str, list[dict[str, Any]]]


def settle(tests: Rows, outcomes: MutableMapping[str, dict[str, Any]], checks: Mapping[str, Mapping[str, Any]]) -> None:
    """Rewrite pytest-html's rows and counters in place so that they say what the verdict says (module docstring)."""
    template = next((row["resultsTableRow"] for rows in tests.values() for row in rows), None)
    skips = []
    for nodeid, rows in tests.items():
        check = checks.get(nodeid)
        if check is None or check["state"] != NOT_JUDGED:
            continue
        if len(rows) == 1 and rows[0]["result"] == NOT_JUDGED_RESULT:
            skips.append(nodeid)
        for row in rows:
            if row["result"] in ("Passed", NOT_JUDGED_RESULT):
                _not_judged(row, check)
    for check_id, check in checks.items():
        if not tests.get(check_id) and not check.get("known_failure"):
            tests[check_id] = [_row_of(check_id, check, template)]
            if check["state"] == NOT_JUDGED:  # a test an interruption (or a usage error) left unrun
                skips.append(check_id)
    _fold(tests, checks, skips)
    for outcome in outcomes.values():
        outcome["value"] = 0
    for rows in tests.values():
        for row in rows:
            outcomes.setdefault(row["result"].lower(), {"label": row["result"], "value": 0})
            outcomes[row["result"].lower()]["value"] += row.get("count", 1)
    if NOT_JUDGED_RESULT.lower() in outcomes:
        outcomes[NOT_JUDGED_RESULT.lower()]["label"] = NOT_JUDGED_LABEL


def _words(check: Mapping[str, Any]) -> str:
    return f"not judged ({check['reason']}): {check['detail']}"


def _not_judged(row: dict[str, Any], check: Mapping[str, Any]) -> None:
    row["result"] = NOT_JUDGED_RESULT
    row["resultsTableRow"] = _cells(row["resultsTableRow"], result=f"{NOT_JUDGED_LABEL} ({check['reason']})")
    row["log"] = f"{html.escape(_words(check))}\n\n{row.get('log', '')}"


def _fold(tests: Rows, checks: Mapping[str, Mapping[str, Any]], skips: list[str]) -> None:
    """Tests that did not run (a skip, or never reported), one row each, with the same reason and words: one row,
    counting them, its log listing their tests."""
    groups: dict[tuple[str, str], list[str]] = {}
    for nodeid in skips:
        groups.setdefault((str(checks[nodeid]["reason"]), str(checks[nodeid]["detail"])), []).append(nodeid)
    for ids in (ids for ids in groups.values() if len(ids) > 1):
        check, first = checks[ids[0]], tests[ids[0]][0]
        durations = [_MS.match(str(tests[i][0].get("duration", ""))) for i in ids]
        duration = f"{sum(int(m.group(1)) for m in durations if m)} ms" if all(durations) else first["duration"]
        test_id = f"{len(ids)} tests: {ids[0]} ..."
        folded = {**first, "count": len(ids), "testId": test_id, "duration": duration,
                  "log": html.escape(_words(check) + "\n\n" + "\n".join(ids)),
                  "resultsTableRow": _cells(first["resultsTableRow"], test_id=test_id, duration=duration)}
        for nodeid in ids[1:]:
            del tests[nodeid]
        tests[ids[0]] = [folded]


def _row_of(check_id: str, check: Mapping[str, Any], template: list[str] | None) -> dict[str, Any]:
    """A row for a check pytest-html never saw a report of."""
    result = _RESULT_OF[check["state"]]
    label = f"{NOT_JUDGED_LABEL} ({check['reason']})" if check["state"] == NOT_JUDGED else result
    cells = template or ['<td class="col-result"></td>', '<td class="col-testId"></td>',
                         '<td class="col-duration"></td>', '<td class="col-links"></td>']
    words = _words(check) if check["state"] == NOT_JUDGED else str(check["detail"])
    return {"extras": [], "result": result, "testId": check_id, "duration": "0 ms", "log": html.escape(words),
            "resultsTableRow": _cells(cells, result=label, test_id=check_id, duration="0 ms", links="", blank=True)}


def _cells(cells: list[str], *, result: str | None = None, test_id: str | None = None, duration: str | None = None,
           links: str | None = None, blank: bool = False) -> list[str]:
    """pytest-html's row cells with the given columns' text (escaped) replaced; ``blank``: any other column (one a
    plugin added) emptied."""
    text = {"result": result, "testId": test_id, "duration": duration, "links": links}

    def one(cell: str) -> str:
        return _CELL.sub(lambda m: m.group(1) + html.escape(text[m.group(2)] or "") + m.group(3)
                         if text.get(m.group(2)) is not None else m.group(1) + m.group(3) if blank else m.group(0),
                         cell)

    return [one(cell) for cell in cells]
