"""Per-node times from ONNX Runtime's profiler, and which nodes a slower (or faster) case spent its change in.

Timing says a case moved; the profile says where. ONNX Runtime's profiler (``SessionOptions.enable_profiling``)
writes one ``cat: "Node"`` event per node per run, named ``<node>_kernel_time``, where ``<node>`` is the node of the
graph as ONNX Runtime runs it (after its optimizations: a fused Conv+Relu is named after its output), with the op and
the execution provider in ``args``. Pure: events in, medians and deltas out.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SUFFIX = "_kernel_time"


def node_times_us(events: Iterable[Mapping[str, Any]], skip_runs: int = 0) -> dict[str, float]:
    """Each node's median kernel time (microseconds) over the profiled runs, keyed ``"<op> <node>"``; the first
    ``skip_runs`` occurrences of each node (warm-up runs) are left out."""
    seen: dict[str, list[float]] = {}
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith(SUFFIX):
            continue
        op = (event.get("args") or {}).get("op_name", "?")
        seen.setdefault(f"{op} {name[:-len(SUFFIX)]}", []).append(float(event.get("dur", 0.0)))
    return {node: statistics.median(times[skip_runs:]) for node, times in seen.items() if times[skip_runs:]}


@dataclass(frozen=True)
class NodeDelta:
    """One node's median time in the baseline run and in this one (microseconds; None: the run had no such node)."""

    node: str
    baseline_us: float | None
    current_us: float | None

    @property
    def delta_us(self) -> float:
        return (self.current_us or 0.0) - (self.baseline_us or 0.0)

    def describe(self, total_us: float) -> str:
        share = f" ({self.delta_us / total_us:.0%} of the change)" if total_us else ""
        if self.baseline_us is None:
            return f"{self.node}: new, {self.current_us:.1f} us"
        if self.current_us is None:
            return f"{self.node}: gone, was {self.baseline_us:.1f} us"
        return f"{self.node}: {self.baseline_us:.1f} -> {self.current_us:.1f} us ({self.delta_us:+.1f}){share}"


def node_deltas(baseline: Mapping[str, float], current: Mapping[str, float]) -> list[NodeDelta]:
    """Every node of either run, the largest change first (by size, slower or faster)."""
    nodes = list(dict.fromkeys([*baseline, *current]))
    deltas = [NodeDelta(n, baseline.get(n), current.get(n)) for n in nodes]
    return sorted(deltas, key=lambda d: (-abs(d.delta_us), d.node))


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
