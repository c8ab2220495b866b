"""Measure the latency gate's false-alarm rate (A/A) and its detection rate (injected slowdown) on real
timings of a real engine, on the machine it runs on.

    .venv/bin/python tools/gate_calibration.py --model digits_cnn --engine onnxruntime --batch 1
    python3 tools/gate_calibration.py --device cuda:0 --model resnet18 --engine torch --batch 32 --path model

Protocol (why: a nightly comparison is one process's run against another process's run, and most of
the noise that matters is between processes: thread placement, clocks, allocator state):

* ``--workers`` W fresh processes, one after the other; each builds/loads the engine through the
  suite's own machinery, warms up, then times ``--runs`` runs of ``--rounds`` rounds each with the
  suite's ``timed_call``, alternating plain runs and runs slowed by ``--slowdown`` through the same
  wrapper as ``--inject-slowdown`` (order swapped every other worker);
* A/A trials: plain run r of worker i (baseline) against plain run r of worker j, for all i != j;
  detection trials: plain run r of worker i against slowed run r of worker j, for all i != j;
  same-process A/A (consecutive plain runs of one worker) is reported apart, as the optimistic case;
* a trial "alarms" when ``compare_latency`` says ``regression`` at ``--threshold``.

Trials share processes, so they are not independent: the Clopper-Pearson intervals printed treat
them as if they were and are optimistic. The run-to-run spread of the medians is printed too: when
it is well above threshold/4, no single-run comparison can meet both targets on that case.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
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


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One process: load the engine, then time the runs. Returns per-run samples."""
    from core.cache import ArtifactCache
    from core.inputs import synthetic_feed
    from suite.config import load_config
    from suite.gate.cpu_meter import CpuMeter
    from suite.gate.inject import SlowedCall
    from suite.session import Cell, SuiteSession

    config = load_config(args.suite_config).select([args.model], [args.engine], [args.precision])
    session = SuiteSession(config, ArtifactCache(args.engine_cache), args.device)
    cell = Cell(args.model, args.engine, args.precision)
    engine = session.engine(cell)
    # Synthetic inputs, the same in every process: no dataset package needed on the machine measured.
    feed = synthetic_feed(session.model(args.model).inputs, args.batch, "uniform", seed=args.batch)
    warm = session.timed_call(cell, engine, feed, args.path)
    for _ in range(args.warmup):
        warm()
    injected: dict[str, Any] = {}
    slowed_engine = None
    if args.inject_kernel:  # the slowed runs time an engine that launches one more, real kernel per inference
        slowed_engine, injected = kernel_slowed_engine(engine, args.precision, args.slowdown,
                                                       _median(list(warm.samples_s)))
        check = session.timed_call(cell, slowed_engine, feed, args.path)
        for _ in range(args.warmup):
            check()
        injected["measured_fraction"] = _median(list(check.samples_s)) / _median(list(warm.samples_s)) - 1.0
    order = ["plain", "slowed"] if args.index % 2 == 0 else ["slowed", "plain"]
    runs = []
    for r in range(args.runs):
        kind = order[r % 2]
        timed: Any = session.timed_call(cell, engine, feed, args.path)
        if kind == "slowed" and slowed_engine is not None:
            timed = session.timed_call(cell, slowed_engine, feed, args.path)
        elif kind == "slowed":
            timed = SlowedCall(timed, args.slowdown)
        meter = CpuMeter()
        warmup = max(1, args.rounds // 10)  # as in the test: warm-up rounds, then timed rounds, same callable
        for _ in range(warmup + args.rounds):
            timed()
        runs.append({"kind": kind, "samples_s": list(timed.samples_s)[warmup:], "interference": meter.stop(),
                     "clock": getattr(timed, "clock", "")})
    return {"index": args.index, "pid": os.getpid(), "runs": runs, "injected": injected}


def kernel_slowed_engine(engine: Any, precision: str, fraction: float,
                         median_s: float) -> tuple[Any, dict[str, Any]]:
    """A torch CUDA engine that runs the same module and then a spin kernel (``torch.cuda._sleep``) on the same
    stream, sized to ``fraction`` of the plain engine's median device time. Captured into the CUDA graph on the
    graph path and timed by the same CUDA events: a real device-side slowdown, which follows the SM clock as a
    slower kernel would, not a sample-level addition."""
    import torch

    from engines.base import LoadedEngine
    from engines.pytorch.backend import TorchRunner

    runner = engine.runner
    if not isinstance(runner, TorchRunner) or runner.device.type != "cuda":
        raise SystemExit("--inject-kernel needs --engine torch on a CUDA device (the spin kernel is torch's)")
    probe, start, end = 2_000_000, torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = []
    for _ in range(7):
        start.record()
        torch.cuda._sleep(probe)
        end.record()
        end.synchronize()
        rates.append(probe / (start.elapsed_time(end) / 1e3))
    cycles_per_s = _median(rates)
    cycles = max(1, round(fraction * median_s * cycles_per_s))

    class SpinAfter(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            out = self.inner(*args)
            torch.cuda._sleep(cycles)
            return out

    slowed = TorchRunner(SpinAfter(runner.module), runner.input_names, runner.output_names, str(runner.device),
                         precision, runner.channels_last,
                         label=f"{runner.label} + spin kernel")
    return LoadedEngine(runner=slowed, facts=engine.facts), {
        "kind": "kernel", "spin_cycles": cycles, "spin_cycles_per_s": cycles_per_s,
        "planned_s": cycles / cycles_per_s, "plain_median_s": median_s}


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def analyse(workers: list[dict[str, Any]], threshold: float, confidence: float, baseline_runs: int = 1,
            busy_limit: float = 0.2, max_sets: int = 20, seed: int = 0) -> dict[str, Any]:
    """Rates over all (current run, baseline set) trials: the baseline set is ``baseline_runs`` plain
    runs of the same index r from other workers (at most ``max_sets`` sets per current run). As in the
    plugin, a trial where a run saw more than ``busy_limit`` of the CPUs used by other processes is
    'busy': counted apart, neither an alarm nor a detection."""
    rng = random.Random(seed)
    plain = [[r for r in w["runs"] if r["kind"] == "plain"] for w in workers]
    slowed = [[r for r in w["runs"] if r["kind"] == "slowed"] for w in workers]
    Run = dict[str, Any]

    def trials(current: list[list[Run]]) -> list[tuple[list[Run], Run]]:
        out = []
        for j, runs in enumerate(current):
            for r, run in enumerate(runs):
                others = [i for i in range(len(workers)) if i != j and r < len(plain[i])]
                sets = list(itertools.combinations(others, baseline_runs))
                for chosen in rng.sample(sets, min(max_sets, len(sets))):
                    out.append(([plain[i][r] for i in chosen], run))
        return out

    def rate(pairs: list[tuple[list[Run], Run]]) -> dict[str, Any]:
        verdicts = []
        for base, current in pairs:
            runs = [b["samples_s"] for b in base]
            verdict = compare_latency(runs if len(runs) > 1 else runs[0], current["samples_s"], threshold,
                                      confidence).verdict
            busy = any((r["interference"] or 0.0) > busy_limit for r in [*base, current])
            verdicts.append("busy" if busy and verdict != "unchanged" else verdict)
        k = sum(v == "regression" for v in verdicts)
        n = len(verdicts)
        lo, hi = binomial_interval(k, n) if n else (math.nan, math.nan)
        return {"alarms": k, "trials": n, "rate": k / n if n else math.nan, "ci95": [lo, hi],
                "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))}}

    same = [([p[r]], p[r + 1]) for p in plain for r in range(len(p) - 1)]
    medians = [_median(run["samples_s"]) for p in plain for run in p]
    mean = sum(medians) / len(medians)
    spread = math.sqrt(sum((m - mean) ** 2 for m in medians) / max(1, len(medians) - 1)) / mean
    rounds = len(plain[0][0]["samples_s"])
    interference = [r["interference"] for w in workers for r in w["runs"] if r["interference"] is not None]
    return {
        "baseline_runs": baseline_runs,
        "busy_limit": busy_limit,
        "false_alarm_cross_process": rate(trials(plain)),
        "detection_cross_process": rate(trials(slowed)),
        "false_alarm_same_process": rate(same) if baseline_runs == 1 else None,
        "median_ms": 1e3 * _median(medians),
        "run_to_run_cv_of_median": spread,
        "rounds_per_run": rounds,
        "timing_per_case_s": rounds * _median(medians) * 1.1,  # + the 10 % warm-up rounds
        "max_interference": max(interference) if interference else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--suite-config", default=str(ROOT / "suite.toml"), help="suite config (default suite.toml)")
    p.add_argument("--model", default="digits_cnn", help="a [models.NAME] of --suite-config")
    p.add_argument("--engine", default="onnxruntime", help="torch, onnxruntime, inductor, tensorrt")
    p.add_argument("--precision", default="fp32", help="fp32, tf32, fp16, bf16, int8")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N")
    p.add_argument("--path", default="all", help="latency path: all | model | graph")
    p.add_argument("--batch", type=int, default=1, help="batch size of the timed case")
    p.add_argument("--rounds", type=int, default=1000, help="timed rounds per run (the case's --latency-rounds)")
    p.add_argument("--runs", type=int, default=4, help="runs per worker, alternating plain / slowed")
    p.add_argument("--workers", type=int, default=12, help="fresh processes, run one after the other")
    p.add_argument("--warmup", type=int, default=50, help="untimed calls after loading, per worker")
    p.add_argument("--slowdown", type=float, default=0.05, help="injected slowdown (fraction)")
    p.add_argument("--inject-kernel", action="store_true",
                   help="slow the engine by a real GPU kernel (torch on CUDA: a spin kernel after the module, in the\n"
                        "CUDA graph on the graph path) instead of adding the fraction to each round's sample")
    p.add_argument("--threshold", type=float, default=0.05, help="--latency-regression (fraction)")
    p.add_argument("--confidence", type=float, default=0.99, help="--latency-confidence, as a fraction (default 0.99)")
    p.add_argument("--busy-limit", type=float, default=0.2, help="--latency-busy-limit (fraction; 1 disables)")
    p.add_argument("--baseline-runs", default="1,3",
                   help="baseline runs per comparison, comma-separated (1: one saved run; K: last:K)")
    p.add_argument("--from-json", default=None, help="re-analyse the samples of a --json --keep-samples file")
    p.add_argument("--engine-cache", default=str(ROOT / ".engine-cache"), help="engine cache (default .engine-cache)")
    p.add_argument("--json", default=None, help="write the figures (and with --keep-samples, the samples) here")
    p.add_argument("--keep-samples", action="store_true", help="keep every timed sample in --json (for --from-json)")
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.worker_out:
        Path(args.worker_out).write_text(json.dumps(worker(args)))
        return 0

    start = time.perf_counter()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        results, environment = saved["workers"], saved["environment"]
        for key in ("model", "engine", "precision", "device", "path", "batch", "rounds", "runs", "workers", "slowdown"):
            setattr(args, key, saved["setup"][key])
    else:
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            for index in range(args.workers):
                out = Path(tmp) / f"w{index}.json"
                cmd = [sys.executable, __file__, "--worker-out", str(out), "--index", str(index)] + [
                    a for a in sys.argv[1:] if a != "--keep-samples"]
                done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.stderr.write(done.stdout + done.stderr)
                    return done.returncode
                results.append(json.loads(out.read_text()))
                print(f"worker {index + 1}/{args.workers} done ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
        from suite.environment import fingerprint

        environment = fingerprint(args.device)
    measured_s = time.perf_counter() - start
    figures: dict[str, Any] = {
        "setup": {k: getattr(args, k) for k in ("model", "engine", "precision", "device", "path", "batch", "rounds",
                                                "runs", "workers", "slowdown", "threshold", "confidence",
                                                "busy_limit")},
        "clock": results[0]["runs"][0]["clock"], "environment": environment, "loadavg_end": os.getloadavg(),
        "injected": [w.get("injected") or {} for w in results],
        "wall_s": measured_s,
        "analyses": [analyse(results, args.threshold, args.confidence, int(k), args.busy_limit)
                     for k in str(args.baseline_runs).split(",")],
    }
    s = figures["setup"]
    first = figures["analyses"][0]
    print(f"\ngate calibration: {s['model']}-{s['engine']}-{s['precision']} bs{s['batch']} latency-{s['path']} "
          f"on {s['device']} ({environment.get('gpu_name') or environment.get('cpu')})")
    print(f"  {s['workers']} processes x {s['runs']} runs x {s['rounds']} rounds; median call "
          f"{first['median_ms']:.4g} ms; timing per case ~{first['timing_per_case_s']:.2f} s; "
          f"run-to-run CV of the median {first['run_to_run_cv_of_median'] * 100:.2f}%; "
          f"max others' CPU {_pct(first['max_interference'])}")
    print(f"  gate: --latency-regression {s['threshold'] * 100:g}%, {s['confidence'] * 100:g}% CI, "
          f"--latency-busy-limit {args.busy_limit * 100:g}%; injected slowdown {s['slowdown'] * 100:g}%"
          + _injected_text(figures["injected"]))
    print(f"  {'':<54}{'alarms':>8}{'trials':>8}{'rate':>9}  95% CI (as if independent)")
    for a in figures["analyses"]:
        tag = f"[{a['baseline_runs']} baseline run{'s' if a['baseline_runs'] > 1 else ''}]"
        for key, label in (("false_alarm_cross_process", "false alarms, A/A across processes"),
                           ("false_alarm_same_process", "false alarms, A/A same process"),
                           ("detection_cross_process", "detection of the injected slowdown")):
            f = a[key]
            if f is None:
                continue
            print(f"  {tag + ' ' + label:<54}{f['alarms']:>8}{f['trials']:>8}{f['rate'] * 100:>8.1f}%  "
                  f"[{f['ci95'][0] * 100:.1f}%, {f['ci95'][1] * 100:.1f}%]   {f['verdicts']}")
    print(f"  re-analysed {args.from_json}" if args.from_json else f"  measuring took {measured_s:.0f} s")
    if args.json:
        if args.keep_samples:
            figures["workers"] = results
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
    return 0


def _injected_text(injected: list[dict[str, Any]]) -> str:
    """How the slowdown was made: added to each round's sample, or a real spin kernel (its measured share)."""
    kernels = [i for i in injected if i.get("kind") == "kernel"]
    if not kernels:
        return " (added to each round's sample, --inject-slowdown's way)"
    measured = sorted(i["measured_fraction"] * 100 for i in kernels)
    return (f" as a real spin kernel after the module ({_median([i['planned_s'] * 1e6 for i in kernels]):.1f} us "
            f"planned; in-process medians {measured[0]:+.2f}% to {measured[-1]:+.2f}%)")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


if __name__ == "__main__":
    sys.exit(main())
