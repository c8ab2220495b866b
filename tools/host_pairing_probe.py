"""Does a reference timed beside a host-bound case track the host's slow mode? (issue 42, item 1 and 3)

    python tools/host_pairing_probe.py --processes 7 --seconds 30 --json pairing.json   # the controller
    python tools/host_pairing_probe.py --child VARIANT --seconds 30                     # one fresh process

Why: tools/host_spread_probe.py found that a launch-bound case's median moves because the host goes in and out of a
slow mode for seconds at a time (resnet18 eager fp16 bs1: blocks at 1.68-2.06 ms and 2.38-2.90 ms in one process,
0.2 s apart), not because of anything in the process. A median over one case's second of rounds then reports the
host's mode. A paired design would judge the case against a reference timed in the same seconds: if the reference
slows with the host, the ratio case/reference holds between processes where the median does not. Which reference
tracks it is the question: pure Python work on the CPU (the host's speed), tiny kernel launches with a synchronize
(the driver's launch path), or a synchronize round trip alone.

Each child builds the workloads once, then cycles for ``--seconds`` over short slots; in every slot each workload
runs a few calls (order rotated slot to slot), and the slot's median per workload is kept with its time. Workloads:

- ``resnet18``: torchvision resnet18 eager fp16 batch 1, random weights and inputs (host-bound, ~1.8 ms);
- ``small_cnn``: a 3-conv CNN fp32 batch 1 (host-bound, ~0.15 ms);
- ``cpu_ref``: a fixed pure-Python loop (no CUDA);
- ``launch_ref``: 20 tiny kernels (``add_``) then a synchronize;
- ``sync_ref``: one tiny kernel then a synchronize;
- ``graph``: resnet18 fp16 batch 1 as a CUDA graph replay timed with CUDA events (device-bound control).

Host-bound workloads are timed on the wall clock around a call and a synchronize, as the suite's host clock does.
The controller runs the children one after another (``default``; ``one-core``: pinned with ``taskset`` to one CPU),
and writes every slot's medians to the JSON; ``--analyse FILE`` prints, per workload, the between-process max/min of
the process medians and of the paired ratios (workload / reference, slot by slot), and the within-process
correlation of slot medians. Exit 0, or 2 without CUDA.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

CALLS = {"resnet18": 10, "small_cnn": 30, "cpu_ref": 30, "launch_ref": 20, "sync_ref": 30, "graph": 10}
REFERENCES = ("cpu_ref", "launch_ref", "sync_ref")
CASES = ("resnet18", "small_cnn", "graph")


def cpu_work() -> int:
    """A fixed piece of pure Python: the host's speed, no CUDA in it."""
    total = 0
    for i in range(3000):
        total += i * i % 7
    return total


def _child(seconds: float) -> dict[str, Any]:
    import torch
    import torchvision

    dev = torch.device("cuda")
    torch.manual_seed(0)
    r18 = torchvision.models.resnet18().to(dev).half().eval()
    x18 = torch.randn(1, 3, 224, 224, device=dev).half()
    nn = torch.nn
    cnn = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    cnn = cnn.to(dev).eval()
    xc = torch.randn(1, 1, 28, 28, device=dev)
    tiny = torch.zeros(16, device=dev)
    static_in = x18.clone()
    with torch.inference_mode():
        for _ in range(20):
            r18(x18)
            cnn(xc)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                r18(static_in)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = r18(static_in)
    torch.cuda.synchronize()
    del static_out

    def host_timed(fn: Any) -> Any:
        def run() -> float:
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            return time.perf_counter() - t0
        return run

    def launches() -> None:
        for _ in range(20):
            tiny.add_(1.0)

    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def graph_timed() -> float:
        start_ev.record()
        graph.replay()
        end_ev.record()
        end_ev.synchronize()
        return start_ev.elapsed_time(end_ev) / 1e3

    def cpu_timed() -> float:
        t0 = time.perf_counter()
        cpu_work()
        return time.perf_counter() - t0

    work = {"resnet18": host_timed(lambda: r18(x18)), "small_cnn": host_timed(lambda: cnn(xc)), "cpu_ref": cpu_timed,
            "launch_ref": host_timed(launches), "sync_ref": host_timed(lambda: tiny.add_(1.0)), "graph": graph_timed}
    names = list(work)
    slots: list[dict[str, float]] = []
    t_start = time.perf_counter()
    with torch.inference_mode():
        for name in names:  # warm-up
            for _ in range(20):
                work[name]()
        k = 0
        while time.perf_counter() - t_start < seconds:
            order = names[k % len(names):] + names[:k % len(names)]
            slot: dict[str, float] = {"t": time.perf_counter() - t_start}
            for name in order:
                slot[name] = statistics.median(work[name]() for _ in range(CALLS[name])) * 1e3
            slots.append(slot)
            k += 1
    return {"pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)), "slots": slots}


def _controller(processes: int, seconds: float) -> dict[str, Any]:
    children = []
    for i in range(processes):
        variant = "one-core" if i % 2 else "default"
        cmd = [sys.executable, __file__, "--child", variant, "--seconds", str(seconds)]
        if variant == "one-core":
            cmd = ["taskset", "-c", "1", *cmd]
        child = run_child(cmd, variant, seconds * 4 + 120)
        if child is not None:
            children.append(child)
            print(f"child {i} {variant}: {len(child['slots'])} slots", file=sys.stderr)
    return {"children": children}


def run_child(cmd: list[str], variant: str, timeout: float) -> dict[str, Any] | None:
    """One fresh process's JSON (its last line), marked with its variant; None (its stderr shown) where it failed."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    child = json.loads(done.stdout.strip().splitlines()[-1])
    child["variant"] = variant
    return dict(child)


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1.0 if values and min(values) > 0 else math.nan


def _corr(a: list[float], b: list[float]) -> float:
    if len(a) < 3:
        return math.nan
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    sa = math.sqrt(sum((x - ma) ** 2 for x in a))
    sb = math.sqrt(sum((y - mb) ** 2 for y in b))
    return sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True)) / (sa * sb) if sa and sb else math.nan


def analyse(data: dict[str, Any]) -> str:
    """Per variant and case: between-process spread of the process medians and of the paired ratios to each
    reference, and the median within-process correlation of log slot medians (case against reference)."""
    refs = " | ".join(f"/{r} max/min (corr)" for r in REFERENCES)
    lines = [f"| variant | case | processes | medians max/min | {refs} | fastest decile max/min |",
             "|---" * (5 + len(REFERENCES)) + "|"]
    for variant in sorted({c["variant"] for c in data["children"]}):
        kids = [c for c in data["children"] if c["variant"] == variant]
        for case in CASES:
            medians = [statistics.median(s[case] for s in c["slots"]) for c in kids]
            deciles = [sorted(s[case] for s in c["slots"])[len(c["slots"]) // 10] for c in kids]
            cells = []
            for ref in REFERENCES:
                ratios = [statistics.median(s[case] / s[ref] for s in c["slots"]) for c in kids]
                corrs = [_corr([math.log(s[case]) for s in c["slots"]], [math.log(s[ref]) for s in c["slots"]])
                         for c in kids]
                cells.append(f"{spread(ratios) * 100:.1f} % ({statistics.median(corrs):+.2f})")
            lines.append(f"| {variant} | {case} | {len(kids)} | {spread(medians) * 100:.1f} % | " + " | ".join(cells)
                         + f" | {spread(deciles) * 100:.1f} % |")
    return "\n".join(lines)


def run_probe(args: argparse.Namespace, analyse_run: Any, child: Any, controller: Any) -> int:
    """The probes' one flow (this one and tools/host_clock_probe.py): ``--analyse FILE`` prints a saved run's table;
    else, with CUDA, a child (one fresh process) prints its JSON, or the controller runs the children, saves
    ``--json`` and prints the table. ``child`` and ``controller`` take the parsed arguments. Exit 2 without CUDA."""
    if args.analyse:
        with open(args.analyse) as f:
            print(analyse_run(json.load(f)))
        return 0
    try:
        import torch
    except ImportError:
        return 2
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    if args.child:
        print(json.dumps(child(args)))
        return 0
    data = controller(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f)
    print(analyse_run(data))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", choices=("default", "one-core"))
    ap.add_argument("--processes", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--json")
    ap.add_argument("--analyse")
    args = ap.parse_args(argv)
    return run_probe(args, analyse, lambda a: _child(a.seconds), lambda a: _controller(a.processes, a.seconds))


if __name__ == "__main__":
    sys.exit(main())
