"""Known failures: what a cell is expected to fail with, and whether a failure is that one.

Why a module of its own: the rules that decide whether a failure is absorbed (``KnownFailure.refusal``, the
failures no entry may absorb, the figures a message names) are applied by the plugin while the run judges its
cells, long after the TOML was read; kept apart from the parser, they can be read and tested alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from metrics.parity_report import NONFINITE, PARITY_METRICS, failed_metric

#: The checks a known failure may cover (``checks``); the default is all of them.
KNOWN_FAILURE_CHECKS: tuple[str, ...] = ("accuracy", "parity")


#: Failures no known failure may absorb, whatever its pattern: NaN/Inf in an output (metrics.parity,
#: metrics.accuracy) and an output of the wrong shape or dtype (engines.feeds). Each says the engine or the model
#: is broken, not that a figure moved.
NEVER_KNOWN = re.compile(r"\b(?:reference|engine)(?: output| logits)? ha(?:s|ve) [1-9]\d* (?:rows with )?NaN/Inf"
                         r"|\bOutput(?:Shape|Dtype)Error\b")
#: Messages of a broken engine in any cell: a known failure's ``match`` that finds one of them would hide such a
#: failure (``.`` matches them all), so the config refuses it.
KNOWN_FAILURE_CANARIES: tuple[str, ...] = (
    "",
    "EngineBuildError",
    "engine output has 3 NaN/Inf values",
    "reference logits have 3 rows with NaN/Inf (counted wrong)",
    "OutputShapeError: output 'out' has shape (1, 5), expected (4, 5)",
    "OutputDtypeError: output 'out' is float16, the reference's is float32",
)
#: The figures an accuracy check judges, named as in metrics.accuracy.AccuracyVerdict: ``top1`` (its floor, its
#: drop and its ratio against the reference) and ``top5`` (its floor and its drop).
ACCURACY_METRICS: tuple[str, ...] = ("top1", "top5")
#: The figures a known failure may name in ``metrics``, per kind of check.
KNOWN_FAILURE_METRICS: dict[str, tuple[str, ...]] = {"accuracy": ACCURACY_METRICS, "parity": PARITY_METRICS}
#: The figures whose failure is a value too high (a ceiling: the lower the better); every other figure fails by being
#: too low (a floor). A known failure's declared value and margin bound its figure on that side.
CEILING_METRICS: frozenset[str] = frozenset({"mae", *(m for m in PARITY_METRICS if m.endswith("_error"))})
#: How each entry of ``AccuracyVerdict.failures`` starts (metrics.accuracy.judge_accuracy writes them).
_ACCURACY_FAILURE_STARTS: tuple[tuple[str, str], ...] = (
    ("engine logits have ", NONFINITE), ("reference logits have ", NONFINITE), ("top-1 ", "top1"), ("top-5 ", "top5"))
#: A parity failure's headline in a test's message (metrics.parity_report.ParityReport.explain's first line).
_PARITY_HEADLINE = re.compile(r"output '([^']*)' \([0-9, ]*\): (.+)$", re.M)


def accuracy_failed_metric(failure: str) -> str | None:
    """The figure one entry of ``AccuracyVerdict.failures`` is about (top1, top5 or NONFINITE); None for text
    judge_accuracy does not write."""
    return next((metric for start, metric in _ACCURACY_FAILURE_STARTS if failure.startswith(start)), None)


#: What failed in a check, figure by figure: (output, the figure's name, or None where it cannot be named).
FailedFigures = tuple[tuple[str, "str | None"], ...]
#: The values of the failed figures a check recorded: (output, the figure's name, its value or None).
FailedValues = tuple[tuple[str, str, "float | None"], ...]


def parity_failures_in(message: str) -> FailedFigures:
    """The failed figures a parity message states, read from its headlines (``output 'x' (64, 5): cosine ...;
    isclose ...``). Only for a guess where no records are at hand (whether to localize a failure); the verdict
    reads the figures the test recorded (suite/hooks/known_failures_runtime.py)."""
    return tuple((name, failed_metric(f)) for name, text in _PARITY_HEADLINE.findall(message) for f in text.split("; "))


@dataclass(frozen=True)
class KnownFailure:
    """A cell expected to fail in a stated way: named figures (``metrics``) failing on named ``outputs``, in one
    of ``checks``, with a message that matches ``match`` (a regular expression, searched). Only an assertion of
    failed figures, every one of them declared, is the known one; any other failure of the cell counts: another
    output or figure, an exception (a shape mismatch's ValueError, an engine that does not build), a NaN/Inf or an
    output of the wrong shape or dtype (``NEVER_KNOWN``), whatever ``match`` says. ``expected``: each figure's
    declared value and margin, (metric, value, margin): a failed figure further than the margin beyond its value
    (below it; above it for ``CEILING_METRICS``) is no longer the known failure (``beyond``). ``expected_on``: the
    same, for the checks on one data set (``generated:sparse``), where the same failure stands at another depth
    (3 of 8 near-tied rows on sparse inputs, 20 of 32 on photos); (data set, expected) pairs."""

    reason: str
    match: str
    checks: tuple[str, ...] = KNOWN_FAILURE_CHECKS
    outputs: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    expected: tuple[tuple[str, float, float], ...] = ()
    expected_on: tuple[tuple[str, tuple[tuple[str, float, float], ...]], ...] = ()

    def covers(self, check: str, message: str, failed: FailedFigures | None = None,
               exception: str = "AssertionError") -> bool:
        """Is this failure, from this kind of check, the one declared? ``failed``: the figures that failed (by
        default read from a parity message); ``exception``: the name of the exception's type."""
        return self.refusal(check, message, failed, exception) is None

    def refusal(self, check: str, message: str, failed: FailedFigures | None = None,
                exception: str = "AssertionError") -> str | None:
        """Why this failure is not the known one (for its report), or None where it is."""
        if check not in self.checks:
            return f"the entry covers {', '.join(self.checks)}, not {check}"
        if exception != "AssertionError":
            return (f"it is an exception ({exception}), not a check's failed figures: a known failure absorbs only the "
                    "figures it names")
        never = NEVER_KNOWN.search(message)
        if failed is None:
            failed = parity_failures_in(message) if check == "parity" else ()
        if never is not None or any(metric == NONFINITE for _, metric in failed):
            what = never.group(0) if never is not None else "NaN/Inf"
            return f"it says {what!r}, which no known failure may absorb (a broken engine or model)"
        if not failed:
            return "it states no failed figure of an output, so it is not the declared failure"
        unnamed = sorted({output for output, metric in failed if metric is None})
        if unnamed:
            return f"it has a failure of output {unnamed[0]!r} that names no figure, which no known failure may absorb"
        other: dict[str, list[str]] = {}
        for output, metric in failed:
            if output not in self.outputs or metric not in self.metrics:
                other.setdefault(output, []).append(str(metric))
        if other:
            listed = "; ".join(f"output {o!r}: {', '.join(dict.fromkeys(ms))}" for o, ms in other.items())
            return (f"it has failed figures the entry does not declare ({listed}; declared: outputs "
                    f"{list(self.outputs)}, metrics {list(self.metrics)})")
        if re.search(self.match, message) is None:
            return f"it does not match /{self.match}/"
        return None

    def expected_for(self, dataset: str | None) -> tuple[tuple[str, float, float], ...]:
        """The values and margins the checks on ``dataset`` are held to: its own where ``expected_on`` names it."""
        return next((expected for name, expected in self.expected_on if name == dataset), self.expected)

    def bound(self, metric: str, dataset: str | None = None) -> float | None:
        """How far the figure may fall (or, for a ceiling, rise) on ``dataset``: its declared value less (plus) its
        margin; None where the entry declares none."""
        declared = next(((value, margin) for name, value, margin in self.expected_for(dataset) if name == metric),
                        None)
        if declared is None:
            return None
        value, margin = declared
        return value + margin if metric in CEILING_METRICS else value - margin

    def beyond(self, values: FailedValues, dataset: str | None = None) -> str | None:
        """Why these failed figures, of a check on ``dataset``, are worse than the entry allows (for its report), or
        None where each is within its declared value and margin. A known failure has a floor: the same figure
        failing much further (84 % once absorbed 58 %) is another failure."""
        for output, metric, value in values:
            bound = self.bound(metric, dataset)
            if bound is None:
                return (f"it has failed figure {metric} of output {output!r}, for which the entry declares no value "
                        "and margin")
            if value is None or not math.isfinite(value):
                return f"it has no recorded value of {metric} of output {output!r} to hold to the declared one"
            ceiling = metric in CEILING_METRICS
            if (value > bound) if ceiling else (value < bound):
                declared, margin = next((v, m) for n, v, m in self.expected_for(dataset) if n == metric)
                on = f" on {dataset}" if any(name == dataset for name, _ in self.expected_on) else ""
                return (f"it has {metric} of output {output!r} at {value:.6g}, beyond the declared {declared:g}{on} "
                        f"{'+' if ceiling else '-'} {margin:g} (the entry's {'ceiling' if ceiling else 'floor'} "
                        f"{bound:.6g}): it failed further than the known failure")
        return None

    def describe(self) -> str:
        """What the entry declares, for a report."""
        declared = "; ".join([", ".join(f"{m} {v:g} +- {d:g}" for m, v, d in self.expected)]
                             + [f"on {name}: " + ", ".join(f"{m} {v:g} +- {d:g}" for m, v, d in expected)
                                for name, expected in self.expected_on])
        return (f"{', '.join(self.metrics)} on output(s) {', '.join(self.outputs)} in {', '.join(self.checks)}"
                + (f" (expected {declared})" if declared else "") + f", matching /{self.match}/")
