"""``--opt PATH`` and ``--opt=PATH`` mean the same, from any directory.

Why this module: pytest chooses its rootdir and reads its configuration (pyproject.toml's
``[tool.pytest.ini_options]``: addopts, markers, warnings filters) *before* any plugin has added its
options. At that moment ``--engine-cache /tmp/x`` is an unknown option followed by a free argument, and
pytest takes ``/tmp/x`` for a test path: when it exists, the run is rooted at ``/tmp`` (or ``/``), the
project's settings are never read, test ids gain a prefix, and pytest-benchmark's compare, which matches
ids, finds nothing to compare (pytest-dev/pytest#8846, a known limitation). The ``=`` form has no such
problem. So before anything is collected, a run whose rootdir moved because of such a value is started
again, in place (``os.execv``, same process id, same signals), with those options written in the ``=``
form; where it cannot be restarted (pytest called from Python, or the option came from
``PYTEST_ADDOPTS``) it is one usage error that says what happened and what to write instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

#: Set in the restarted process, so that a restart happens at most once.
RESTARTED_ENV = "INFERENCE_SUITE_REROOTED"


def value_options(parser: pytest.Parser) -> set[str]:
    """The long options (every plugin's, known by now) that take exactly one value."""
    options: set[str] = set()
    for group in [parser._anonymous, *parser._groups]:  # pytest's Parser has no public walk
        for option in group.options:
            attrs = option.attrs()
            if attrs.get("action", "store") == "store" and attrs.get("nargs") in (None, 1):
                options.update(n for n in option.names() if n.startswith("--"))
    return options


def space_form_paths(args: Sequence[str], options: set[str]) -> list[tuple[int, str, str]]:
    """(index, option, value) for each ``--opt VALUE`` whose value is an existing path: what pytest's rootdir
    search takes for a test path."""
    found = []
    for i, arg in enumerate(args[:-1]):
        value = args[i + 1]
        if arg in options and not value.startswith("-") and Path(value).exists():
            found.append((i, arg, value))
    return found


def rejoined(args: Sequence[str], found: list[tuple[int, str, str]]) -> list[str]:
    """``args`` with each found ``--opt VALUE`` written ``--opt=VALUE``."""
    at = {i for i, _, _ in found}
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if i in at:
            out.append(f"{arg}={args[i + 1]}")
            skip = True
        else:
            out.append(arg)
    return out


def check_rootdir(config: pytest.Config, parser: pytest.Parser, project: Path) -> None:
    """Restart (or refuse) a run whose rootdir an option's path value moved away from the project."""
    params = config.invocation_params
    args = [str(a) for a in params.args]
    if config.rootpath == project or any(a.startswith(("--rootdir", "-c", "--config-file", "--inifile"))
                                         for a in args):
        return
    found = space_form_paths(args, value_options(parser))
    if not found:
        return
    names = ", ".join(f"{opt} {value}" for _, opt, value in found)
    fixed = rejoined(args, found)
    why = (f"pytest took the value of {names} for a test path and rooted the run at {config.rootpath} instead of "
           f"{project}, without the project's settings (pytest-dev/pytest#8846)")
    orig = list(getattr(sys, "orig_argv", []))
    restartable = (os.environ.get(RESTARTED_ENV) != "1" and len(orig) > len(args)
                   and orig[len(orig) - len(args):] == args and _args_are_argv(args))
    if not restartable:
        raise pytest.UsageError(f"{why}; write {' '.join(f'{opt}={value}' for _, opt, value in found)} "
                                f"(or add --rootdir={project})")
    command = orig[:len(orig) - len(args)] + fixed
    sys.stderr.write(f"suite: {why}; starting again as: {' '.join(command)}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os.environ[RESTARTED_ENV] = "1"
    os.execv(sys.executable, [sys.executable, *command[1:]])


def _args_are_argv(args: list[str]) -> bool:
    """pytest was started from the command line with these arguments (not pytest.main() from Python)."""
    return sys.argv[1:] == args

