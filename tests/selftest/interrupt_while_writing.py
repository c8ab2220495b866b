"""A pytest plugin (``-p tests.selftest.interrupt_while_writing``) whose pytest_sessionfinish raises
KeyboardInterrupt, as a Ctrl-C (or the suite's SIGTERM handler) does when it lands while pytest-html writes its
report (tests/selftest/test_sigterm_early.py)."""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    raise KeyboardInterrupt("SIGTERM")
