"""pytest's ``--junitxml`` file counts as the verdict does (issue 24): a test whose check was not judged is a
``<skipped>`` testcase there, never a passed one.

pytest writes a test that ran while its gate could not judge (a latency case timed without a baseline, a busy
machine) as a plain passed ``<testcase>``, and CI systems read that file. Its skips already carry their reason
(``not judged (unsupported): ...``, pytest's own ``<skipped type="pytest.skip">``); the tests that passed in
pytest's terms but not in the verdict's get the same element here: ``<skipped type="pytest.skip" message="not
judged (REASON): TEXT">``, and the ``<testsuite>``'s counts move from passed to skipped (``tests`` stays).

Only pytest's junit writer (``_pytest.junitxml.LogXML``) is changed, never a test report: the ledger and
pytest-xdist read the reports as pytest made them. It is settled once, from the settled ledger, before LogXML
writes the file (``settle``, from the verdict's pytest_sessionfinish), so it also covers what became not judged
after the tests (pytest-benchmark's compare). Under pytest-xdist the controller writes the file from the
workers' reports, and the controller holds the ledger: the same code runs there.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest
from _pytest.junitxml import bin_xml_escape, xml_key

from suite.verdict import NOT_JUDGED, Ledger, skip_message

#: Children that already give a <testcase> a result other than passed.
_RESULTS = ("skipped", "failure", "error")


class JunitVerdict:
    """Remembers the <testcase> of each test whose call passed (what LogXML counts as passed), by node id; one per
    run, in the controlling process (registered by suite/plugin.py)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.passed: dict[str, list[Any]] = {}  # node id -> LogXML's _NodeReporter of each passed call

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        xml = self.config.stash.get(xml_key, None)
        if xml is None or report.when != "call" or not report.passed:
            return
        # The same reporter LogXML writes this testcase with (keyed, as LogXML keys it, by node id and xdist node);
        # asking for it first opens it as LogXML would for this report.
        reporter = xml.node_reporter(report)
        cases = self.passed.setdefault(report.nodeid, [])
        if not any(r is reporter for r in cases):
            cases.append(reporter)

    def settle(self, ledger: Ledger) -> int:
        """Each passed <testcase> whose check the ledger has as not judged gets its <skipped> element, and LogXML's
        counts move one from passed to skipped; returns how many. Before LogXML writes the file."""
        xml = self.config.stash.get(xml_key, None)
        if xml is None:
            return 0
        moved = 0
        for nodeid, reporters in self.passed.items():
            check = ledger.checks.get(nodeid)
            if check is None or check.state != NOT_JUDGED:
                continue
            for reporter in reporters:
                children = _children(reporter)
                if any(child.tag in _RESULTS for child in children):
                    continue  # a teardown error, or settled already
                element = ET.Element("skipped", type="pytest.skip",
                                     message=bin_xml_escape(skip_message(str(check.reason), check.detail)))
                element.text = bin_xml_escape("\n".join(
                    f"{c.label}: {c.state}" + (f" ({c.reason})" if c.reason else "") + (f": {c.detail}" if c.detail
                                                                                         else "")
                    for c in check.components) or check.detail)
                children.append(element)
                xml.stats["passed"] -= 1
                xml.stats["skipped"] += 1
                moved += 1
        return moved


def _children(reporter: Any) -> list[ET.Element] | ET.Element:
    """The child elements of a reporter's <testcase>, to read and append to: its ``nodes`` while the testcase is
    open (LogXML builds the element when it writes), else the element LogXML froze at the test's teardown
    (``_NodeReporter.finalize``: ``to_xml`` returns that same element from then on)."""
    if "nodes" in vars(reporter):
        return reporter.nodes
    return reporter.to_xml()


PLUGIN_NAME = "suite-junit"


def register(config: pytest.Config) -> None:
    """In the controlling process (xdist workers write no junit file)."""
    config.pluginmanager.register(JunitVerdict(config), PLUGIN_NAME)


def settle(config: pytest.Config, ledger: Ledger) -> int:
    """``JunitVerdict.settle`` of this run's plugin, where there is one."""
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    return plugin.settle(ledger) if isinstance(plugin, JunitVerdict) else 0
