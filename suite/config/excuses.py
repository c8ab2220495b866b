"""What a model excuses in its cells: ``[models.NAME.known_failures]`` (a cell expected to fail, on which outputs
and figures, with which message) and ``[models.NAME.unsupported]`` (a cell, or a latency path, the engine cannot run
by design).

Why a module of its own: an excuse must not hide another failure, so each entry is checked against the model's
engines, precisions, outputs and figures, and against the canaries no pattern may match (known_failures.py).
"""

from __future__ import annotations

import re
from typing import Any

from core.inputs import DISTRIBUTIONS
from engines.base import PRECISIONS
from metrics.parity_report import PARITY_METRICS
from suite.config.known_failures import (
    ACCURACY_METRICS,
    KNOWN_FAILURE_CANARIES,
    KNOWN_FAILURE_CHECKS,
    KNOWN_FAILURE_METRICS,
    KnownFailure,
)
from suite.config.schema import (
    ENGINES,
    ConfigError,
)
from suite.config.validate import (
    check_choice,
    check_keys,
    read_choice_list,
    read_number,
    read_string,
    read_table,
)
from suite.timing import PATHS

_KNOWN_FAILURE_KEYS = {"reason", "match", "checks", "outputs", "metrics", "expected", "expected_on"}
_KNOWN_FAILURE_FORM = ('{ reason = "what fails, measured how, since when", outputs = ["logits"], metrics = '
                       '["top1_agreement_pct"], expected = { top1_agreement_pct = { value = 64.0, margin = 4.0 } }, '
                       'match = "REGEX over the failure message", checks = ["parity"] }')


def _parse_known_failures(where: str, table: Any, engines: tuple[str, ...], precisions: tuple[str, ...],
                          accuracy_dataset: str | None, outputs: tuple[str, ...] = (),
                          parity_dataset: str | None = None) -> dict[str, KnownFailure]:
    """Each entry says what is expected to fail and how (which figures of which outputs, and the message's
    pattern), so that it cannot hide another failure."""
    out: dict[str, KnownFailure] = {}
    for cell_key, spec in read_table(where, table).items():
        at = f"{where}.{cell_key}"
        engine, _, precision = cell_key.partition("-")
        check_choice(f"{at} (engine)", engine, ENGINES)
        check_choice(f"{at} (precision)", precision, PRECISIONS)
        if engine not in engines or precision not in precisions:
            raise ConfigError(f"{at}: the model does not run {cell_key} (engines {list(engines)}, precisions "
                              f"{list(precisions)}); the entry would never apply")
        if isinstance(spec, str):
            raise ConfigError(f"{at} = {spec!r}: a plain reason is the old form, which hid any failure of the "
                              f"cell; write {cell_key} = {_KNOWN_FAILURE_FORM}")
        spec = read_table(at, spec)
        check_keys(at, spec, _KNOWN_FAILURE_KEYS)
        for required in ("reason", "match"):
            if required not in spec:
                raise ConfigError(f"{at}: missing required key {required!r}; the form is {_KNOWN_FAILURE_FORM}")
        missing = [k for k in ("outputs", "metrics") if k not in spec]
        if missing:
            raise ConfigError(f"{at}: missing {' and '.join(map(repr, missing))}: a known failure names the outputs "
                              "and the figures that fail on them, and absorbs no other failure of the cell (its match "
                              f"alone once absorbed another output's garbage); add outputs = [one or more of "
                              f"{list(outputs)}], metrics = [one or more of {', '.join(_metric_names())}]")
        reason = read_string(f"{at}.reason", spec["reason"])
        pattern = read_string(f"{at}.match", spec["match"])
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{at}.match = {pattern!r}: not a valid regular expression ({exc})") from None
        if compiled.search("") is not None:
            raise ConfigError(f"{at}.match = {pattern!r}: matches an empty message, so it would match any failure; "
                              "match text of the expected failure (e.g. the figure that fails)")
        canary = next((c for c in KNOWN_FAILURE_CANARIES if compiled.search(c) is not None), None)
        if canary is not None:
            raise ConfigError(f"{at}.match = {pattern!r}: matches {canary!r}, what a broken engine says in any cell, "
                              "so it would hide such a failure; match text of the expected failure (e.g. the figure "
                              "that fails)")
        checks = (read_choice_list(f"{at}.checks", spec["checks"], KNOWN_FAILURE_CHECKS) if "checks" in spec
                  else KNOWN_FAILURE_CHECKS)
        if "checks" in spec and "accuracy" in checks and accuracy_dataset is None:
            raise ConfigError(f"{at}.checks: 'accuracy' listed, but the model has no accuracy_dataset, so it has "
                              "no accuracy check")
        declared_outputs = read_choice_list(f"{at}.outputs", spec["outputs"], outputs)
        metrics = read_choice_list(f"{at}.metrics", spec["metrics"], _metric_names())
        for i, metric in enumerate(metrics):
            if not any(metric in KNOWN_FAILURE_METRICS[c] for c in checks):
                kinds = [c for c in KNOWN_FAILURE_CHECKS if metric in KNOWN_FAILURE_METRICS[c]]
                raise ConfigError(f"{at}.metrics[{i}]: {metric!r} is a figure of the {kinds[0]} check, which the entry "
                                  f"does not cover (checks {list(checks)}); figures of those: "
                                  f"{', '.join(m for c in checks for m in KNOWN_FAILURE_METRICS[c])}")
        expected = _parse_expected(f"{at}.expected", spec.get("expected"), metrics)
        expected_on = _parse_expected_on(at, spec, metrics, accuracy_dataset, parity_dataset)
        out[cell_key] = KnownFailure(reason=reason, match=pattern, checks=checks, outputs=declared_outputs,
                                     metrics=metrics, expected=expected, expected_on=expected_on)
    return out


def _parse_expected_on(at: str, spec: Any, metrics: tuple[str, ...], accuracy_dataset: str | None,
                       parity_dataset: str | None) -> tuple[tuple[str, tuple[tuple[str, float, float], ...]], ...]:
    """``expected_on = { "generated:sparse" = { FIGURE = { value = V, margin = M } } }``: the declared values on one
    data set the cell's checks run on (its data sets, ``generated:<distribution>``), where the same failure stands
    at another depth; every other data set is held to ``expected``."""
    data_sets = (*dict.fromkeys(d for d in (parity_dataset or accuracy_dataset, accuracy_dataset) if d),
                 *(f"generated:{d}" for d in DISTRIBUTIONS))
    out = []
    for name, declared in read_table(f"{at}.expected_on", spec.get("expected_on", {})).items():
        check_choice(f"{at}.expected_on", name, data_sets)
        out.append((name, _parse_expected(f"{at}.expected_on.{name}", declared, metrics)))
    return tuple(out)


def _parse_expected(at: str, table: Any, metrics: tuple[str, ...]) -> tuple[tuple[str, float, float], ...]:
    """Each declared figure's value and margin: how far the known failure may fall (rise, for a ceiling) before it
    is another failure. Required for every figure of ``metrics``: an entry without them absorbed the same figure at
    any depth (84 % declared, 58 % absorbed)."""
    if table is None:
        raise ConfigError(f"{at}: missing: a known failure states how far each of its figures may fall, as the value "
                          "seen and a margin (in the results file's units: top1/top5 as fractions); add expected = "
                          + "{ " + ", ".join(f"{m} = {{ value = V, margin = M }}" for m in metrics) + " }")
    table = read_table(at, table)
    check_keys(at, table, set(metrics))
    out = []
    for metric in metrics:
        if metric not in table:
            raise ConfigError(f"{at}: {metric!r} is in metrics but has no value and margin; add {metric} = "
                              "{ value = V, margin = M }")
        spec = read_table(f"{at}.{metric}", table[metric])
        check_keys(f"{at}.{metric}", spec, {"value", "margin"})
        for key in ("value", "margin"):
            if key not in spec:
                raise ConfigError(f"{at}.{metric}: missing {key!r}; the form is {{ value = V, margin = M }}")
        value = read_number(f"{at}.{metric}.value", spec["value"])
        margin = read_number(f"{at}.{metric}.margin", spec["margin"], lo=0.0)
        bottom = _BOTTOM.get(metric)
        if bottom is not None and (value < bottom or (margin > 0 and value - margin <= bottom)):
            raise ConfigError(f"{at}.{metric}: value {value:g} - margin {margin:g} = {value - margin:g}, a floor no "
                              f"{metric} can fall below ({bottom:g}), so the entry would absorb it at any depth; "
                              "declare the value seen and a margin of its spread (a figure seen at its bottom: "
                              "margin = 0)")
        out.append((metric, float(value), float(margin)))
    return tuple(out)


#: The lowest each floored figure can be: a margin that reaches it cannot fail (a figure seen there, margin 0, has
#: nowhere further to fall).
_BOTTOM: dict[str, float] = {"isclose_pct": 0.0, "top1_agreement_pct": 0.0, "retrieval_agreement_pct": 0.0,
                               "cosine": -1.0, "worst_row_cosine": -1.0, "top1": 0.0, "top5": 0.0}


def _metric_names() -> tuple[str, ...]:
    """Every figure a known failure may name, parity's first."""
    return (*PARITY_METRICS, *ACCURACY_METRICS)


def _parse_unsupported(where: str, table: Any, engines: tuple[str, ...],
                       precisions: tuple[str, ...]) -> dict[str, str]:
    """``"onnxruntime-int8" = "why"`` or ``"onnxruntime-bf16-graph" = "why"``: each key names a cell (or one of its
    latency paths) the model runs, each reason is written out."""
    out: dict[str, str] = {}
    for key, reason in read_table(where, table).items():
        at = f"{where}.{key}"
        engine, precision, *rest = str(key).split("-")
        check_choice(f"{at} (engine)", engine, ENGINES)
        check_choice(f"{at} (precision)", precision, PRECISIONS)
        if len(rest) > 1 or (rest and rest[0] not in PATHS):
            raise ConfigError(f"{at}: write ENGINE-PRECISION or ENGINE-PRECISION-PATH, PATH one of "
                              f"{', '.join(PATHS)}")
        if engine not in engines or precision not in precisions:
            raise ConfigError(f"{at}: the model does not run {engine}-{precision} (engines {list(engines)}, "
                              f"precisions {list(precisions)}); the entry would never apply")
        text = read_string(at, reason).strip()
        if len(text) < 10:
            raise ConfigError(f"{at} = {reason!r}: say why the engine cannot do this by design (what was seen, "
                              "where, since when)")
        out[str(key)] = text
    return out
