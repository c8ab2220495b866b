"""Per-node times from ONNX Runtime's profiler, and which nodes a slower (or faster) case spent its change in.

Timing says a case moved; the profile says where. ONNX Runtime's profiler (``SessionOptions.enable_profiling``)
writes one ``cat: "Node"`` event per node per run, named ``<node>_kernel_time``, where ``<node>`` is the node of the
graph as ONNX Runtime runs it (after its optimizations: a fused Conv+Relu is named after its output), with the op and
the execution provider in ``args``. Pure: events in, medians and deltas out.

Two runs profiled one after the other compare medians taken under different load: on a busy machine the node named
first was whichever large node's median the load moved most (docs/attribution.md). Profiled in interleaved rounds
(a few runs of the baseline, a few of the change, again and again: ``node_round_times_us``), each round's difference
is taken under the same load, and ``round_deltas`` ranks each node by its median per-round change less the
uncertainty of that median, from the spread of the per-round differences: a noisy node's changes scatter about
zero, a moved node's repeat. The rounds keep one order, A B B A (each side two sessions, created in that order,
its rounds the mean of the two: ``mean_rounds``): alternated (A B, B A, ...), the session at the turn ran twice in a
row and read faster, ResNet-18's second of two sessions 11-15 % less node time than its first.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SUFFIX = "_kernel_time"


def node_times_us(events: Iterable[Mapping[str, Any]], skip_runs: int = 0) -> dict[str, float]:
    """Each node's median kernel time (microseconds) over the profiled runs, keyed ``"<op> <node>"``; the first
    ``skip_runs`` occurrences of each node (warm-up runs) are left out."""
    seen = _kernel_times(events)
    return {node: statistics.median(times[skip_runs:]) for node, times in seen.items() if times[skip_runs:]}


def _kernel_times(events: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Every kernel time (microseconds) ONNX Runtime's profile recorded for each node, in order, keyed
    ``"<op> <node>"``."""
    seen: dict[str, list[float]] = {}
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith(SUFFIX):
            continue
        op = (event.get("args") or {}).get("op_name", "?")
        seen.setdefault(f"{op} {name[:-len(SUFFIX)]}", []).append(float(event.get("dur", 0.0)))
    return seen


def node_round_times_us(events: Iterable[Mapping[str, Any]], runs_per_round: int,
                        skip_runs: int = 0) -> dict[str, list[float]]:
    """Each node's median kernel time (microseconds) in each round of ``runs_per_round`` profiled runs, in order,
    keyed ``"<op> <node>"``, after the first ``skip_runs`` (warm-up); a last round short of runs is left out."""
    if runs_per_round < 1:
        raise ValueError(f"runs_per_round must be >= 1, got {runs_per_round}")
    out = {}
    for node, times in _kernel_times(events).items():
        kept = times[skip_runs:]
        rounds = [statistics.median(kept[i:i + runs_per_round])
                  for i in range(0, len(kept) - runs_per_round + 1, runs_per_round)]
        if rounds:
            out[node] = rounds
    return out


def mean_rounds(first: Mapping[str, list[float]], second: Mapping[str, list[float]]) -> dict[str, list[float]]:
    """One side's per-round times from its two sessions (sessions created A B B A: the first and the last, or the
    second and the third), round by round the mean of the two: a bias that grows with a session's place in the order
    they were created or run in then falls on both sides alike. A node only one session has keeps that session's
    times."""
    out = {}
    for node in dict.fromkeys([*first, *second]):
        one, two = first.get(node), second.get(node)
        if one is None or two is None:
            out[node] = list(one or two or [])
            continue
        out[node] = [(a + b) / 2 for a, b in zip(one, two, strict=False)]
    return out


#: The half-width of a per-round change, in standard errors of its median (about 95 %).
Z_ROUND = 2.0


@dataclass(frozen=True)
class NodeDelta:
    """One node's median time in the baseline run and in this one (microseconds; None: the run had no such node).

    From interleaved rounds (``round_deltas``): ``change_us`` is the median of the per-round differences and
    ``spread_us`` the half-width of its uncertainty (``Z_ROUND`` standard errors, from their median absolute
    deviation); None for two plain runs (``node_deltas``)."""

    node: str
    baseline_us: float | None
    current_us: float | None
    change_us: float | None = None
    spread_us: float | None = None

    @property
    def delta_us(self) -> float:
        if self.change_us is not None:
            return self.change_us
        return (self.current_us or 0.0) - (self.baseline_us or 0.0)

    @property
    def beyond_spread_us(self) -> float:
        """How far the change stands beyond its uncertainty (negative: within it): the rounds' ranking key."""
        return abs(self.delta_us) - (self.spread_us or 0.0)

    def describe(self, total_us: float) -> str:
        share = f" ({self.delta_us / total_us:.0%} of the change)" if total_us else ""
        if self.baseline_us is None:
            return f"{self.node}: new, {self.current_us:.1f} us"
        if self.current_us is None:
            return f"{self.node}: gone, was {self.baseline_us:.1f} us"
        spread = "" if self.spread_us is None else f" +- {self.spread_us:.1f}"
        return (f"{self.node}: {self.baseline_us:.1f} -> {self.current_us:.1f} us ({self.delta_us:+.1f}{spread})"
                f"{share}")


def node_deltas(baseline: Mapping[str, float], current: Mapping[str, float]) -> list[NodeDelta]:
    """Every node of either run, the largest change first (by size, slower or faster)."""
    nodes = list(dict.fromkeys([*baseline, *current]))
    deltas = [NodeDelta(n, baseline.get(n), current.get(n)) for n in nodes]
    return sorted(deltas, key=lambda d: (-abs(d.delta_us), d.node))


def round_deltas(baseline: Mapping[str, list[float]], current: Mapping[str, list[float]]) -> list[NodeDelta]:
    """Every node of either side's interleaved rounds (``node_round_times_us``; round k of one side ran beside
    round k of the other), the change that stands furthest beyond its round-to-round spread first. A node only one
    side has counts 0 us in the other's rounds (its change is its whole time)."""
    nodes = list(dict.fromkeys([*baseline, *current]))
    rounds = min((len(r) for r in (*baseline.values(), *current.values())), default=0)
    deltas = []
    for n in nodes:
        before, after = baseline.get(n), current.get(n)
        diffs = [(after[k] if after else 0.0) - (before[k] if before else 0.0) for k in range(rounds)]
        if not diffs:
            continue
        change = statistics.median(diffs)
        mad = statistics.median(abs(d - change) for d in diffs)
        # the median's standard error: 1.2533 sigma / sqrt(n), sigma estimated as 1.4826 MAD
        spread = Z_ROUND * 1.2533 * 1.4826 * mad / math.sqrt(len(diffs))
        deltas.append(NodeDelta(n, None if before is None else statistics.median(before[:rounds]),
                                None if after is None else statistics.median(after[:rounds]), change, spread))
    return sorted(deltas, key=lambda d: (-d.beyond_spread_us, -abs(d.delta_us), d.node))


def explain_nodes(baseline: Mapping[str, float], current: Mapping[str, float], top: int = 3) -> str:
    """The sentence shown beside a case that moved: the summed node time of both runs and the nodes that changed
    most."""
    deltas = node_deltas(baseline, current)
    before, after = sum(baseline.values()), sum(current.values())
    total = after - before
    head = (f"per node (ONNX Runtime profiler): {before / 1e3:.3f} -> {after / 1e3:.3f} ms summed over "
            f"{len(deltas)} nodes")
    if not deltas:
        return head
    return head + "; largest changes: " + "; ".join(d.describe(total) for d in deltas[:top])
