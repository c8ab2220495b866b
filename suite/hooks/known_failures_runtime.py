"""Known failures at run time: whether a failure of a test the config's ``known_failures`` covers is the declared one,
judged on the figures the test recorded. The entries and the rules of what one may absorb are
suite/config/known_failures.py; the hooks (pytest_runtest_call, pytest_runtest_makereport) are suite/plugin.py's, and
the verdict's plugin (suite/hooks/verdict_wiring.py) counts each entry's tests by KNOWN_PROPERTY (strictness per entry).
"""

from __future__ import annotations

from typing import Any

import pytest

from metrics.parity_report import failed_metric
from suite import verdict
from suite.config import FailedValues, accuracy_failed_metric
from suite.gate.state import gate_of
from suite.session import Cell
from suite.state import SESSION_KEY, suite_session

KNOWN_PROPERTY = "suite_known_failure"
#: The records a check of each kind makes before it asserts (tests/parity, tests/accuracy): the figures it judged.
_KNOWN_RECORD_KINDS = {"parity": ("parity", "padding"), "accuracy": ("accuracy",)}
_RECORDS_BEFORE = pytest.StashKey[int]()


def _known_failure(item: pytest.Item) -> tuple[Any, str, str, Cell] | None:
    """(entry, its key, the kind of check, the cell) where the config's known_failures covers this test, else
    None."""
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get("cell") or callspec.params.get("accuracy_cell") if callspec else None
    if not isinstance(cell, Cell):
        return None
    name = f"{cell.engine}-{cell.precision}"
    entry = suite_session(item.config).model(cell.model).known_failures.get(name)
    kind = "accuracy" if item.get_closest_marker("accuracy") else "parity" if item.get_closest_marker("parity") else ""
    if entry is None or kind not in entry.checks:
        return None
    return entry, f"{cell.model}: {name}", kind, cell


def note_records_start(item: pytest.Item) -> None:
    """Where this test's records start: a known failure is judged on the figures the test recorded."""
    if SESSION_KEY in item.config.stash:
        item.stash[_RECORDS_BEFORE] = len(suite_session(item.config).records)


def test_records(item: pytest.Item) -> list[dict[str, Any]]:
    """The records this test made (since ``note_records_start``); none outside a suite session."""
    if SESSION_KEY not in item.config.stash:
        return []
    session = suite_session(item.config)
    return session.records[item.stash.get(_RECORDS_BEFORE, len(session.records)):]


def failed_figures(records: list[dict[str, Any]], cell: Cell, kind: str, first_output: str) -> tuple[
        tuple[tuple[str, str | None], ...], list[str], FailedValues]:
    """What this cell's check of this kind recorded as failed: ((output, figure), ...), the figure None where a
    failure names none; each failing record's headline, as its assertion message states it (parity:
    ``output 'x' (64, 5): cosine ...``; accuracy, judged on the model's first output: ``accuracy over n=64: ...``);
    and each named failed figure's recorded value, ((output, figure, value), ...), which the entry's declared value
    and margin bound."""
    figures: list[tuple[str, str | None]] = []
    headlines: list[str] = []
    values: list[tuple[str, str, float | None]] = []
    for record in records:
        failures = record.get("failures") or []
        if record.get("cell") != cell.id or record.get("kind") not in _KNOWN_RECORD_KINDS[kind] or not failures:
            continue
        if kind == "accuracy":
            named = [(first_output, accuracy_failed_metric(str(f))) for f in failures]
            headlines.append(f"accuracy over n={record.get('n')}: {'; '.join(map(str, failures))}")
        else:
            name = str(record.get("name"))
            named = [(name, failed_metric(str(f))) for f in failures]
            headlines.append(f"output {name!r} {tuple(record.get('shape') or ())}: {'; '.join(map(str, failures))}")
        figures += named
        values += [(output, metric, _number(record.get(metric))) for output, metric in named if metric is not None]
    return tuple(figures), headlines, tuple(values)


def _number(value: Any) -> float | None:
    """A recorded figure as a number; None where it is none (JSON null, text)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _dataset(records: list[dict[str, Any]], cell: Cell) -> str | None:
    """The data set this test's failing records of ``cell`` were judged on (``generated:sparse``): which of a known
    failure's declared values hold (``expected_on``)."""
    return next((str(r.get("dataset")) for r in records if r.get("cell") == cell.id and r.get("failures")), None)


def _drifted(item: pytest.Item, report: pytest.TestReport, records: list[dict[str, Any]]) -> str | None:
    """The drift gate on this test's records, before a known failure may absorb the test (the test's own
    ``gate.check()`` comes after the assertion it failed): each comparison goes into the verdict with the test, and
    a record that drifted beyond --accuracy-drift is a failure no known failure absorbs. None: nothing drifted (or
    no accuracy baseline)."""
    gate = gate_of(item.config)
    if gate is None or gate.results_baseline is None:
        return None
    drifted = []
    for record in records:
        component, message = gate.check_drift(record, item.nodeid)
        if component is not None:
            report.user_properties.append((verdict.USER_PROPERTY, component.as_dict()))
        if message:
            drifted.append(" ".join(message.split()))
    if not drifted:
        return None
    return (f"drifted beyond --accuracy-drift against the accuracy baseline ({'; '.join(drifted)}): a known failure "
            "never absorbs a drift-gate failure")


def judge(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """A known failure is expected only the way it is declared: a failure of a test it covers is the known one
    when the test's assertion is about figures it recorded (an AssertionError whose message states them), every
    failed figure is one the entry names (``metrics``) on an output it names (``outputs``), and its ``match``
    pattern is found in the message, each failed figure is within its declared value and margin (``expected``), and
    none of the test's records drifted beyond --accuracy-drift against an accuracy baseline. Any other failure of the
    cell fails: another output or figure, the same figure further gone, a drift, any other exception (a ValueError of
    mismatched shapes, a failed build), a failure in setup or teardown (the ledger: a later plain failure of the test
    outranks its known one). Strictness is
    per entry (suite/hooks/verdict_wiring.py's VerdictPlugin): once none of its tests fails, the run fails until the
    entry is removed."""
    known = _known_failure(item)
    if known is None or report.skipped:
        return
    entry, key, kind, cell = known
    report.user_properties.append((KNOWN_PROPERTY, key))
    if report.failed:
        exc = call.excinfo.value if call.excinfo is not None else None
        message = call.excinfo.exconly() if call.excinfo is not None else report.longreprtext
        session = suite_session(item.config)
        records = test_records(item)
        figures, headlines, values = failed_figures(records, cell, kind, session.model(cell.model).outputs[0])
        if report.when != "call":
            why = f"failed in {report.when}, not in the check itself"
        elif exc is None or type(exc) is not AssertionError:
            why = entry.refusal(kind, message, figures, type(exc).__name__ if exc is not None else "error")
        elif headlines and not any(h in message for h in headlines):
            why = ("does not state the figures the check recorded as failed (another assertion), so it is not the "
                   "declared failure")
        else:
            why = (entry.refusal(kind, message, figures) or entry.beyond(values, _dataset(records, cell))
                   or _drifted(item, report, records))
        if why is None:
            report.outcome, report.wasxfail = "skipped", f"known failure: {entry.reason}"
        else:
            why = (why.removeprefix("it ") if why.startswith("it ") else f"is not it ({why})"
                   if why.startswith("the entry") else why)
            report.sections.append(("known failure", f"this cell has a known failure ({entry.reason}), declared as "
                                    f"{entry.describe()}; this failure {why}, so it counts"))
