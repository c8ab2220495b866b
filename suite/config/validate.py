"""The small typed-value readers every table of the TOML goes through.

Why a module of its own: each one turns a TOML value into the type it must be, or raises a ``ConfigError`` that
names the key, the value and what is valid (a bool is not an integer, a string is not a number); the parser
composes them and never checks a type by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from suite.config.schema import ConfigError

# Keys that existed once: say why they are gone instead of only "unknown".
_REMOVED_KEYS = {
    "min_time_s": "min_time_s was removed: it was never read (a latency case runs [latency].rounds rounds)",
}


def check_keys(where: str, table: Any, valid: set[str]) -> None:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - valid)
    removed = [_REMOVED_KEYS[k] for k in unknown if k in _REMOVED_KEYS]
    if removed:
        raise ConfigError(f"{where}: {'; '.join(removed)}; delete it")
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")


def check_choice(where: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{where}: unknown {value!r}; valid: {', '.join(valid)}")


def read_table(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a table, got {value!r}")
    return value


def read_list(where: str, value: Any, allow_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list, got {value!r}")
    if not value and not allow_empty:
        raise ConfigError(f"{where}: must not be empty, got []")
    return value


def read_string(where: str, value: Any, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def read_bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    return value


def read_int(where: str, value: Any, lo: int | None = None, hi: int | None = None, what: str = "an integer") -> int:
    """TOML integers only: a bool, float or string where a count belongs is a mistake, not a 1."""
    bounds = (f" in [{lo}, {hi}]" if hi is not None else f" >= {lo}") if lo is not None else ""
    if isinstance(value, bool) or not isinstance(value, int) or (lo is not None and value < lo) \
            or (hi is not None and value > hi):
        kind = what if what == "an integer" else f"{what} (an integer)"
        raise ConfigError(f"{where}: expected {kind}{bounds}, got {value!r}")
    return value


def read_number(where: str, value: Any, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hi_open: bool = False) -> float:
    """A finite int or float (not a bool), optionally within a range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (lo is not None and (value <= lo if lo_open else value < lo)) \
            or (hi is not None and (value >= hi if hi_open else value > hi)):
        bounds = ""
        if lo is not None and hi is not None:
            bounds = f" in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ConfigError(f"{where}: expected a finite number{bounds}, got {value!r}")
    return value


def read_batch_list(where: str, value: Any) -> tuple[int, ...]:
    sizes = tuple(read_int(f"{where}[{i}]", b, lo=1, what="a batch size")
                  for i, b in enumerate(read_list(where, value)))
    repeated = sorted({b for b in sizes if sizes.count(b) > 1})
    if repeated:
        raise ConfigError(f"{where}: {repeated} listed more than once in {list(sizes)}")
    return sizes


def read_choice_list(where: str, value: Any, valid: tuple[str, ...], allow_empty: bool = False) -> tuple[str, ...]:
    items = read_list(where, value, allow_empty)
    for i, item in enumerate(items):
        check_choice(f"{where}[{i}]", item, valid)
    repeated = sorted({v for v in items if items.count(v) > 1})
    if repeated:
        raise ConfigError(f"{where}: {', '.join(map(repr, repeated))} listed more than once")
    return tuple(items)


def read_ref(where: str, value: Any) -> str:
    """A ``package.module:callable`` reference; imported later (preflight), its form is checked now."""
    ref = read_string(where, value)
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ConfigError(f"{where}: {ref!r} is not of the form 'package.module:callable'")
    return ref
