"""Whether a baseline comes from another machine or software stack (suite/environment.py's fingerprints).

Its own module because both gates use it: a failure's message notes it (suite/gate/latency.py, drift.py), and the
terminal and the HTML report warn of it. A base class of the Gate (suite/gate/state.py), so that the latency and
drift checks reach it without importing the Gate.
"""

from __future__ import annotations

from typing import Any

from suite.environment import differences
from suite.gate.baselines import LatencyBaseline, ResultsBaseline


class BaselineEnvironment:
    """The Gate's baselines and this run's environment; the fields are the Gate's (suite/gate/state.py)."""

    environment: dict[str, Any]
    latency_baseline: LatencyBaseline | None
    results_baseline: ResultsBaseline | None

    def environment_differences(self) -> dict[str, tuple[Any, dict[str, tuple[Any, Any]]]]:
        """{"latency"|"accuracy": (baseline file, {key: (baseline, current)})} where they differ."""
        out = {}
        for name, base in (("latency", self.latency_baseline), ("accuracy", self.results_baseline)):
            if base is not None:
                diff = differences(base.environment, self.environment)
                if diff:
                    out[name] = (base.source, diff)
        return out

    def _env_note(self, which: str) -> str:
        diff = self.environment_differences().get(which)
        if not diff:
            return ""
        items = "; ".join(f"{k}: {b} -> {c}" for k, (b, c) in diff[1].items())
        return f"\n  NOTE: the baseline comes from a different environment ({items})"
