"""Pure-numpy metrics shared by all engine tests: parity, accuracy, latency, and the baseline gates.

Kept free of torch and of the rest of this repo so it can be unit-tested on
its own and reused by report tooling without any engine installed.
"""

from __future__ import annotations

from .accuracy import (
    AccuracyThreshold,
    AccuracyVerdict,
    judge_accuracy,
    topk_accuracy,
    topk_correct,
)
from .drift import DriftComparison, DriftFigure, compare_accuracy, compare_parity
from .latency import LatencySummary, PairedOverhead, TwoModes, paired_overhead, summarize_latency, two_modes
from .parity import compare_arrays, compare_outputs, rank_table
from .parity_report import ParityReport, RankStat, Tolerance
from .regression import LatencyComparison, compare_latency

__all__ = [
    "AccuracyThreshold",
    "AccuracyVerdict",
    "DriftComparison",
    "DriftFigure",
    "LatencyComparison",
    "LatencySummary",
    "PairedOverhead",
    "ParityReport",
    "RankStat",
    "Tolerance",
    "TwoModes",
    "compare_accuracy",
    "compare_arrays",
    "compare_latency",
    "compare_outputs",
    "compare_parity",
    "judge_accuracy",
    "paired_overhead",
    "rank_table",
    "summarize_latency",
    "topk_accuracy",
    "topk_correct",
    "two_modes",
]
