"""The tables a model inherits from the top of suite.toml and may override: ``[precision.P]`` (its parity and
accuracy thresholds, its generated distributions), ``[int8]`` and ``[engine_options.ENGINE]``.

Why a module of its own: each is read twice (at the top, then in ``[models.NAME]`` over it) by the same readers, so
that a value is checked, and blamed, where it is written; every threshold is checked by the class that enforces it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from core.inputs import DISTRIBUTIONS
from engines.base import PRECISIONS
from metrics import AccuracyThreshold, Tolerance
from suite.config.defaults import default_precision_tables
from suite.config.schema import (
    CALIBRATION_METHODS,
    EXECUTION_PROVIDERS,
    TRANSFORMER_FUSIONS,
    ConfigError,
    Int8Options,
)
from suite.config.validate import (
    check_choice,
    check_keys,
    read_bool,
    read_choice_list,
    read_int,
    read_list,
    read_number,
    read_string,
    read_table,
)

_PRECISION_KEYS = {"parity", "accuracy", "generated"}
_PARITY_KEYS = set(Tolerance.__dataclass_fields__)
# min_top1/min_top5 are per model (absolute floors), the rest per precision (relative to the reference).
_ACCURACY_KEYS = set(AccuracyThreshold.__dataclass_fields__) - {"min_top1", "min_top5"}
_INT8_KEYS = {"method", "samples", "percentile", "per_channel", "keep_fp32"}
# What each backend reads from [engine_options.ENGINE] (README "Configuration reference"); a typo is an error,
# not an option silently ignored.
_ENGINE_OPTION_KEYS = {
    "torch": {"channels_last"},
    "onnxruntime": {"execution_provider", "intra_op_threads", "transformer_fusion"},
    "inductor": {"precisions", "cxx"},
    "tensorrt": {"workspace_mb", "builder_optimization_level"},
}


def _merge_precision(target: dict[str, Any], table: Any, where: str, precision: str) -> None:
    table = read_table(where, table)
    check_keys(where, table, _PRECISION_KEYS)
    parity = dict(read_table(f"{where}.parity", table.get("parity", {})))
    accuracy = read_table(f"{where}.accuracy", table.get("accuracy", {}))
    check_keys(f"{where}.parity", parity, _PARITY_KEYS)
    check_keys(f"{where}.accuracy", accuracy, _ACCURACY_KEYS)
    if "approximate_outputs" in parity:
        at = f"{where}.parity.approximate_outputs"
        parity["approximate_outputs"] = tuple(read_string(f"{at}[{i}]", name)
                                              for i, name in enumerate(read_list(at, parity["approximate_outputs"])))
    # Each threshold is checked alone by the class that enforces it, so its error names this key.
    defaults = default_precision_tables()[precision]
    for key, value in parity.items():
        if key != "approximate_outputs":
            _threshold(f"{where}.parity.{key}", Tolerance, key, value)
            _refuse_vacuous(f"{where}.parity.{key}", key, value, defaults["parity"].get(key))
    for key, value in accuracy.items():
        _threshold(f"{where}.accuracy.{key}", AccuracyThreshold, key, value)
        _refuse_vacuous(f"{where}.accuracy.{key}", key, value, defaults["accuracy"].get(key))
    if "generated" in table:
        target["generated"] = list(read_choice_list(f"{where}.generated", table["generated"], DISTRIBUTIONS))
    target["parity"].update(parity)
    target["accuracy"].update(accuracy)


#: Values past which a threshold passes any output (or any output short of a sign flip), with what makes it so. Such
#: a threshold judges nothing while the run reads green (issue 43: rtol = atol = 1e9, min_cosine = -1 and
#: min_isclose_pct = 0 passed a sign-flipped engine), so it is refused where it is written.
_VACUOUS: dict[str, tuple[Callable[[float], bool], str]] = {
    "rtol": (lambda v: v >= 1.0, "an element within 100% of the reference's magnitude is 'close': a zero output, "
                                 "or one of twice the value, passes"),
    "atol": (lambda v: v >= 1.0, "every element within 1 of the reference's is 'close', whatever its scale"),
    "min_isclose_pct": (lambda v: v <= 0.0, "0% of elements close is met by any output"),
    "min_cosine": (lambda v: v <= -1.0, "every cosine is >= -1"),
    "min_row_cosine": (lambda v: v <= -1.0, "every cosine is >= -1"),
    "min_top1_agreement_pct": (lambda v: v <= 0.0, "0% agreement is met by any output"),
    "min_retrieval_agreement_pct": (lambda v: v <= 0.0, "0% agreement is met by any output"),
    "max_top1_drop": (lambda v: v >= 1.0, "top-1 cannot drop by more than 100%"),
    "max_top5_drop": (lambda v: v >= 1.0, "top-5 cannot drop by more than 100%"),
}


def _refuse_vacuous(where: str, key: str, value: Any, default: Any) -> None:
    """A threshold that cannot fail is a usage error, unless it is the precision's own default (int8's isclose 0%:
    reported, not gated, README "Defaults per precision"), which a table may repeat."""
    rule = _VACUOUS.get(key)
    if rule is None or value == default or not rule[0](float(value)):
        return
    instead = f"delete it for the precision's default ({default:g})" if default is not None else \
        "delete it: by default there is no such check"
    raise ConfigError(f"{where}: {value:g} cannot fail ({rule[1]}): a threshold that passes any output judges "
                      f"nothing; tighten it, or {instead}")


def _threshold(where: str, cls: Any, key: str, value: Any) -> None:
    read_number(where, value)
    try:
        cls(**{key: value})
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _parse_int8(where: str, table: Any, base: Int8Options | None = None) -> Int8Options:
    table = read_table(where, table)
    check_keys(where, table, _INT8_KEYS)
    out = base or Int8Options()
    if "method" in table:
        check_choice(f"{where}.method", read_string(f"{where}.method", table["method"]), CALIBRATION_METHODS)
        out = dataclasses.replace(out, method=table["method"])
    if "samples" in table:
        out = dataclasses.replace(out, samples=read_int(f"{where}.samples", table["samples"], lo=1))
    if "percentile" in table:
        out = dataclasses.replace(out, percentile=read_number(f"{where}.percentile", table["percentile"], 0.0, 100.0,
                                                              lo_open=True))
    if "per_channel" in table:
        out = dataclasses.replace(out, per_channel=read_bool(f"{where}.per_channel", table["per_channel"]))
    if "keep_fp32" in table:
        names = table["keep_fp32"]
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{where}.keep_fp32: expected a list of node names (strings), got {names!r}")
        out = dataclasses.replace(out, keep_fp32=tuple(sorted(set(names))))
    return out


def _check_engine_options(where: str, engine: str, opts: Any) -> None:
    """Types and values of what each backend reads, checked here so a backend never sees a bad one."""
    opts = read_table(where, opts)
    check_keys(where, opts, _ENGINE_OPTION_KEYS[engine])
    for key, value in opts.items():
        at = f"{where}.{key}"
        if key == "channels_last":
            read_bool(at, value)
        elif key == "execution_provider":
            check_choice(at, read_string(at, value), EXECUTION_PROVIDERS)
        elif key == "intra_op_threads":
            read_int(at, value, lo=1)
        elif key == "transformer_fusion":
            check_choice(at, read_string(at, value), TRANSFORMER_FUSIONS)
        elif key == "precisions":
            read_choice_list(at, value, PRECISIONS)
        elif key == "cxx":
            read_string(at, value)
        elif key == "workspace_mb":
            read_int(at, value, lo=1)
        elif key == "builder_optimization_level":
            read_int(at, value, lo=0, hi=5)
