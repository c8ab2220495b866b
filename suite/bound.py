"""Is a latency case's time the device's or the host's? Classified from what the run measured.

Why it matters: a device-bound case (the GPU is never idle between the case's first and last kernel)
has a median set by the GPU; it moved under 1-3 % between processes on the H100. A host-bound case
(eager small batches: the GPU waits for Python to launch each kernel) has a median set by the host's
launch speed, which moved 20-70 % between processes on the same machine (docs/gating.md). The gate
treats the two differently (suite/gate_plugin.py), so every latency record says which it is, and why.

The rule, in order (thresholds from the H100 measurements in docs/gating.md):

* CPU device, or the ``all`` path (host arrays: copies and Python in every round): host;
* ``graph`` (CUDA graph replay): device. One launch; the device runs the rest;
* ``model`` (device-resident, eager launches): compared with the same cell's graph replay at the same
  batch when the run has it: device when eager takes at most EAGER_GRAPH_MAX times the replay (the
  launches hide behind the kernels), else host;
* ``model`` without a graph replay (ORT IO binding, inductor, TensorRT): NVML's utilisation over the
  case, device when at least UTILISATION_MIN percent (NVML: share of time a kernel was running);
* nothing to decide with: host, the cautious answer (busy can then excuse it, and it is not judged).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DEVICE, HOST = "device", "host"
EAGER_GRAPH_MAX = 1.10
UTILISATION_MIN = 90.0


def classify(record: Mapping[str, Any], earlier: Iterable[Mapping[str, Any]]) -> tuple[str, str]:
    """(``device`` | ``host``, why) for a latency record; ``earlier`` are the run's records so far (the graph
    path of the same cell and batch is timed before its model path; see suite/plugin.py)."""
    if not str(record.get("device", "cpu")).startswith("cuda"):
        return HOST, "CPU: the host runs the model"
    path = record.get("path")
    if path == "all":
        return HOST, "host arrays: copies and Python in every round"
    if path == "graph":
        return DEVICE, "CUDA graph replay: one launch, the device runs the rest"
    median = float(record["median_ms"])
    for other in earlier:
        if (other.get("kind") == "latency" and other.get("path") == "graph" and other.get("cell") == record.get("cell")
                and other.get("batch_size") == record.get("batch_size") and other.get("shape") == record.get("shape")):
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
