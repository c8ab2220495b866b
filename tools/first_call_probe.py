"""What the torch fp32 reference pays at its first call at each batch in a fresh process, and which setting changes it.

    python tools/first_call_probe.py --suite-config suite-gpu.toml --device cuda:0 \\
        --models efficientnet_lite0,mobilenet_v2,resnet50 [--batches 1,32,100,256] \\
        [--variants default,cudnn-benchmark,no-cudnn] [--engine-cache /tmp/ec] [--profile]

Why (issue 22, docs/gpu.md, the eleventh sitting): on two GPUs, a worker that joins a model the other worker ran
pays the reference's first call again at each parity batch (efficientnet_lite0: 1.5-2.3 s a batch, 13 s for one
moved cell), the one cost two workers still pay twice. Whether a setting removes it, or only sharing the
reference's outputs does, is this probe's question.

Each (model, variant) runs in a fresh Python process, because the costs are per process (cuDNN's plans, lazily
loaded kernels). The process loads the reference as the suite does (suite.session.SuiteSession: the same cache
entries as a pytest run), runs the suite's torch warm-up (engines.pytorch TorchBackend.warm_up), then at each batch
times the reference's first and second call on uniform inputs (the runner's ``infer``: copies in and out, the same
in both calls). With --profile the first call at the second batch (a new shape after a warm one) runs under
torch.profiler, and its five costliest ops by CPU time are printed. Variants: ``default`` (the reference as the
suite runs it), ``cudnn-benchmark`` (torch.backends.cudnn.benchmark = True), ``no-cudnn``
(torch.backends.cudnn.enabled = False). Prints one markdown table; exit status 0, or 2 when a process failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VARIANTS = ("default", "cudnn-benchmark", "no-cudnn")


def probe(suite_config: str, engine_cache: str, device: str, model_name: str, variant: str, batches: list[int],
          profile: bool) -> dict[str, Any]:
    """One process's figures: the reference's load and warm-up seconds, each batch's first and second call."""
    import torch

    from core.cache import ArtifactCache
    from core.inputs import synthetic_feed
    from engines.pytorch.backend import TorchBackend
    from suite.config import load_config
    from suite.session import SuiteSession

    if variant == "cudnn-benchmark":
        torch.backends.cudnn.benchmark = True
    elif variant == "no-cudnn":
        torch.backends.cudnn.enabled = False
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    start = time.perf_counter()
    TorchBackend().warm_up(device)
    warm_up_s = time.perf_counter() - start
    config = load_config(suite_config).select([model_name], None, None)
    session = SuiteSession(config, ArtifactCache(engine_cache), device)
    model = session.model(model_name)
    start = time.perf_counter()
    runner = session.engine(session.reference_cell(model_name)).runner
    load_s = time.perf_counter() - start
    rows, top, profiled = [], None, None
    for i, batch in enumerate(batches):
        feed = synthetic_feed(model.inputs, batch, "uniform", seed=batch)
        calls = []
        for call in range(2):
            profiling = profile and i == 1 and call == 0
            sync()
            start = time.perf_counter()
            with torch.profiler.profile() if profiling else contextlib.nullcontext() as profiler:
                runner.infer(feed)
                sync()
            calls.append(time.perf_counter() - start)
            if profiler is not None:
                ops = sorted(profiler.key_averages(), key=lambda e: -e.cpu_time_total)[:5]
                top, profiled = [(e.key, round(e.cpu_time_total / 1e6, 3)) for e in ops], batch
        rows.append({"batch": batch, "first_s": round(calls[0], 4), "second_s": round(calls[1], 4)})
    return {"model": model_name, "variant": variant, "warm_up_s": round(warm_up_s, 3), "load_s": round(load_s, 3),
            "batches": rows, "profile_top": top, "profile_batch": profiled}


def table(results: list[dict[str, Any]]) -> str:
    """The probe's figures as one markdown table, a row per model, variant and batch."""
    lines = ["| model | variant | warm-up s | load s | batch | first call s | second call s |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        for row in r["batches"]:
            lines.append(f"| {r['model']} | {r['variant']} | {r['warm_up_s']} | {r['load_s']} | {row['batch']} | "
                         f"{row['first_s']} | {row['second_s']} |")
    for r in results:
        if r.get("profile_top"):
            ops = ", ".join(f"{name} {seconds} s" for name, seconds in r["profile_top"])
            lines.append(f"\n{r['model']} {r['variant']}, first call at batch {r['profile_batch']}: {ops}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite-config", default=str(ROOT / "suite-gpu.toml"), help="the config declaring the models")
    parser.add_argument("--engine-cache", default=str(ROOT / ".engine-cache"), help="the suite's engine cache")
    parser.add_argument("--device", default="cuda:0", help="cuda:N (cpu runs, but pays no such fee)")
    parser.add_argument("--models", required=True, help="comma-separated [models.NAME] of the config")
    parser.add_argument("--batches", default="1,32,100,256", help="batches in the order they are first called")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--profile", action="store_true", help="profile the first call at the second batch")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if args.one:
        result = probe(args.suite_config, args.engine_cache, args.device, args.one[0], args.one[1], batches,
                       args.profile)
        print(json.dumps(result))
        return 0
    results, failed = [], False
    common = ["--suite-config", args.suite_config, "--engine-cache", args.engine_cache, "--device", args.device,
              "--models", args.models, "--batches", args.batches] + (["--profile"] if args.profile else [])
    for model in args.models.split(","):
        for variant in args.variants.split(","):
            done = subprocess.run([sys.executable, __file__, *common, "--one", model, variant],
                                  capture_output=True, text=True, cwd=ROOT)
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 or not lines:
                failed = True
                print(f"{model} {variant}: the process failed (exit {done.returncode}):\n{done.stderr[-2000:]}",
                      file=sys.stderr)
                continue
            results.append(json.loads(lines[-1]))
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
