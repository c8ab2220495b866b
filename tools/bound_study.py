"""Device- vs host-bound latency cases across processes: how each class moves, what a control workload
buys, and whether a busy CPU can excuse a device-bound case. The measurements behind suite/gate/bound.py's
rule and the gate's treatment of each class (docs/gating.md "Launch-bound cases").

    python3 tools/bound_study.py --device cuda:0 --processes 5 --hog-processes 2 --json study.json
    python3 tools/bound_study.py --from-json study.json            # the tables again

Each child process loads ResNet-50 through the suite's own machinery (suite-gpu.toml: channels-last torch,
ONNX Runtime CUDA EP) and times every case with the suite's TimedCall: torch fp16/fp32 and ONNX Runtime
fp16 at batch 1/32/256, CUDA-graph replay first, then the device-resident eager path (as the suite orders
them). Right before each case it times two controls in the same process: a fixed Python workload (the
host's speed) and 300 launches of a one-element kernel plus a synchronize (the launch path's speed).
``--hog-processes`` more children run while other processes keep every CPU busy.

Analysis: each case classified by suite.gate.bound.classify; A/A trials between the quiet processes (every
ordered pair: one run is the baseline, another the current run) judged by the suite's compare_latency at
5 % / 99 %, (a) as they are, (b) with the current samples scaled by the ratio of the two processes'
control medians (the control rule), (c) against the other K-1 runs as baseline (last:K), (d) with the
suite's own class rule (suite.gate.bound.gate_rule) on one baseline run; and, for the
hogged runs, the change of each case's median against the quiet runs' median.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from metrics.distributions import binomial_interval  # noqa: E402  (after the path insert)
from metrics.regression import compare_latency  # noqa: E402

ENGINES = (("torch", "fp16"), ("torch", "fp32"), ("onnxruntime", "fp16"))
BATCHES = (1, 32, 256)
PATHS = ("graph", "model")


def host_control_ms() -> float:
    """A fixed pure-Python workload: the speed at which this process's host thread runs Python."""
    def once() -> float:
        start = time.perf_counter()
        total = 0
        for i in range(20000):
            total += i % 7
        return (time.perf_counter() - start) * 1e3

    return statistics.median(once() for _ in range(7))


def launch_control_ms(device: str) -> float:
    """300 launches of a one-element kernel and a synchronize: the speed of the launch path eager uses."""
    import torch

    x = torch.zeros(1, device=device)

    def once() -> float:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(300):
            x.add_(1.0)
        torch.cuda.synchronize(device)
        return (time.perf_counter() - start) * 1e3

    once()
    return statistics.median(once() for _ in range(7))


def child(args: argparse.Namespace) -> dict[str, Any]:
    from core.cache import ArtifactCache
    from core.inputs import synthetic_feed
    from suite.config import load_config
    from suite.gate.bound import classify
    from suite.session import Cell, SuiteSession

    config = load_config(args.suite_config).select([args.model], sorted({e for e, _ in ENGINES}),
                                                   sorted({p for _, p in ENGINES}))
    session = SuiteSession(config, ArtifactCache(args.engine_cache), args.device)
    model = session.model(args.model)
    cases: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for engine_name, precision in ENGINES:
        cell = Cell(args.model, engine_name, precision)
        engine = session.engine(cell)
        for batch in BATCHES:
            feed = synthetic_feed(model.inputs, batch, "uniform", seed=batch)
            for path in PATHS:
                try:
                    timed = session.timed_call(cell, engine, feed, path)
                except Exception as exc:  # a path this engine cannot time (said in the table)
                    cases.append({"cell": cell.id, "batch": batch, "path": path, "error": str(exc)[:200]})
                    continue
                control = {"host_ms": host_control_ms(), "launch_ms": launch_control_ms(args.device)}
                with session.gpu_monitor(cell) as monitor:
                    for _ in range(args.warmup + args.rounds):
                        timed()
                samples = list(timed.samples_s[args.warmup:])
                record = {"kind": "latency", "cell": cell.id, "batch_size": batch, "path": path,
                          "device": args.device, "median_ms": statistics.median(samples) * 1e3,
                          "gpu": monitor.summary()}
                bound, why = classify(record, records)
                records.append(record)
                util = record["gpu"].get("mean_sm_util_pct")
                cases.append({"cell": cell.id, "batch": batch, "path": path, "samples_s": samples,
                              "median_ms": record["median_ms"], "util_pct": util, "bound": bound, "why": why,
                              **control})
    return {"index": args.index, "hogs": args.hogs, "cases": cases}


def run_children(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    plan = [0] * args.processes + [args.hogs_per_process] * args.hog_processes
    for index, hogs in enumerate(plan):
        hog_procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        try:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
                path = Path(out.name)
            cmd = [sys.executable, __file__, "--child", "--index", str(index), "--hogs", str(hogs), "--out", str(path),
                   "--device", args.device, "--model", args.model, "--suite-config", args.suite_config,
                   "--engine-cache", args.engine_cache, "--rounds", str(args.rounds), "--warmup", str(args.warmup)]
            started = time.time()
            subprocess.run(cmd, check=True)
            results.append(json.loads(path.read_text()))
            print(f"process {index} ({hogs} CPU hogs): {time.time() - started:.0f} s", flush=True)
        finally:
            for hog in hog_procs:
                hog.kill()
    return results


def _key(case: dict[str, Any]) -> tuple[str, int, str]:
    return case["cell"], case["batch"], case["path"]


def reclassify(results: list[dict[str, Any]]) -> None:
    """Class every case again with today's suite.gate.bound.classify, from what each process measured (in the order
    it timed them, graph replay first), so that a saved study judges a changed rule."""
    from suite.gate.bound import classify

    for r in results:
        records: list[dict[str, Any]] = []
        for c in r["cases"]:
            if "samples_s" not in c:
                continue
            record = {"kind": "latency", "cell": c["cell"], "batch_size": c["batch"], "path": c["path"],
                      "device": "cuda:0", "median_ms": c["median_ms"], "gpu": {"mean_sm_util_pct": c["util_pct"]}}
            c.setdefault("bound_at_run", c["bound"])
            c["bound"], c["why"] = classify(record, records)
            records.append(record)


RULES = ("plain", "suite_rule", "host_control", "launch_control", "last_k")


def analyse(results: list[dict[str, Any]], threshold: float = 0.05, confidence: float = 0.99) -> dict[str, Any]:
    from suite.gate.bound import gate_rule

    reclassify(results)
    quiet = [r for r in results if not r["hogs"]]
    hogged = [r for r in results if r["hogs"]]
    by_case: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in quiet:
        for c in r["cases"]:
            if "samples_s" in c:
                by_case.setdefault(_key(c), []).append(c)
    rows = []
    for key, runs in sorted(by_case.items()):
        bounds = [c["bound"] for c in runs]
        bound = max(set(bounds), key=bounds.count)
        medians = [c["median_ms"] for c in runs]
        plain, rule, host_ctl, launch_ctl, last_k = [], [], [], [], []
        for j, cur in enumerate(runs):
            others = [b for i, b in enumerate(runs) if i != j]
            as_record = {"bound": bound, "bound_why": cur["why"], "device": "cuda:0"}
            for base in others:
                comparison = compare_latency(base["samples_s"], cur["samples_s"], threshold, confidence)
                plain.append(comparison.verdict)
                rule.append(gate_rule(as_record, comparison, modeled=False).verdict)  # one run: no model
                for out, ctl in ((host_ctl, "host_ms"), (launch_ctl, "launch_ms")):
                    scale = base[ctl] / cur[ctl]
                    out.append(compare_latency(base["samples_s"], [s * scale for s in cur["samples_s"]], threshold,
                                               confidence).verdict)
            if len(others) >= 2:
                last_k.append(compare_latency([b["samples_s"] for b in others], cur["samples_s"], threshold,
                                              confidence).verdict)
        quiet_median = statistics.median(medians)
        hog_change = [100 * (c["median_ms"] / quiet_median - 1) for r in hogged for c in r["cases"]
                      if "samples_s" in c and _key(c) == key]
        rows.append({"case": f"{key[0]} bs{key[1]} {key[2]}", "bound": bound, "why": runs[0]["why"],
                     "median_ms": medians, "spread_pct": 100 * (max(medians) / min(medians) - 1),
                     "util_pct": [c["util_pct"] for c in runs],
                     "corr_launch": _corr(medians, [c["launch_ms"] for c in runs]),
                     "corr_host": _corr(medians, [c["host_ms"] for c in runs]),
                     "false_alarms": {"plain": _count(plain), "suite_rule": _count(rule),
                                      "host_control": _count(host_ctl),
                                      "launch_control": _count(launch_ctl), "last_k": _count(last_k)},
                     "hogged_change_pct": hog_change})
    classes: dict[str, dict[str, Any]] = {}
    for bound in ("device", "host"):
        chosen = [r for r in rows if r["bound"] == bound]
        classes[bound] = {"cases": len(chosen)}
        for rule in RULES:
            k = sum(r["false_alarms"][rule]["alarms"] for r in chosen)
            n = sum(r["false_alarms"][rule]["trials"] for r in chosen)
            lo, hi = binomial_interval(k, n) if n else (math.nan, math.nan)
            classes[bound][rule] = {"alarms": k, "trials": n, "ci95": [lo, hi]}
        changes = [abs(x) for r in chosen for x in r["hogged_change_pct"]]
        classes[bound]["hogged_max_abs_change_pct"] = max(changes) if changes else None
    return {"rows": rows, "classes": classes, "processes": len(quiet), "hogged_processes": len(hogged)}


def _count(verdicts: list[str]) -> dict[str, Any]:
    return {"alarms": sum(v == "regression" for v in verdicts), "trials": len(verdicts),
            "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))}}


def _corr(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3 or statistics.pstdev(a) == 0 or statistics.pstdev(b) == 0:
        return None
    return statistics.correlation(a, b)


def markdown(analysis: dict[str, Any]) -> str:
    lines = [f"{analysis['processes']} quiet processes, {analysis['hogged_processes']} with every CPU busy; A/A "
             "trials between quiet processes at 5% / 99%", "",
             "| case | class (why) | medians ms | spread | NVML util % | false alarms: plain / suite rule / host ctl / "
             "launch ctl / last:K | busy CPUs moved |", "|---|---|---|---|---|---|---|"]
    for r in analysis["rows"]:
        fa = r["false_alarms"]
        alarms = " / ".join(f"{fa[k]['alarms']}/{fa[k]['trials']}" for k in RULES)
        util = ", ".join("-" if u is None else f"{u:.0f}" for u in r["util_pct"])
        moved = ", ".join(f"{x:+.1f}%" for x in r["hogged_change_pct"]) or "-"
        lines.append(f"| {r['case']} | {r['bound']} ({r['why']}) | {', '.join(f'{m:.3f}' for m in r['median_ms'])} | "
                     f"{r['spread_pct']:.1f}% | {util} | {alarms} | {moved} |")
    lines += ["", "| class | cases | plain | suite rule | host control | launch control | last:K | max change, busy "
              "CPUs |", "|---|---|---|---|---|---|---|---|"]
    for bound, c in analysis["classes"].items():
        cells = []
        for rule in RULES:
            x = c[rule]
            rate = "-" if not x["trials"] else f"{x['alarms']}/{x['trials']} ({100 * x['alarms'] / x['trials']:.0f}%)"
            cells.append(rate)
        moved = "-" if c["hogged_max_abs_change_pct"] is None else f"{c['hogged_max_abs_change_pct']:.1f}%"
        lines.append(f"| {bound} | {c['cases']} | {' | '.join(cells)} | {moved} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0", help="the GPU to time on (default cuda:0)")
    parser.add_argument("--model", default="resnet50", help="a [models.NAME] of --suite-config (default resnet50)")
    parser.add_argument("--suite-config", default=str(ROOT / "suite-gpu.toml"),
                        help="suite config (default suite-gpu.toml)")
    parser.add_argument("--engine-cache", default=str(ROOT / ".engine-cache"),
                        help="engine cache (default .engine-cache)")
    parser.add_argument("--processes", type=int, default=5, help="quiet processes, each timing every case (default 5)")
    parser.add_argument("--hog-processes", type=int, default=2, help="processes timing with every CPU busy (default 2)")
    parser.add_argument("--hogs-per-process", type=int, default=16, help="busy loops while a hogged process times")
    parser.add_argument("--rounds", type=int, default=60, help="timed rounds per case (default 60)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed rounds before them (default 10)")
    parser.add_argument("--json", default=None, help="write every sample and the table as JSON")
    parser.add_argument("--from-json", default=None, help="print the table of an earlier --json file, timing nothing")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--hogs", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        Path(args.out).write_text(json.dumps(child(args)))
        return 0
    results = json.loads(Path(args.from_json).read_text())["results"] if args.from_json else run_children(args)
    analysis = analyse(results)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "analysis": analysis}))
    print(markdown(analysis))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
