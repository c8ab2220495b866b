"""pytest-html hooks: the suite's report inside the one file written by
``--html=report.html --self-contained-html``.

Why inside pytest-html rather than a second file: people open one report after an upgrade; the test
outcomes, the verdict, the practitioners' tables, the figures and the baseline changes belong
together. The suite's report goes at the top of pytest-html's summary (the verdict first), above its
filters and results table. The hooks are optional, so the plugin is harmless where pytest-html (or
pytest-metadata) is not installed.

One environment table: pytest-metadata fills pytest-html's "Environment" block with Python, the
platform, pytest, pluggy and the plugins, which repeats (and can disagree with) the suite's
fingerprint. ``pytest_metadata`` below drops those keys, so the block holds only what the user passed
with ``--metadata`` (and CI variables) and is hidden when that is nothing; the fingerprint is the
report's own environment table. What is left is run metadata, not an environment: report/run_section.py
(``RUN_METADATA``) moves the block under "The run" and retitles it "Run metadata (--metadata, CI
variables)", so it no longer sits above the verdict under a second "Environment" heading.

One count: pytest-html's results table and counters are settled from the verdict before the file is written
(report/results_table.py), so no test the verdict has as not judged is a green "Passed" row.
"""

from __future__ import annotations

from typing import Any

import pytest

from report.html import render_report
from report.results_table import settle
from suite.fleet.plugin import run_environment
from suite.gate.state import gate_of
from suite.state import DIFFERENCE_KEY, LEDGER_KEY, RUN_INFO_KEY, VERDICT_KEY, suite_session

#: The keys pytest-metadata adds by itself that describe the environment (see the module docstring).
PYTEST_METADATA_ENVIRONMENT = ("Python", "Platform", "Packages", "Plugins")

#: pytest-html's ReportData (its rows and counters), kept from the one hook that hands it over.
_HTML_DATA = pytest.StashKey[Any]()

SuiteData = tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any] | None,
                  dict[str, Any] | None]


def _suite_data(config: pytest.Config) -> SuiteData:
    """Everything the report shows, as plain data: (records, engines, environment, gate, verdict, run_info).

    The one place that reads the run: in an xdist run the session and the gate already hold every
    worker's records, engines and comparisons (suite/fleet/plugin.py). verdict: ``suite.verdict.Ledger.as_dict()``;
    run_info: how the run was made (config, engine_options, git_commit, command, device, workers, phases);
    each None where the run did not record it."""
    session = suite_session(config)
    gate = gate_of(config)
    if gate is not None:
        gate.finish(session.records)
    verdict = config.stash.get(VERDICT_KEY, None)
    run_info = config.stash.get(RUN_INFO_KEY, None)
    engines = session.engine_facts()
    gate_data = gate.as_dict(engines, session.records) if gate else {}
    return (session.records, engines, run_environment(config), gate_data, verdict, run_info)


@pytest.hookimpl(optionalhook=True)
def pytest_metadata(metadata: dict[str, Any], config: pytest.Config) -> None:
    """pytest-metadata's environment keys out of pytest-html's block (also on xdist workers, whose
    metadata the controller merges): the suite's fingerprint is the report's one environment table."""
    for key in PYTEST_METADATA_ENVIRONMENT:
        metadata.pop(key, None)


@pytest.hookimpl(optionalhook=True)
def pytest_html_report_title(report: Any) -> None:
    """The title; and pytest-html's ReportData, whose rows and counters the summary settles from the verdict."""
    report.title = "Inference regression suite"
    config = getattr(report, "config", None)
    if config is not None:
        config.stash[_HTML_DATA] = report


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix: list[str], summary: list[str], postfix: list[str],
                                session: pytest.Session) -> None:
    """The suite's report above pytest-html's summary; then its rows and counters as the verdict has them (called
    after the verdict is settled: pytest-html writes the file at the end of pytest_sessionfinish)."""
    records, engines, environment, gate, verdict, run_info = _suite_data(session.config)
    prefix.append(render_report(records, engines, environment, gate, verdict, run_info,
                                difference=session.config.stash.get(DIFFERENCE_KEY, None)))
    data, ledger = session.config.stash.get(_HTML_DATA, None), session.config.stash.get(LEDGER_KEY, None)
    if data is not None and ledger is not None:
        settle(data.data["tests"], data.outcomes, {i: c.as_dict() for i, c in ledger.checks.items()})
