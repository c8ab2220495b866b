"""Reading ``suite.toml`` into a ``SuiteConfig``: the file's top-level tables, checked where they are written.

Why a module of its own: this is the one place that knows the file's layout (which tables it has, which keys
``[defaults]``, ``[latency]`` and ``[run]`` take) and puts the checked parts together into schema.py's
``SuiteConfig``. Each model's table is model.py's (its inputs shapes.py's, its known failures and unsupported cells
excuses.py's), the tables a model may override overrides.py's; the typed values come from validate.py, the
starting thresholds from defaults.py.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engines.base import PRECISIONS
from suite.config.defaults import default_precision_tables
from suite.config.model import _parse_model
from suite.config.overrides import _check_engine_options, _merge_precision, _parse_int8
from suite.config.schema import (
    ENGINES,
    MAX_ROUNDS,
    REQUIREMENTS,
    ConfigError,
    LatencyOptions,
    ModelConfig,
    SuiteConfig,
)
from suite.config.validate import (
    check_choice,
    check_keys,
    read_batch_list,
    read_choice_list,
    read_int,
    read_list,
    read_number,
    read_string,
    read_table,
)
from suite.verdict import NotJudgedReasonError, check_reasons

_TOP_KEYS = {"defaults", "precision", "int8", "latency", "engine_options", "models", "run"}
_DEFAULT_KEYS = {"batch_sizes", "latency_batch_sizes", "opt_batch", "reference_batch", "precisions", "engines",
                 "parity_samples"}
_LATENCY_KEYS = {"rounds", "warmup_fraction"}
_RUN_KEYS = {"requires", "accept_not_judged"}


def load_config(path: Path | str) -> SuiteConfig:
    """The config file, parsed and checked. Errors name the file once: the plugin labels them 'suite config:'."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    return parse_config(raw, path)


def parse_config(raw: Mapping[str, Any], path: Path = Path("<memory>")) -> SuiteConfig:
    check_keys(str(path), raw, _TOP_KEYS)
    defaults = _parse_defaults(read_table("[defaults]", raw.get("defaults", {})))
    precision_defaults = default_precision_tables()
    for prec, table in read_table("[precision]", raw.get("precision", {})).items():
        check_choice("[precision]", prec, PRECISIONS)
        _merge_precision(precision_defaults[prec], table, f"[precision.{prec}]", prec)
    int8_defaults = _parse_int8("[int8]", raw.get("int8", {}))
    latency = _parse_latency(raw.get("latency", {}))
    engine_defaults = read_table("[engine_options]", raw.get("engine_options", {}))
    # engine_options are passed to the backend as they are, and keyed into its cache entries.
    for eng, opts in engine_defaults.items():
        check_choice("[engine_options]", eng, ENGINES)
        _check_engine_options(f"[engine_options.{eng}]", eng, opts)
    models_raw = read_table("[models]", raw.get("models", {}))
    if not models_raw:
        raise ConfigError(f"{path}: no [models.NAME] entries")
    models = {
        name: _parse_model(name, entry, defaults, precision_defaults, int8_defaults, engine_defaults)
        for name, entry in models_raw.items()
    }
    requires, accept = _parse_run(raw.get("run", {}), models)
    return SuiteConfig(path, models, latency, requires, accept)


def _parse_defaults(table: Mapping[str, Any]) -> dict[str, Any]:
    """[defaults], checked where it is written: a model inheriting a bad value must not be blamed for it."""
    check_keys("[defaults]", table, _DEFAULT_KEYS)
    out: dict[str, Any] = {}
    for key in ("batch_sizes", "latency_batch_sizes"):
        if key in table:
            out[key] = read_batch_list(f"[defaults].{key}", table[key])
    for key in ("opt_batch", "reference_batch"):
        if key in table:
            out[key] = read_int(f"[defaults].{key}", table[key], lo=1)
    if "precisions" in table:
        out["precisions"] = read_choice_list("[defaults].precisions", table["precisions"], PRECISIONS)
    if "engines" in table:
        out["engines"] = read_choice_list("[defaults].engines", table["engines"], ENGINES)
    if "parity_samples" in table:
        out["parity_samples"] = read_int("[defaults].parity_samples", table["parity_samples"], lo=1)
    return out


def _parse_latency(table: Any) -> LatencyOptions:
    table = read_table("[latency]", table)
    check_keys("[latency]", table, _LATENCY_KEYS)
    out = LatencyOptions()
    if "rounds" in table:
        out = dataclasses.replace(out, rounds=read_int("[latency].rounds", table["rounds"], lo=2,
                                                                 hi=MAX_ROUNDS))
    if "warmup_fraction" in table:
        out = dataclasses.replace(out, warmup_fraction=read_number("[latency].warmup_fraction",
                                                                   table["warmup_fraction"], 0.0, 1.0, hi_open=True))
    return out


def _parse_run(table: Any, models: Mapping[str, ModelConfig]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    table = read_table("[run]", table)
    check_keys("[run]", table, _RUN_KEYS)
    requires = read_choice_list("[run].requires", table.get("requires", []), REQUIREMENTS, allow_empty=True)
    used = {e for m in models.values() for e in m.engines}
    for i, name in enumerate(requires):
        if name != "cuda" and name not in used:
            raise ConfigError(f"[run].requires[{i}]: engine {name!r} is required but no model lists it in "
                              f"engines, so the requirement could never be checked")
    where = "[run].accept_not_judged"
    reasons = read_list(where, table.get("accept_not_judged", []), allow_empty=True)
    for i, reason in enumerate(reasons):
        read_string(f"{where}[{i}]", reason)
    named = [r.strip() for r in reasons]
    if "none" in named and len(named) > 1:
        raise ConfigError(f"{where} = {reasons!r}: 'none' means no reason and cannot be combined with others")
    try:
        accept = check_reasons(reasons, where)
    except NotJudgedReasonError as exc:
        raise ConfigError(str(exc)) from None
    return requires, accept
