"""pytest-html hooks: the suite's sections inside the one file written by
``--html=report.html --self-contained-html``.

Why inside pytest-html rather than a second file: people open one report after an upgrade; the test
outcomes, the practitioners' tables, the plots and the baseline changes belong together. The hooks
are optional, so the plugin is harmless where pytest-html is not installed.
"""

from __future__ import annotations

from typing import Any

import pytest

from report.html import render_report


def _suite_data(config: pytest.Config) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], dict[str, Any]]:
    from suite.environment import fingerprint
    from suite.gate_plugin import gate_of
    from suite.plugin import suite_session

    session = suite_session(config)
    engines = {cell.id: engine.facts.as_dict() for cell, engine in session.loaded_cells().items()}
    gate = gate_of(config)
    if gate is not None:
        gate.finish(session.records)
    return session.records, engines, fingerprint(session.device), (gate.as_dict() if gate else {})


@pytest.hookimpl(optionalhook=True)
def pytest_html_report_title(report: Any) -> None:
    report.title = "Inference regression suite"


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix: list[str], summary: list[str], postfix: list[str],
                                session: pytest.Session) -> None:
    records, engines, environment, gate = _suite_data(session.config)
    postfix.append(render_report(records, engines, environment, gate))
