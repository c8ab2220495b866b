"""Importing the user's code (a ``package.module:callable`` a config names), with the blame on their line.

Why a module of its own: a factory or data set that fails to import must be reported as the user's mistake, at
their file and line, not as a traceback from inside the suite; preflight and the session both import through
``resolve``, and ``where_in_user_code`` points at the line of theirs that raised.
"""

from __future__ import annotations

import importlib
import os
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.config.schema import ConfigError


def resolve(ref: str, what: str) -> Callable[..., Any]:
    """Import ``package.module:callable``; errors say which config entry pointed there."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what}: {ref!r} is not of the form 'package.module:callable'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import module {module_name!r} ({exc})") from exc
    except SyntaxError as exc:  # the module's own code (or a module it imports) does not parse
        at = f"{short_path(exc.filename)}:{exc.lineno}" if exc.filename else f"line {exc.lineno}"
        raise ConfigError(f"{what}: cannot import module {module_name!r}: {type(exc).__name__} at {at}: "
                          f"{exc.msg}") from exc
    except Exception as exc:  # raised by the module's top-level code while it was imported
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        where = where_in_user_code(exc)
        raise ConfigError(f"{what}: cannot import module {module_name!r}: importing it raised {type(exc).__name__}"
                          + (f": {lines[-1]}" if lines else "") + (f" ({where})" if where else "")) from exc
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
        raise ConfigError(f"{what}: {module_name} has no {attr!r}; callables there: {', '.join(public)}") from exc
    if not callable(obj):
        raise ConfigError(f"{what}: {ref!r} is not callable")
    return obj  # type: ignore[no-any-return]


_SUITE_ROOT = Path(__file__).resolve().parents[2]
#: Not the user's code: the suite's own packages, the standard library and installed packages (torch...).
_NOT_USER_CODE = tuple(sorted({os.path.realpath(p) + os.sep for p in (
    str(_SUITE_ROOT / "suite"), str(_SUITE_ROOT / "engines"),
    *(sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib"))) if p}))


def where_in_user_code(exc: BaseException) -> str | None:
    """``at FILE:LINE in FUNCTION`` of the innermost frame of ``exc``'s traceback in the user's own code (not the
    suite's, the standard library's or an installed package's): the line of theirs that led to the error."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename or frame.filename.startswith("<"):
            continue
        path = os.path.realpath(frame.filename)
        if not path.startswith(_NOT_USER_CODE):
            return f"at {short_path(path)}:{frame.lineno} in {frame.name}"
    return None


def short_path(path: str) -> str:
    """A file's name; with its directory's for a package's ``__init__.py``, which says nothing alone."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.name == "__init__.py" else p.name
