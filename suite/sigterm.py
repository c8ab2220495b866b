"""A SIGTERM that comes while pytest is still importing the suite's plugins is held, not fatal.

Why: a CI timeout sends SIGTERM, and the suite ends such a run with its summary, verdict and marked results
(suite/plugin.py). Its handler is installed when pytest calls the plugins' first hook; before that, pytest
imports them, and they import torch and matplotlib (1-4 s), when a SIGTERM killed the run silently (exit 143,
issue 23). The packages ``suite`` and ``report`` hold it from their first import in a pytest process; the
plugin's handler takes what was held and ends the run as interrupted, before any test.

Only in pytest's own process (``pytest`` or ``python -m pytest``): any other program that imports the suite
(tools/, a test's helper process) keeps the default, dying on SIGTERM.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

#: The signals held so far, by name, for the plugin's handler to take over.
RECEIVED: list[str] = []


def hold(signum: int, frame: Any) -> None:
    RECEIVED.append("SIGTERM")


def is_pytest_process(argv: list[str] | None = None) -> bool:
    """Whether this process was started as pytest: the ``pytest`` script, or ``python -m pytest``."""
    args = sys.argv if argv is None else argv
    first = Path(args[0]) if args and args[0] else Path()
    as_module = first.name == "__main__.py" and first.parent.name == "pytest"
    return first.name.startswith(("pytest", "py.test")) or as_module


def hold_until_pytest_configures() -> None:
    """Hold SIGTERM where nothing else handles it yet, in a pytest process only."""
    if is_pytest_process() and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, hold)
