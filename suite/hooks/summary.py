"""The run's last block on the terminal: the verdict, read from the ledger (suite/verdict.py).

Why last: after a nightly run or an upgrade, the reader scrolls to the bottom. What they find there
must be the answer (passed, failed, not judged), why, and the figures behind a regression, not the
middle of pytest-benchmark's tables. A run given a baseline first says what differs between the baseline's
environment and this one (suite/gate/baseline_environment.py): the likeliest cause of what the verdict reports.
"""

from __future__ import annotations

from typing import Any

import pytest

from suite import verdict
from suite.gate.baseline_environment import block_lines
from suite.gate.tables import verdict_lines
from suite.options import options_of
from suite.state import DIFFERENCE_KEY, ledger_of

SHOWN = 8


def print_verdict(config: pytest.Config) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    ledger = ledger_of(config)
    outcome, why = ledger.outcome()
    colour = {verdict.PASSED: {"green": True}, verdict.FAILED: {"red": True}}.get(outcome, {"yellow": True})
    difference = config.stash.get(DIFFERENCE_KEY, None)
    if difference:
        tr.write_sep("=", "WHAT DIFFERS FROM THE BASELINE", bold=True)
        for line in block_lines(difference):
            tr.write_line(line, yellow=bool(difference["differences"]))
    tr.write_sep("=", f"VERDICT: {outcome.upper()}", bold=True, **colour)
    counts = ledger.as_dict()["counts"]
    not_judged = sum(counts["not_judged"].values())
    tr.write_line(f"checks: {counts['passed']} passed, {counts['failed']} failed, {not_judged} not judged"
                  + (f", {counts['known_failures']} known failures (as declared)" if counts["known_failures"] else ""))
    for line in why:
        tr.write_line(f"  {line}", **colour)
    for line in threshold_lines(ledger.thresholds):
        tr.write_line(line, yellow="looser" in line)
    failed = ledger.by_state(verdict.FAILED)
    if failed:
        tr.write_line("failed:", red=True)
        # Not cut again: the ledger keeps a detail to one line of 300 characters, and a wrapped exception names its
        # cause last (cut at 240 with its id, "ONNX export ... failed (...): EngineBuildEr" lost it, issue 24).
        for check in failed[:SHOWN * 2]:
            tr.write_line(f"  {check.id}: {check.detail}", red=True)
        _more(tr, len(failed) - SHOWN * 2, config)
    for reason, checks in ledger.not_judged_by_reason().items():
        accepted = reason in ledger.accepted
        label = "accepted" if accepted else "NOT accepted"
        tr.write_line(f"not judged ({reason}, {label}): {len(checks)}: {verdict.REASONS[reason]}", yellow=not accepted)
        for check in checks[:SHOWN if not accepted else 3]:
            tr.write_line(f"  {check.id}: {check.detail}"[:240])
        _more(tr, len(checks) - (SHOWN if not accepted else 3), config)
    for check in ledger.by_state(verdict.FAILED, known_failure=True):
        tr.write_line(f"known failure (as declared): {check.id}: {check.detail}"[:240])
    for text, style in verdict_lines(config):
        tr.write_line(text, **style)
    unaccepted = sorted(r for r in ledger.unaccepted() if r != "interrupted")  # a run to finish, not a reason
    if unaccepted and not failed:
        names = ",".join(ledger.accepted + tuple(unaccepted))
        tr.write_line(f"to accept these reasons by name: --accept-not-judged={names} (or [run] accept_not_judged)")


def threshold_lines(thresholds: dict[str, list[str]]) -> list[str]:
    """The thresholds the config sets apart from each precision's defaults, one line per model and precision: a
    pass read against loosened thresholds says so where the verdict is read."""
    if not thresholds:
        return []
    return ["judged against thresholds other than the precision's defaults (README 'Defaults per precision'):",
            *(f"  {cell}: {', '.join(changes)}" for cell, changes in sorted(thresholds.items()))]


def _more(tr: Any, n: int, config: pytest.Config) -> None:
    """'... and N more', saying where all of them are: the files this run was asked to write, or how to get them
    (a run that wrote neither was told all of them were there, issue 24)."""
    if n <= 0:
        return
    given = options_of(config)
    files = [f"--suite-results {given.suite_results}"] * bool(given.suite_results)
    files += [f"the HTML report {given.htmlpath}"] * bool(given.htmlpath)
    where = (f"all of them in {' and '.join(files)}" if files
             else "to list all of them, run with --suite-results FILE or --html FILE")
    tr.write_line(f"  ... and {n} more ({where})")
