"""Why does a host-bound case's median move between processes? Fresh processes under controlled conditions (issue 42).

    python tools/host_spread_probe.py --processes 6 --json probe.json      # the controller: starts the children
    python tools/host_spread_probe.py --child VARIANT                       # one fresh process (the controller's)

Why: between whole-tier nights the 268 host-bound latency cases (torch eager, ONNX Runtime with copies) moved by a
median 13-23 % and up to 2.8x, the 96 device-bound ones by <= 1.7 % (docs/nightly.md). On the H100 the same eager
case moved 4.1-6.7 ms over 5 fresh processes: the cause is a state of the process, not of the night. This probe
times the same launch-bound workloads (torchvision resnet18 eager fp16 batch 1, and a small CNN fp32 batch 1, random
weights on random inputs, wall clock per call with a device synchronize, as the suite's host clock does) in fresh
processes, round-robin over variants that each remove one suspect:

- ``default``: as the suite's worker would run it.
- ``fixed-layout``: PYTHONHASHSEED=0 and address-space randomization off (``setarch -R``): memory layout.
- ``one-core``: the process pinned to one CPU (``taskset``): CPU placement and migration between cores.
- ``gc-off``: Python's garbage collector frozen and off while timing.

Each child times every workload in 4 blocks 0.2 s apart (within-process spread) and records the SM clock (NVML),
its CPU and that CPU's MHz beside each block. The controller prints per variant and workload: the block medians'
within-process spread, and the between-process max/min of the process medians; the variant that shrinks the
between-process spread names the cause. Exit 0, or 2 without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VARIANTS = ("default", "fixed-layout", "one-core", "gc-off")
BLOCKS, CALLS, WARMUP = 4, 200, 50


def _cpu_mhz(cpu: int) -> float | None:
    """The current MHz of one CPU, from /proc/cpuinfo (a VM may report its nominal figure only)."""
    try:
        blocks = Path("/proc/cpuinfo").read_text().split("\n\n")
        for block in blocks:
            fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
            if int(fields.get("processor\t", fields.get("processor", "-1")).strip()) == cpu:
                return float(fields.get("cpu MHz\t\t", fields.get("cpu MHz", "nan")).strip())
    except (OSError, ValueError):
        return None
    return None


def _child(variant: str) -> dict[str, Any]:
    import gc

    import torch
    import torchvision

    nvml = handle = None
    try:
        import pynvml as nvml

        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]))
    except Exception:
        nvml = None
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    small = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(32, 10)).to(dev).eval()
    workloads = {
        "resnet18-fp16-bs1": (torchvision.models.resnet18().to(dev).half().eval(),
                              torch.randn(1, 3, 224, 224, device=dev).half()),
        "small-cnn-fp32-bs1": (small, torch.randn(1, 1, 8, 8, device=dev)),
    }
    out: dict[str, Any] = {"variant": variant, "pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)),
                           "workloads": {}}
    with torch.inference_mode():
        for name, (model, x) in workloads.items():
            for _ in range(WARMUP):
                model(x)
            torch.cuda.synchronize()
            blocks = []
            for _ in range(BLOCKS):
                if variant == "gc-off":
                    gc.collect()
                    gc.freeze()
                    gc.disable()
                times = []
                for _ in range(CALLS):
                    start = time.perf_counter()
                    model(x)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - start)
                if variant == "gc-off":
                    gc.enable()
                    gc.unfreeze()
                cpu = os.sched_getcpu() if hasattr(os, "sched_getcpu") else -1
                clock = None
                if nvml is not None:
                    try:
                        clock = float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
                    except Exception:
                        clock = None
                blocks.append({"median_ms": statistics.median(times) * 1e3,
                               "p90_ms": sorted(times)[int(0.9 * len(times))] * 1e3,
                               "cpu": cpu, "cpu_mhz": _cpu_mhz(cpu), "sm_clock_mhz": clock})
                time.sleep(0.2)
            out["workloads"][name] = blocks
    return out


def _command(variant: str, cpu: int) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    cmd = [sys.executable, __file__, "--child", variant]
    if variant == "fixed-layout":
        env["PYTHONHASHSEED"] = "0"
        cmd = ["setarch", os.uname().machine, "-R", *cmd]
    if variant == "one-core":
        cmd = ["taskset", "-c", str(cpu), *cmd]
    return cmd, env


def _spread(values: list[float]) -> float:
    return max(values) / min(values) - 1 if values and min(values) > 0 else float("nan")


def _table(children: list[dict[str, Any]]) -> str:
    lines = ["| variant | workload | processes | process medians (ms) | between-process max/min | "
             "within-process max/min (median over processes) | SM MHz seen | CPU MHz seen |",
             "|---|---|---|---|---|---|---|---|"]
    for variant in VARIANTS:
        runs = [c for c in children if c.get("variant") == variant and "workloads" in c]
        for workload in sorted({w for c in runs for w in c["workloads"]}):
            medians, within, sm, mhz = [], [], set(), set()
            for c in runs:
                blocks = c["workloads"][workload]
                values = [b["median_ms"] for b in blocks]
                medians.append(statistics.median(values))
                within.append(_spread(values))
                sm |= {b["sm_clock_mhz"] for b in blocks if b["sm_clock_mhz"]}
                mhz |= {round(b["cpu_mhz"]) for b in blocks if b["cpu_mhz"] and b["cpu_mhz"] == b["cpu_mhz"]}
            lines.append(f"| {variant} | {workload} | {len(runs)} | {', '.join(f'{m:.3f}' for m in medians)} | "
                         f"{_spread(medians):.1%} | {statistics.median(within):.1%} | "
                         f"{','.join(str(round(s)) for s in sorted(sm))} | {','.join(map(str, sorted(mhz)))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--processes", type=int, default=6, help="fresh processes per variant")
    parser.add_argument("--json", type=Path, help="written after every child, so a run cut short keeps its part")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no child after this many seconds")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child)))
        return 0
    children, cpus, started = [], sorted(os.sched_getaffinity(0)), time.monotonic()
    for i in range(args.processes):
        if time.monotonic() - started > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent after {i} rounds", file=sys.stderr)
            break
        for variant in VARIANTS:  # round-robin: a drift over the sitting hits every variant alike
            cmd, env = _command(variant, cpus[(i * 3 + 1) % len(cpus)])
            run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            try:
                children.append(json.loads(run.stdout.strip().splitlines()[-1]))
            except (json.JSONDecodeError, IndexError):
                children.append({"variant": variant, "error": run.stderr[-2000:]})
                print(f"{variant}: child failed: {run.stderr[-500:]}", file=sys.stderr)
            if args.json:
                args.json.write_text(json.dumps({"children": children}, indent=1))
    table = _table(children)
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"children": children, "table": table}, indent=1))
    return 0 if any("workloads" in c for c in children) else 2


if __name__ == "__main__":
    sys.exit(main())
