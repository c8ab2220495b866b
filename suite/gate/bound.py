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
plain rule whatever the CPUs did; a host-bound GPU case is judged only against its class's between-night model
(``class_noise``: 2 or more kept nights) and is excused when other people's processes kept its cores busy. With 2 or
more kept nights every class's between-run interval is the pooled one, so a case is judged from the third night on.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from metrics.host_pace import pace, paced_runs
from metrics.regression import MIN_POOLED, LatencyComparison, between_night_deviations, pooled_half_width
from suite.gate.baselines import LatencyBaseline, LatencyKey

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
    path of the same cell and batch is timed before its model path; see suite/hooks/parametrize.py)."""
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


#: A class of latency cases for the between-night noise model: (device kind, bound, engine, path), and the coarser
#: (device kind, bound) a class falls back to where its own cases give too few deviations.
NoiseClass = tuple[str, ...]


def noise_classes(device_kind: str, bound: str, engine: str, path: str) -> tuple[NoiseClass, NoiseClass]:
    """A case's class, finest first: host-bound torch eager on a GPU moves unlike host-bound ONNX Runtime replays."""
    return (device_kind, bound, engine, path), (device_kind, bound)


def class_noise(baseline: LatencyBaseline, confidence: float) -> dict[NoiseClass, tuple[float, int]]:
    """Each class's between-night half-width (a log ratio) and how many deviations it rests on, from the kept nights
    of every case of the class that has 2 or more of them (metrics.regression.pooled_half_width); a class with too few
    deviations has none. Learned anew from the baseline each run: the nights kept are the model.

    The quantile is the night's, not one case's: a class of m cases is judged m times a night, so each case's
    interval is the ``1 - (1 - confidence) / m`` quantile (Bonferroni). At 99 % per case, one H200's 37
    device-bound and 53 host-bound torch cases gave one false regression a night in two nights of six unchanged ones
    (+2.89 % against +-2.6 %, +54 % against +-49 %; docs/nightly.md "Host-paced")."""
    pools: dict[NoiseClass, list[float]] = {}
    cases: dict[NoiseClass, int] = {}
    for key, runs in baseline.samples.items():
        cls = baseline.classes.get(key)
        if len(runs) < 2 or cls is None:
            continue
        paced = paced_runs(runs, baseline.host_refs.get(key)) if cls == ("cuda", HOST) else None
        if paced is not None:  # its class is modelled as the gate judges it: host-paced where every run can be
            runs = paced[0]
        deviations = between_night_deviations([statistics.median(r) for r in runs])
        for name in noise_classes(cls[0], cls[1], key[1], key[4]):
            pools.setdefault(name, []).extend(deviations)
            cases[name] = cases.get(name, 0) + 1
    models = {}
    for name, deviations in pools.items():
        half = pooled_half_width(deviations, 1.0 - (1.0 - confidence) / cases[name])
        if half is not None:
            models[name] = (half, len(deviations))
    return models


def host_paced(record: Mapping[str, Any], baseline: LatencyBaseline,
               key: LatencyKey) -> tuple[list[list[float]], list[float]] | None:
    """A host-bound GPU case's baseline runs and current rounds at one host speed (metrics/host_pace.py): the gate
    compares these instead of raw seconds. None for any other case, or where a side lacks its host reference. The
    baseline must hold the case (suite/gate/latency.py asks only then)."""
    device = record.get("device")
    if record.get("bound") != HOST or not isinstance(device, str) or not device.startswith("cuda"):
        return None
    got = paced_runs(baseline.samples[key], baseline.host_refs.get(key))
    paced = None if got is None else pace(record["samples_s"], record.get("host_ref_s"), got[1])
    return None if paced is None else (got[0], paced)


def between_half(models: Mapping[NoiseClass, tuple[float, int]], record: Mapping[str, Any],
                 key: LatencyKey) -> tuple[float, NoiseClass] | None:
    """The half-width for this record's class (finest with a model first), and the class; None where none has one."""
    kind = "cuda" if str(record.get("device", "")).startswith("cuda") else "cpu"
    for name in noise_classes(kind, str(record.get("bound", HOST)), key[1], key[4]):
        if name in models:
            return models[name][0], name
    return None


def gate_rule(record: dict[str, Any], comparison: LatencyComparison, modeled: bool) -> LatencyComparison:
    """A host-bound (launch-bound) GPU case is judged only against its class's between-night model (``modeled``: 2
    or more kept nights gave its class one, ``between_half``): its median moved by up to 2.8x between processes on
    the H200s (issue 42), which neither one baseline run nor one case's few nights can bound. Without one, whatever
    the comparison found is inconclusive. CPU and device-bound cases keep the plain rule (docs/gating.md)."""
    if (record.get("bound") != HOST or not str(record.get("device", "")).startswith("cuda")
            or comparison.verdict == "inconclusive" or modeled):
        return comparison
    why = (f"host-bound on the GPU ({record.get('bound_why', 'launch-bound')}): a {comparison.change_pct:+.1f}% "
           f"change against {comparison.baseline_runs} baseline run(s) with no between-night model of its class "
           f"cannot be told from the launch speed of one process; judged once 2 or more kept nights give its class "
           f"{MIN_POOLED} deviations (--latency-baseline last:K; docs/gating.md 'Launch-bound cases')")
    return replace(comparison, verdict="inconclusive", reason=why)
