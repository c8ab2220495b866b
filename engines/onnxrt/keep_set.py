"""The smallest set of nodes an int8 cell that fails parity must keep in fp32 (``[models.NAME.int8] keep_fp32``).

The search is metrics/keep_set.py's (greedy on each node's effect alone, then pruned; Polygraphy's bisected prefix
beside it); the oracle is the suite's own quantizer (engines/onnx/quantize.py, ``nodes_to_exclude``) with the
calibration computed once and kept in a file, each candidate file run by ONNX Runtime as the cell runs it and judged
with the cell's tolerance. The ranking alone uses a cheaper approximation (``keep_in_fp32``: the node's inputs
given back in fp32 inside the all-int8 graph): it only orders the candidates, it never decides a verdict.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from engines.onnx.quantize import quantize_qdq
from engines.onnxrt.attribution import judge, keep_in_fp32, quantized_nodes, run
from metrics import Tolerance
from metrics.keep_set import bisect_prefix, greedy_keep_set


@dataclass(frozen=True)
class KeepSetResult:
    case: str
    model: str
    failure: str  # the all-int8 cell's figure, or that it passes
    candidates: int  # quantized nodes
    keep: tuple[str, ...] | None  # None: no set found (not even every node)
    prefix: int | None  # the bisected prefix's length
    recheck: str  # the set applied through keep_fp32, judged
    oracle_runs: int
    seconds: float

    @property
    def snippet(self) -> str:
        """What the user pastes into suite.toml."""
        names = ", ".join(f'"{n}"' for n in self.keep or ())
        return f"[models.{self.model}.int8]\nkeep_fp32 = [{names}]"


class Int8Oracle:
    """Whether the model quantized with a ``keep_fp32`` set passes parity (memoized; one calibration)."""

    def __init__(self, fp32_path: Path, calibration: Mapping[str, np.ndarray], parity: Mapping[str, np.ndarray],
                 tolerance: Tolerance, work: Path, model: str, options: Mapping[str, Any] | None = None) -> None:
        self.fp32_path, self.calibration, self.parity, self.tolerance = fp32_path, calibration, parity, tolerance
        self.work, self.model = work, model
        self.options = dict(options or {"method": "minmax", "per_channel": True})
        self.cache = work / f"{fp32_path.stem}-calibration.json"
        self.reference = run(fp32_path, parity, "ORT_DISABLE_ALL")
        self.calls = 0
        self._seen: dict[frozenset[str], tuple[bool, float]] = {}

    def quantize(self, keep: frozenset[str] | tuple[str, ...], dst: Path) -> Path:
        options = {**self.options, **({"keep_fp32": sorted(keep)} if keep else {})}
        quantize_qdq(self.fp32_path, dst, self.calibration, options, self.model, calibration_cache=self.cache)
        return dst

    def judge(self, keep: frozenset[str]) -> tuple[bool, float]:
        if keep not in self._seen:
            self.calls += 1
            path = self.quantize(keep, self.work / f"{self.fp32_path.stem}-trial.onnx")
            self._seen[keep] = judge(self.reference, run(path, self.parity), self.tolerance)
        return self._seen[keep]

    def __call__(self, keep: frozenset[str]) -> bool:
        return self.judge(keep)[0]


def find_keep_set(case: str, oracle: Int8Oracle, budget: int | None = None) -> KeepSetResult:
    """``budget``: the most quantizer runs the greedy search may make (the bisection's own come on top)."""
    started = time.perf_counter()
    ok, cosine = oracle.judge(frozenset())
    if ok:
        return KeepSetResult(case, oracle.model, f"passes int8 parity (cosine {cosine:.4f})", 0, (), 0, "-",
                             oracle.calls, time.perf_counter() - started)
    qdq = onnx.load(str(oracle.quantize((), oracle.work / f"{oracle.fp32_path.stem}-int8.onnx")))
    fp32 = onnx.load(str(oracle.fp32_path))
    candidates = quantized_nodes(qdq)
    alone = {}
    for name in candidates:
        try:
            worst = judge(oracle.reference, run(keep_in_fp32(qdq, fp32, [name]), oracle.parity), oracle.tolerance)[1]
        except Exception:  # the approximation cannot express this node (it only ranks): last in the order
            worst = float("nan")
        alone[name] = 1.0 - worst if worst == worst else 2.0  # NaN cosine: the least helpful
    found = greedy_keep_set(alone, oracle, budget)
    prefix, _ = bisect_prefix(candidates, oracle)
    recheck = "-"
    if found.nodes:
        path = oracle.work / f"{case}-keep.onnx"  # calibrated afresh, as the suite builds the cell
        quantize_qdq(oracle.fp32_path, path, oracle.calibration, {**oracle.options, "keep_fp32": list(found.nodes)},
                     oracle.model)
        passed, cos = judge(oracle.reference, run(path, oracle.parity), oracle.tolerance)
        recheck = f"{'passes' if passed else 'FAILS'} (cosine {cos:.4f})"
        if not found.pruned:
            recheck += f"; pruning stopped at the budget of {budget} runs"
    elif found.nodes is None and not found.pruned:
        recheck = f"no passing set within {budget} quantizer runs"
    return KeepSetResult(case, oracle.model, f"cosine {cosine:.4f}", len(candidates), found.nodes, prefix, recheck,
                         oracle.calls, time.perf_counter() - started)
