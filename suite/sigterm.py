"""A SIGTERM that comes while pytest is still importing the suite's plugins is held, not fatal.

Why: a CI timeout sends SIGTERM, and the suite ends such a run with its summary, verdict and marked results
(suite/plugin.py). Its handler is installed when pytest calls the plugins' first hook; before that, pytest
imports them, and they import torch and matplotlib (1-4 s), when a SIGTERM killed the run silently (exit 143,
issue 23). The packages ``suite`` and ``report`` hold it from their first import in a pytest process; the
plugin's handler takes what was held and ends the run as interrupted, before any test.

Only in pytest's own process (``pytest`` or ``python -m pytest``): any other program that imports the suite
(tools/, a test's helper process) keeps the default, dying on SIGTERM.

Earlier still: pytest imports itself and loads other plugins before the suite's (0.1-0.2 s on a busy 2-core VM,
issue 43: "SIGTERM in the first second is still silent"). setup.sh installs a ``.pth`` file (``PTH_LINE``) into the
venv, so that Python's own start-up imports this module in a pytest process, before pytest's first module; only
the interpreter's start before ``site`` runs (tens of milliseconds) is left without a handler. The line imports the
suite only where ``pytest`` is among the first arguments: mutmut, tools and every other program of the venv start
without it (mutmut must import the mutated ``suite`` from its own folder, not one imported at start-up).
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


#: The .pth file's name and its one line (site runs a line that starts with ``import``): import this module only
#: where "pytest" is among the first arguments (is_pytest_process decides), and never fail the interpreter's start.
PTH_NAME = "inference_suite_sigterm.pth"
PTH_LINE = ("import sys; exec('try:\\n import suite.sigterm\\nexcept Exception:\\n pass') "
            "if 'pytest' in str(sys.orig_argv[1:6]) else None\n")
#: The interpreter's options that take the next argument as their value (``python -X importtime -m pytest``).
_WITH_VALUE = {"-X", "-W", "--check-hash-based-pycs"}


def _program(argv: list[str]) -> str | None:
    """What an interpreter's command line runs: ``-m NAME`` gives NAME, a script its file name, ``-c`` None."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg.startswith("-m"):
            return arg[2:]
        if arg.startswith("-c") or arg == "-":
            return None
        if arg in _WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            return Path(arg).name
    return None


def is_pytest_process(argv: list[str] | None = None) -> bool:
    """Whether this process was started as pytest: the ``pytest`` script, or ``python -m pytest``. ``argv`` is the
    interpreter's whole command line (``sys.orig_argv``: at a .pth file's time ``sys.argv`` is not set yet)."""
    program = _program(sys.orig_argv if argv is None else argv)
    return program is not None and (program == "pytest" or program.startswith(("pytest", "py.test")))


def install_pth(purelib: Path | None = None) -> Path:
    """Write PTH_LINE into the running environment's site-packages (setup.sh, tools/floor_env.sh): the hold from
    Python's own start-up."""
    import sysconfig

    path = Path(purelib or sysconfig.get_paths()["purelib"]) / PTH_NAME
    path.write_text(PTH_LINE, encoding="utf-8")
    return path


def hold_until_pytest_configures() -> None:
    """Hold SIGTERM where nothing else handles it yet, in a pytest process only."""
    if is_pytest_process() and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, hold)

