"""Do NVML's queries stall a CUDA process's work? The lead for the 8 ms stalls, tested.

    python tools/nvml_stall_probe.py [--device cuda:0] [--seconds 3] [--json probe.json]

Why (docs/gpu.md, the twelfth sitting): in 39 latency records of the sittings' runs the rounds fell in two modes,
in 19 of them a slow round every 7.6-8.0 ms. The suite samples NVML beside the tests: each worker's memory meter
(suite/gpu_memory.py) asks for the device's processes every 100 ms, the latency device sampler (suite/timing.py)
asks for memory, utilization and the SM clock every 20 ms, and a night's nvidia-smi every second. A per-process
NVML query was seen to hold the driver's lock for milliseconds and block another thread's GPU submissions
(flightlessmango/MangoHud#2104, 4.5 ms a call).

Two workloads, each timed for --seconds under each sampler in turn: ``launches`` (200 tiny kernel launches and a
sync, wall clock: a host-bound case) and ``graph`` (one CUDA graph replay of a depthwise/pointwise fp16 convolution
stack at batch 32 on random inputs, CUDA events around the replay, as the suite's graph path times it). Samplers:
none; this process's per-process query every 100 ms (the meter) and every 10 ms; the device sampler's queries every
20 ms; another process's per-process query every 10 ms (the other worker's meter); none again (drift). Each line:
rounds, median, p99, max, the share of rounds over 1.3x the median, ``metrics.latency.two_modes``, and the
sampler's own call times. Prints one markdown table; exit status 0, or 2 without CUDA or NVML.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from metrics.latency import two_modes  # noqa: E402
from suite.gpu_memory import nvml_handle, running_processes  # noqa: E402

#: (name, where the queries run, interval s, which queries)
SAMPLERS: tuple[tuple[str, str, float, str], ...] = (
    ("none", "-", 0.0, "-"),
    ("meter 100 ms", "this process", 0.1, "processes"),
    ("meter 10 ms", "this process", 0.01, "processes"),
    ("device sampler 20 ms", "this process", 0.02, "device"),
    ("other process 10 ms", "another process", 0.01, "processes"),
    ("none again", "-", 0.0, "-"),
)


def nvml_queries(device: str, which: str) -> Callable[[], object]:
    """One sampler tick: the memory meter's per-process query (suite.gpu_memory.running_processes), or the device
    sampler's memory, utilization and SM clock queries (suite/timing.py; it also asks the clocks' reasons). The
    handle is the suite's (suite.gpu_memory.nvml_handle: NVML numbers the GPUs as the host does)."""
    nvml, handle = nvml_handle(device)
    if which == "processes":
        return lambda: running_processes(nvml, handle)
    return lambda: (nvml.nvmlDeviceGetMemoryInfo(handle), nvml.nvmlDeviceGetUtilizationRates(handle),
                    nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))


def sample_loop(query: Callable[[], object], interval_s: float, stop: threading.Event, took: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        query()
        took.append(time.perf_counter() - start)
        stop.wait(interval_s)


def summary(rounds_s: list[float], took_s: list[float]) -> dict[str, Any]:
    """One condition's figures (ms): the rounds' median and tail, slow rounds, two modes, the queries' own time."""
    x = np.asarray(rounds_s) * 1e3
    median = float(np.median(x))
    modes = two_modes(rounds_s)
    return {"rounds": int(x.size), "median_ms": median, "p99_ms": float(np.percentile(x, 99)),
            "max_ms": float(x.max()), "slow_share": float(np.mean(x > 1.3 * median)),
            "two_modes": None if modes is None else modes.explain(),
            "queries": len(took_s),
            "query_median_ms": float(np.median(took_s) * 1e3) if took_s else None,
            "query_max_ms": float(np.max(took_s) * 1e3) if took_s else None}


def workloads(device: str) -> dict[str, Callable[[], float]]:
    """Each workload's one round, returning its seconds."""
    import torch

    torch.manual_seed(0)
    tiny = torch.randn(16, device=device)

    def launches() -> float:
        start = time.perf_counter()
        for _ in range(200):
            tiny.add_(1e-3)
        torch.cuda.synchronize(device)
        return time.perf_counter() - start

    layers: list[torch.nn.Module] = []
    for _ in range(8):
        layers += [torch.nn.Conv2d(96, 96, 3, padding=1, groups=96), torch.nn.Conv2d(96, 96, 1), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers).to(device).half().eval()
    feed = torch.randn(32, 96, 56, 56, device=device, dtype=torch.float16)
    stream = torch.cuda.Stream(device)
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(3):
            net(feed)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        net(feed)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def replay() -> float:
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    return {"launches": launches, "graph": replay}


def run_condition(run_round: Callable[[], float], seconds: float, device: str,
                  sampler: tuple[str, str, float, str]) -> dict[str, Any]:
    name, where, interval, which = sampler
    stop, took = threading.Event(), []
    thread, other = None, None
    if where == "this process":
        thread = threading.Thread(target=sample_loop, args=(nvml_queries(device, which), interval, stop, took),
                                  daemon=True)
        thread.start()
    elif where == "another process":
        other = subprocess.Popen([sys.executable, __file__, "--sampler-only", which, "--interval", str(interval),
                                  "--seconds", str(seconds + 1.0), "--device", device],
                                 stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)  # its NVML is up before the rounds start
    for _ in range(20):
        run_round()
    rounds: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        rounds.append(run_round())
    stop.set()
    if thread is not None:
        thread.join()
    if other is not None:
        out, _ = other.communicate(timeout=30)
        took = json.loads(out.strip().splitlines()[-1])
    return {"sampler": name, **summary(rounds, took)}


def sampler_only(which: str, interval: float, seconds: float, device: str) -> None:
    """The other process: queries for ``seconds``, then their durations as one JSON line."""
    stop, took = threading.Event(), []
    query = nvml_queries(device, which)
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    sample_loop(query, interval, stop, took)
    print(json.dumps(took))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per workload and sampler")
    parser.add_argument("--json", help="write every condition's figures here")
    parser.add_argument("--sampler-only", help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=float, default=0.01, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sampler_only:
        sampler_only(args.sampler_only, args.interval, args.seconds, args.device)
        return 0
    try:
        import pynvml
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        pynvml.nvmlInit()
    except Exception as exc:
        print(f"nvml_stall_probe needs a CUDA device and NVML: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    torch.cuda.set_device(args.device)
    results = []
    print("| workload | sampler | rounds | median ms | p99 ms | max ms | rounds > 1.3x median | two modes | "
          "queries | query median / max ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for workload, run_round in workloads(args.device).items():
        for sampler in SAMPLERS:
            row = {"workload": workload, **run_condition(run_round, args.seconds, args.device, sampler)}
            results.append(row)
            query = ("-" if row["query_median_ms"] is None
                     else f"{row['query_median_ms']:.3f} / {row['query_max_ms']:.3f}")
            print(f"| {workload} | {row['sampler']} | {row['rounds']} | {row['median_ms']:.3f} | {row['p99_ms']:.3f} "
                  f"| {row['max_ms']:.3f} | {100 * row['slow_share']:.2f} % | {row['two_modes'] or '-'} "
                  f"| {row['queries']} | {query} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(args.device),
                                               "torch": torch.__version__, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
