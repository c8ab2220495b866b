"""The smallest set of nodes to keep in higher precision so that a reduced-precision cell passes parity.

Why not a prefix: Polygraphy's ``debug precision`` bisects over the topological order and answers "run the first N
layers in higher precision" (NVIDIA/TensorRT#4616: 1301 layers), because it assumes the fault moves monotonically
along the graph. A fault usually lives in a few nodes: here each node is first measured alone (the output's error
with that node kept), the nodes are added greedily by that measure until the cell passes, and the set is pruned
(each node dropped again where the rest still pass). ``bisect_prefix`` is Polygraphy's answer on the same oracle,
for comparison. Pure: the caller's ``passes(set)`` runs the engine; this only decides what to try.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Passes = Callable[[frozenset[str]], bool]


@dataclass(frozen=True)
class KeepSet:
    """``nodes``: the set found (None: no set passes within the budget, or not even every candidate); ``tried``:
    the oracle's calls; ``pruned``: every node of the set was tried without (False: the budget ran out first)."""

    nodes: tuple[str, ...] | None
    tried: int
    order: tuple[str, ...] = field(default=())  # candidates, most helpful alone first
    pruned: bool = True


def greedy_keep_set(error_alone: Mapping[str, float], passes: Passes, budget: int | None = None) -> KeepSet:
    """``error_alone``: node -> the output's error with only that node kept (lower: the node matters more).
    Add nodes in that order, in chunks that double after the first two (1, 1, 2, 4, ...: a fault spread over many
    nodes costs log2 calls, not one per node), until ``passes``; then drop each node, the last added first, where
    the rest still pass. ``budget``: the most oracle calls (a quantizer run each)."""
    order = tuple(sorted(error_alone, key=lambda n: (error_alone[n], n)))
    tried, size, chunk = 0, 0, 1
    while True:
        if budget is not None and tried >= budget:
            return KeepSet(None, tried, order, pruned=False)
        size = min(size + chunk, len(order))
        tried += 1
        if passes(frozenset(order[:size])):
            break
        if size == len(order):
            return KeepSet(None, tried, order)
        chunk = chunk * 2 if tried >= 2 else 1
    keep = list(order[:size])
    for node in reversed(keep):
        if budget is not None and tried >= budget:
            return KeepSet(tuple(keep), tried, order, pruned=False)
        trial = [n for n in keep if n != node]
        tried += 1
        if passes(frozenset(trial)):
            keep = trial
    return KeepSet(tuple(keep), tried, order)


def bisect_prefix(topological: Sequence[str], passes: Passes) -> tuple[int | None, int]:
    """The fewest first nodes (topological order) whose keeping passes, by bisection as Polygraphy's ``debug
    precision`` does (it assumes a longer prefix never fails where a shorter passes); None if all of them fail.
    Returns (prefix length, oracle calls)."""
    tried = 1
    if not passes(frozenset(topological)):
        return None, tried
    lo, hi = 0, len(topological)  # lo fails (or is empty), hi passes
    tried += 1
    if passes(frozenset()):
        return 0, tried
    while hi - lo > 1:
        mid = (lo + hi) // 2
        tried += 1
        if passes(frozenset(topological[:mid])):
            hi = mid
        else:
            lo = mid
    return hi, tried
