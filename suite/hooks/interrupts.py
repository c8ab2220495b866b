"""How a stopped run ends: a SIGTERM (a CI timeout) ends it as Ctrl-C does, with the summary, the verdict and marked
results; a run stopped during start-up says in one line that nothing was judged; an internal error is noted in the
verdict.

Module-level state, not ``config.stash`` (suite/state.py): the signal handler and pytest_internalerror are called
without the run's config, and a SIGTERM can come before there is one (while pytest parses its command line).
suite/sigterm.py holds a SIGTERM that came earlier still, while pytest imported the plugins.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import pytest

from suite import sigterm
from suite.fleet.workers import is_worker
from suite.options import options_of
from suite.state import LEDGER_KEY, VERDICT_KEY

_SIGTERM_BEFORE: list[Any] = []  # the SIGTERM handler this run replaced, restored when it ends
_INTERRUPTED: list[str] = []  # why the run was interrupted (SIGINT, SIGTERM), in any phase
# This run's config, for hooks pytest calls without it (pytest_internalerror); non-empty once pytest_configure
# began, when pytest handles a KeyboardInterrupt (_sigterm).
_CONFIG: list[pytest.Config] = []


def install_sigterm_handler() -> None:
    """A CI timeout sends SIGTERM: end like Ctrl-C does, with the summary, the verdict and marked results (or,
    this early, the old results file untouched). Installed before the checks of start-up; one that came while
    pytest imported the plugins was held (suite/sigterm.py) and interrupts the run now."""
    current = signal.getsignal(signal.SIGTERM)
    if current in (signal.SIG_DFL, None, sigterm.hold) and not _SIGTERM_BEFORE:
        signal.signal(signal.SIGTERM, _sigterm)
        _SIGTERM_BEFORE.append(signal.SIG_DFL if current is sigterm.hold else current)
        _INTERRUPTED.extend(sigterm.RECEIVED)
        sigterm.RECEIVED.clear()


def _sigterm(signum: int, frame: Any) -> None:
    """KeyboardInterrupt, as Ctrl-C raises, once pytest handles one (from pytest_configure on); before that
    (pytest still parsing its command line) it would be a traceback, so it is raised on entering configure."""
    _INTERRUPTED.append("SIGTERM")
    if _CONFIG:
        raise KeyboardInterrupt("SIGTERM")


def configuring(config: pytest.Config) -> None:
    """The start of pytest_configure: the run's config is known, and a SIGTERM that came while pytest parsed its
    command line interrupts the run now."""
    _CONFIG.append(config)
    if _INTERRUPTED:
        raise KeyboardInterrupt(_INTERRUPTED[-1])  # a SIGTERM that came while pytest parsed its command line


def note_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    if not _INTERRUPTED:
        _INTERRUPTED.append(str(excinfo.value) or "SIGINT (Ctrl-C)")


def unconfigure(config: pytest.Config) -> None:
    """The run's end: the replaced SIGTERM handler back, and a run stopped during start-up says so."""
    if _SIGTERM_BEFORE:
        signal.signal(signal.SIGTERM, _SIGTERM_BEFORE.pop())
    if _INTERRUPTED and VERDICT_KEY not in config.stash and not is_worker(config):
        # Stopped during start-up (imports, the config, the models' check): no test ran, so there is no
        # verdict block; say so, and that the results file was left as it was.
        results = options_of(config).suite_results
        sys.stderr.write(f"suite: interrupted ({_INTERRUPTED[-1]}) during start-up, before any test: nothing was "
                         "judged" + (f"; {results} was left as it was" if results else "") + "\n")
    _INTERRUPTED.clear()  # (pytest.main() may run again in this process)
    _CONFIG.clear()


def note_internal_error(excrepr: Any, excinfo: Any) -> None:
    """An internal error ends the run: the verdict (results file, report) says which."""
    config = _CONFIG[-1] if _CONFIG else None
    crash = getattr(excrepr, "reprcrash", None)
    ledger = config.stash.get(LEDGER_KEY, None) if config is not None else None
    if ledger is not None:
        ledger.note_error(f"internal error: {getattr(crash, 'message', None) or str(excinfo.value)[:300]}")
