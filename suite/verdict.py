"""The run's verdict: every requested check ends passed, failed or not judged, and why.

Why one module: a nightly gate makes one promise, that a green run judged everything it was asked
to and found nothing wrong. That promise cannot be kept by exit-code logic spread over plugins, so
every test outcome, skip, gate comparison, requirement and interruption reports here, and the exit
code, the terminal's last block, the HTML report's first section and the --suite-results file are
all read from here.

A check is one collected test item (with the gate comparisons made inside it) or one run-level
fact (an interruption, pytest-benchmark's own compare). Its state:

* ``passed``: it ran and every figure was within its limits;
* ``failed``: it ran and something was wrong, or something it needed and the user required could
  not run. A *known failure* (declared in the config: the figures that fail, on which outputs, and the
  pattern of its message) that fails as declared, and in no other way, is counted apart and does not fail the run;
* ``not judged``: it did not produce a verdict, for one of ``REASONS``. A run with a not-judged
  check exits ``EXIT_NOT_JUDGED`` (75) unless the user accepted that reason by name (``--accept-not-judged``,
  or ``[run] accept_not_judged`` in the config). A run that judged nothing, or in which nothing passed (every
  judged check a known failure), never exits 0.

The exit status tells CI which, without reading the output: 1 (pytest's "tests failed") for a failed run, 75 for
one that could not judge (retry it; a failure outranks it), and pytest's own codes for the rest (``EXIT_STATUS``).

Skips carry their reason code in the message (``not judged (unavailable): ...``), so the verdict
reads the same from a test report in this process and from one sent by a pytest-xdist worker.
Gate comparisons ride on the test report's ``user_properties`` for the same reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

PASSED, FAILED, NOT_JUDGED = "passed", "failed", "not judged"

#: Why a check was not judged. The keys are what --accept-not-judged and [run] accept_not_judged name.
REASONS: dict[str, str] = {
    "unsupported": "the engine has no such path by design (torch int8; TF32, bf16 or device-resident latency "
                   "where the device has none)",
    "unavailable": "a library, execution provider or device the check needs is missing on this machine",
    "no-data": "the model declares no data set for this check (e.g. no accuracy_dataset), or no accuracy floor "
               "(min_top1) to judge the fp32 reference's own accuracy by",
    "precision-not-run": "the engine computes nothing, or almost nothing, in the precision the cell is named for "
                         "(the precision census of what it runs): its figures check another precision",
    "no-baseline": "nothing to compare with: no latency baseline was given (--latency-baseline, "
                   "--benchmark-compare-fail), so the case was timed, not judged; or a gate's baseline has no "
                   "counterpart for this case",
    "busy": "other processes used the CPUs while this case was timed, in every attempt, or while its baseline was",
    "inconclusive": "the latency interval was too wide to tell a change of the threshold's size from none",
    "slower-clock": "a device-bound case got slower while the GPU's SM clock was lower than at the baseline, and "
                    "in clock-normalised time (time x SM clock: cycles) it did not: the clock explains it",
    "unproven-speedup": "a latency case more than 3x faster than its baseline whose timed rounds were not all shown "
                        "right, each on a feed of its own (a result cache or a replay that did not run reads as one)",
    "benchmark-disabled": "--benchmark-disable: the case ran once as a smoke test and was not timed",
    "interrupted": "the run stopped before this check ended",
    "shard-lost": "the shard of the night's plan that runs this cell is missing, duplicated, incomplete or failed to "
                  "start (suite-merge): its cells were not judged once, in one complete run of the plan",
    "skipped": "skipped without a reason code (a plain pytest.skip)",
}

#: Reasons that say the check's engine could not run here at all, as opposed to those where it ran (a gate could
#: not decide, or it ran in another precision) and to 'interrupted', where the run stopped before it could tell.
STRUCTURAL_REASONS = frozenset({"unsupported", "unavailable", "no-data", "skipped"})

#: The exit status of each verdict. CI must tell a run that could not judge (retry it) from one that failed (page
#: someone) without parsing its output, so not judged has a code of its own: 75, sysexits.h's EX_TEMPFAIL ("try
#: again later"), far from pytest's own codes (0-6 in pytest 9, 6 being --max-warnings; pytest adds them one by
#: one). Failed is pytest's 1, "tests failed".
EXIT_NOT_JUDGED = 75
EXIT_STATUS: dict[str, int] = {PASSED: 0, FAILED: 1, NOT_JUDGED: EXIT_NOT_JUDGED}

USER_PROPERTY = "suite_check"
#: The user property of a test whose model failed its start-up check (its value: the model): the test fails in its
#: setup, before anything of the model is made (suite/hooks/startup_check.py), and counts as failed, not as pytest's
#: error.
START_UP_FAILURE = "suite_start_up_failure"
_SKIP_TAG = re.compile(r"not judged \(([a-z0-9-]+)\)")


class NotJudgedReasonError(ValueError):
    """An unknown reason code; the message lists the valid ones."""


def check_reasons(names: Iterable[str], where: str) -> tuple[str, ...]:
    """Validate reason codes (for options and config keys); 'none' alone means the empty list."""
    names = tuple(n.strip() for n in names if n.strip())
    if names == ("none",):
        return ()
    if "none" in names:
        raise NotJudgedReasonError(f"{where}: 'none' means no reason and cannot be combined with others")
    unknown = [n for n in names if n not in REASONS]
    if unknown:
        raise NotJudgedReasonError(f"{where}: unknown reason(s) {', '.join(map(repr, unknown))}; valid: "
                                   f"{', '.join(REASONS)} (or none)")
    return names


def skip_message(reason: str, text: str) -> str:
    """The message of a skip that reports a not-judged check: the code first, then the words."""
    if reason not in REASONS:
        raise NotJudgedReasonError(f"unknown not-judged reason {reason!r}; valid: {', '.join(REASONS)}")
    return f"not judged ({reason}): {text}"


def skip(reason: str, text: str) -> NoReturn:
    """pytest.skip with a reason code the verdict understands."""
    import pytest

    pytest.skip(skip_message(reason, text))


def reason_of_skip(message: str) -> str:
    match = _SKIP_TAG.search(message)
    return match.group(1) if match and match.group(1) in REASONS else "skipped"


@dataclass(frozen=True)
class Component:
    """One comparison made inside a test (a gate's verdict on one case or record)."""

    label: str
    state: str
    reason: str | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "state": self.state, "reason": self.reason, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Component:
        return cls(str(d["label"]), str(d["state"]), d.get("reason"), str(d.get("detail", "")))


def report_component(node: Any, component: Component) -> None:
    """Attach a comparison to a test item; it travels with the item's report (also from xdist workers)."""
    node.user_properties.append((USER_PROPERTY, component.as_dict()))


def start_up_failure(report: Any) -> bool:
    """Whether this report is the failed setup of a test whose model failed its start-up check."""
    return (report.when == "setup" and report.outcome == "failed"
            and any(k == START_UP_FAILURE for k, _ in getattr(report, "user_properties", ())))


def check_of_report(report: Any) -> Check | None:
    """The check as this one test report leaves it, by the ledger's own rules (its outcome, then the comparisons
    it carries); None for a report that is no verdict (a setup or teardown that passed). What pytest's terminal
    shows for each report, so that it never counts 'passed' what the verdict has as not judged."""
    one = Ledger()
    one.add_report(report)
    return one.checks.get(report.nodeid)


@dataclass
class Check:
    id: str
    state: str
    reason: str | None = None
    detail: str = ""
    known_failure: bool = False
    components: list[Component] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "reason": self.reason, "detail": self.detail,
                "known_failure": self.known_failure, "components": [c.as_dict() for c in self.components]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Check:
        """A check as a settled verdict lists it (``as_dict``): what suite-merge reads from each shard's results."""
        state, reason = str(d["state"]), d.get("reason")
        if state not in (PASSED, FAILED, NOT_JUDGED) or (state == NOT_JUDGED and reason not in REASONS):
            raise NotJudgedReasonError(f"{d.get('id')}: unknown state {state!r} or reason {reason!r}")
        return cls(str(d["id"]), state, reason if state == NOT_JUDGED else None, str(d.get("detail", "")),
                   bool(d.get("known_failure")), [Component.from_dict(c) for c in d.get("components", ())])


@dataclass
class Ledger:
    """Every check of the run, keyed by test node id (or a run-level name), and the accepted reasons."""

    accepted: tuple[str, ...] = ()
    checks: dict[str, Check] = field(default_factory=dict)
    expected: int | None = None  # checks collected; those never reported end 'interrupted' if the run stops
    interrupted: str | None = None
    error: str | None = None  # what ended the run before any test: a start-up usage error, an internal error
    #: engines the config requires that this run left out in the open (--engines, --models), and how
    left_out: dict[str, str] = field(default_factory=dict)
    #: "MODEL PRECISION" -> the thresholds its config sets apart from the precision's defaults (suite/config/defaults.py
    #: threshold_changes): a pass is read against them, so the verdict names them
    thresholds: dict[str, list[str]] = field(default_factory=dict)

    # ---- reporting --------------------------------------------------------------------------------
    def add(self, check_id: str, state: str, reason: str | None = None, detail: str = "",
            known_failure: bool = False) -> Check:
        """Record a check's outcome; a later, worse outcome of the same check (teardown error) wins, and a plain
        failure is worse than a known one: a teardown that fails after the call's known failure fails the check."""
        if state not in (PASSED, FAILED, NOT_JUDGED):
            raise ValueError(f"unknown state {state!r}")
        if state == NOT_JUDGED and reason not in REASONS:
            raise NotJudgedReasonError(f"{check_id}: unknown not-judged reason {reason!r}")
        old = self.checks.get(check_id)
        if old is not None and (_rank(old.state), not old.known_failure) >= (_rank(state), not known_failure):
            return old
        check = Check(check_id, state, reason if state == NOT_JUDGED else None, detail, known_failure,
                      old.components if old else [])
        self.checks[check_id] = check
        return check

    def add_report(self, report: Any) -> None:
        """A pytest TestReport (this process's or a worker's): its outcome and the components it carries."""
        when, outcome = report.when, report.outcome
        if when == "call" or outcome != "passed":
            detail = _failure_text(report)
            if outcome == "passed":
                self.add(report.nodeid, PASSED)
            elif outcome == "skipped" and hasattr(report, "wasxfail"):
                self.add(report.nodeid, FAILED, detail=str(report.wasxfail), known_failure=True)
            elif outcome == "skipped":
                message = _skip_text(report)
                self.add(report.nodeid, NOT_JUDGED, reason_of_skip(message), _SKIP_TAG.sub("", message, 1).lstrip(": "))
            else:
                self.add(report.nodeid, FAILED, detail=detail or f"{when} failed")
        components = [Component.from_dict(v) for k, v in getattr(report, "user_properties", ()) if k == USER_PROPERTY]
        for component in components:
            self.add_component(report.nodeid, component)

    def add_component(self, check_id: str, component: Component) -> None:
        """A comparison made for a check (inside its test, or after the run: pytest-benchmark's compare). A
        passed check whose comparison could not judge becomes not judged; a failed comparison fails it."""
        check = self.checks.get(check_id)
        if check is None or (component.label, component.state) in {(c.label, c.state) for c in check.components}:
            return
        check.components.append(component)
        if component.state == NOT_JUDGED and check.state == PASSED:
            check.state, check.reason, check.detail = NOT_JUDGED, component.reason, f"{component.label}: " \
                                                                                    f"{component.detail}"
        elif component.state == FAILED and check.state != FAILED:
            check.state, check.reason, check.detail = FAILED, None, f"{component.label}: {component.detail}"

    def require(self, name: str, check_ids: Iterable[str], why: str) -> None:
        """Something the run was required to exercise (an engine of ``[run] requires`` or ``--engines``) fails
        the run when none of its checks ran: each ended not judged for a structural reason (unsupported,
        unavailable, no-data, skipped), not for a gate's (busy, no-baseline), the precision census's or an
        interruption's."""
        checks = [self.checks[i] for i in check_ids if i in self.checks]
        if not checks or any(c.state != NOT_JUDGED or c.reason not in STRUCTURAL_REASONS for c in checks):
            return
        reasons = sorted({str(c.reason) for c in checks})
        self.add(f"required {name}", FAILED,
                 detail=f"{why} and none of its {len(checks)} checks could run (not judged: {', '.join(reasons)}; "
                        f"e.g. {checks[0].detail})")

    def absorb(self, check: Check) -> None:
        """A check settled in another run (a shard's, suite-merge): kept whole, its components too; where the id is
        already here (a run-level check two shards both made), the worse stands, as ``add`` keeps it."""
        old = self.checks.get(check.id)
        if old is None or _rank(check.state) > _rank(old.state):
            self.checks[check.id] = check

    def note_error(self, text: str) -> None:
        """The error that ended the run early; the first one stands (a later one is its consequence)."""
        if not self.error:
            self.error = text

    def mark_interrupted(self, why: str, collected: Iterable[str]) -> None:
        """Checks that were collected and never reported end 'interrupted'."""
        self.interrupted = why
        for nodeid in collected:
            if nodeid not in self.checks:
                self.add(nodeid, NOT_JUDGED, "interrupted", why)

    # ---- reading ------------------------------------------------------------------------------------
    def by_state(self, state: str, known_failure: bool = False) -> list[Check]:
        return [c for c in self.checks.values() if c.state == state and c.known_failure == known_failure]

    def not_judged_by_reason(self) -> dict[str, list[Check]]:
        out: dict[str, list[Check]] = {}
        for c in self.by_state(NOT_JUDGED):
            out.setdefault(str(c.reason), []).append(c)
        return dict(sorted(out.items()))

    def unaccepted(self) -> dict[str, list[Check]]:
        return {r: cs for r, cs in self.not_judged_by_reason().items() if r not in self.accepted}

    @property
    def judged(self) -> int:
        return len(self.by_state(PASSED)) + len(self.by_state(FAILED)) + len(self.by_state(FAILED, True))

    def outcome(self) -> tuple[str, list[str]]:
        """('passed' | 'failed' | 'not judged', the reasons in words), the run's one-word answer."""
        why: list[str] = []
        failed = self.by_state(FAILED)
        if failed:
            why.append(f"{len(failed)} check(s) failed")
        if self.interrupted:
            why.append(f"the run was interrupted ({self.interrupted})")
        for reason, checks in self.unaccepted().items():
            why.append(f"{len(checks)} not judged ({reason}), a reason not accepted")
        if not self.judged:
            why.append("nothing was judged: every check ended without a verdict" if self.checks
                       else "nothing was judged: the run had no checks")
        elif not self.by_state(PASSED) and not failed:
            known = len(self.by_state(FAILED, True))
            why.append(f"nothing passed: every judged check ({known}) is a known failure, so nothing was shown right")
        if failed:
            return FAILED, why
        if why:
            return NOT_JUDGED, why
        return PASSED, why

    def exit_status(self, pytest_status: int) -> int:
        """The run's exit status: the verdict's (``EXIT_STATUS``: 0, 1 failed, 75 not judged) where pytest's is 0.
        pytest's other codes stand: 1 (a failed collection reaches no check), interrupted (2), internal (3) and
        usage (4) errors, 'no tests collected' (5). A status settled before (75) is settled again: a failed
        check added since (a file not written) makes it 1."""
        if pytest_status == EXIT_NOT_JUDGED:
            pytest_status = 0
        if pytest_status != 0:
            return pytest_status
        return EXIT_STATUS[self.outcome()[0]]

    def as_dict(self) -> dict[str, Any]:
        verdict, why = self.outcome()
        return {
            "verdict": verdict, "why": why, "accepted": list(self.accepted), "interrupted": self.interrupted,
            "counts": {"passed": len(self.by_state(PASSED)), "failed": len(self.by_state(FAILED)),
                       "known_failures": len(self.by_state(FAILED, True)),
                       "not_judged": {r: len(cs) for r, cs in self.not_judged_by_reason().items()}},
            "failed": [c.as_dict() for c in self.by_state(FAILED)],
            "known_failures": [c.as_dict() for c in self.by_state(FAILED, True)],
            "not_judged": {r: [c.as_dict() for c in cs] for r, cs in self.not_judged_by_reason().items()},
            "reasons": {r: REASONS[r] for r in self.not_judged_by_reason()},
            # every check's end, by id: what two runs of the same night compare (tools/compare_runs.py)
            "states": {i: c.state + (f" ({c.reason})" if c.reason else "") + (" (known failure)" * c.known_failure)
                       for i, c in sorted(self.checks.items())},
            **({"error": self.error} if self.error else {}),
            **({"required_engines_left_out": dict(sorted(self.left_out.items()))} if self.left_out else {}),
            **({"thresholds_not_default": dict(sorted(self.thresholds.items()))} if self.thresholds else {}),
        }


def _rank(state: str) -> int:
    return {PASSED: 0, NOT_JUDGED: 1, FAILED: 2}[state]


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("def ", "@", ">")):
            return line[:300]
    return ""


def _failure_text(report: Any) -> str:
    """The failure's own message (pytest's crash line, e.g. 'AssertionError: ...'), not the code around it."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return " ".join(str(message).split())[:300]
    text = getattr(report, "longreprtext", "") or ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return (errors[0] if errors else _first_line(text))[:300]


def _skip_text(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _first_line(str(longrepr))
