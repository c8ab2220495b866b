"""Is a latency case's time the device's or the host's? Classified from what the run measured.

Why it matters: a device-bound case (the GPU is never idle between the case's first and last kernel)
has a median set by the GPU; it moved under 1-3 % between processes on the H100. A host-bound case
(eager small batches: the GPU waits for Python to launch each kernel) has a median set by the host's
launch speed, which moved 20-70 % between processes on the same machine (docs/gating.md). The gate
treats the two differently (suite/gate/latency.py), so every latency record says which it is, and why.

The rule, in order (thresholds from the H100 study in docs/gating.md "Launch-bound cases": eager cases at
1.01-1.03x their replay moved at most 0.5 % with every CPU busy; one at 1.09x moved +88 %, so the line is
at 1.05x):

* CPU device, or the ``all`` path (host arrays: copies and Python in every round): host;
* ``graph`` (CUDA graph replay) timed with CUDA events: device. One launch; the device runs the rest;
* ``graph`` timed on the host (ONNX Runtime: a host timer around ``run_with_iobinding``, and ONNX Runtime
  synchronizes the stream after every replay, microsoft/onnxruntime#28686): device from HOST_TIMED_REPLAY_MIN_MS
  up, else host: below it ONNX Runtime's own per-run host path is a share of the median that moves between
  processes;
* ``model`` (device-resident, eager launches): compared with the same cell's device-bound graph replay at the
  same batch when the run has it: device when eager takes at most EAGER_GRAPH_MAX times the replay (the
  launches hide behind the kernels), else host;
* ``model`` without a graph replay (ORT IO binding, inductor, TensorRT): NVML's utilisation over the
  case, device when at least UTILISATION_MIN percent (NVML: share of time a kernel was running);
* nothing to decide with: host, the cautious answer (busy can then excuse it, and it is not judged).

How the gate treats each class (``gate_rule`` and suite/gate/latency.py): a device-bound case is judged by the
plain rule whatever the CPUs did; a host-bound GPU case is judged only against HOST_MIN_BASELINE_RUNS or more
baseline runs (fewer: a change is inconclusive) and is excused when other processes kept the CPUs busy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from metrics.regression import LatencyComparison

DEVICE, HOST = "device", "host"
EAGER_GRAPH_MAX = 1.05
UTILISATION_MIN = 90.0
#: A replay timed on the host is device-bound from this median up. On two H200s (2026-11-26/27, 56 ONNX Runtime
#: CUDA-graph cases, 5 pairs of processes; docs/gpu.md) every case of 2 ms or more moved at most 1.8 % between two
#: processes, and cases of 0.04-1.2 ms up to 5.9 %: ONNX Runtime's per-run host path moved by 10-25 µs.
HOST_TIMED_REPLAY_MIN_MS = 2.0


def host_timed(record: Mapping[str, Any]) -> bool:
    """Was the case timed with a host clock? Every clock a record names starts with its timer ("host perf_counter
    ..." or "cuda events ...": suite/timing.py, the engines' ``prepare_path``)."""
    return str(record.get("clock", "")).startswith("host")


def classify(record: Mapping[str, Any], earlier: Iterable[Mapping[str, Any]]) -> tuple[str, str]:
    """(``device`` | ``host``, why) for a latency record; ``earlier`` are the run's records so far (the graph
    path of the same cell and batch is timed before its model path; see suite/parametrize.py)."""
    if not str(record.get("device", "cpu")).startswith("cuda"):
        return HOST, "CPU: the host runs the model"
    path = record.get("path")
    if path == "all":
        return HOST, "host arrays: copies and Python in every round"
    median = float(record["median_ms"])
    if path == "graph":
        if not host_timed(record):
            return DEVICE, "CUDA graph replay: one launch, the device runs the rest"
        if median >= HOST_TIMED_REPLAY_MIN_MS:
            return DEVICE, (f"CUDA graph replay timed on the host, {median:.3g} ms >= {HOST_TIMED_REPLAY_MIN_MS:g} "
                            "ms: the device's time outweighs the engine's per-run host path")
        return HOST, (f"CUDA graph replay timed on the host, {median:.3g} ms < {HOST_TIMED_REPLAY_MIN_MS:g} ms: the "
                      "engine's per-run host path (a stream synchronization every run) is a share of it")
    for other in earlier:
        if (other.get("kind") == "latency" and other.get("path") == "graph" and other.get("cell") == record.get("cell")
                and other.get("batch_size") == record.get("batch_size") and other.get("shape") == record.get("shape")
                and other.get("bound", DEVICE) == DEVICE):
            ratio = median / float(other["median_ms"])
            if ratio <= EAGER_GRAPH_MAX:
                return DEVICE, f"eager {ratio:.2f}x its CUDA-graph replay (<= {EAGER_GRAPH_MAX:g}x)"
            return HOST, f"eager {ratio:.2f}x its CUDA-graph replay (> {EAGER_GRAPH_MAX:g}x): launch-bound"
    util = (record.get("gpu") or {}).get("mean_sm_util_pct")
    if util is not None:
        state = DEVICE if float(util) >= UTILISATION_MIN else HOST
        sign = ">=" if state == DEVICE else "<"
        return state, f"NVML utilisation {float(util):.0f}% {sign} {UTILISATION_MIN:g}% over the case"
    return HOST, "no CUDA-graph replay and no NVML figure to tell: counted host-bound"


#: A host-bound GPU case is judged only against this many baseline runs or more (docs/gating.md "Launch-bound
#: cases": on the H100, 15 of 100 A/A trials of such cases read as regressions against one run, 0 of 25 against 4).
HOST_MIN_BASELINE_RUNS = 4
#: ... unless the change is larger than a host-bound case's median moved between quiet processes there (58 %).
HOST_MAX_DRIFT = 0.60


def gate_rule(record: dict[str, Any], comparison: LatencyComparison) -> LatencyComparison:
    """A host-bound (launch-bound) GPU case's change against fewer than HOST_MIN_BASELINE_RUNS runs is
    inconclusive: its median moved by up to 58 % between idle processes on an H100 (the process's launch speed),
    which one baseline run cannot separate from an upgrade's effect. Against several runs the run-to-run
    interval absorbs it, and the case is judged like any other; so is a change beyond HOST_MAX_DRIFT. CPU cases
    are all host-bound and keep the plain rule (docs/gating.md)."""
    if (record.get("bound") != "host" or not str(record.get("device", "")).startswith("cuda")
            or comparison.verdict not in ("regression", "improvement")
            or comparison.baseline_runs >= HOST_MIN_BASELINE_RUNS
            or not 1 / (1 + HOST_MAX_DRIFT) < comparison.ratio < 1 + HOST_MAX_DRIFT):
        return comparison
    why = (f"host-bound on the GPU ({record.get('bound_why', 'launch-bound')}): a {comparison.change_pct:+.1f}% "
           f"{comparison.verdict} against {comparison.baseline_runs} baseline run(s) cannot be told from the launch "
           f"speed of one process (up to {HOST_MAX_DRIFT:.0%} between processes on an H100); judged against "
           f"--latency-baseline last:K with K >= {HOST_MIN_BASELINE_RUNS} (docs/gating.md 'Launch-bound cases')")
    return replace(comparison, verdict="inconclusive", reason=why)
