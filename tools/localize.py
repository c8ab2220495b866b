"""Localize one cell from the command line: where do its outputs leave the fp32 reference's?

    .venv/bin/python tools/localize.py --model efficientnet_lite0 --engine onnxruntime --precision int8
    .venv/bin/python tools/localize.py --model resnet18 --engine tensorrt --precision fp16 --device cuda:0

Builds the cell through the suite's own machinery (suite.config.load_config, core.cache.ArtifactCache,
suite.session.SuiteSession: the same cache entries as a pytest run), judges its parity on the model's parity
dataset (or generated inputs) as tests/parity does, then prints engines.localize's table and, for onnxruntime,
the graph-optimization bisect on the whole feed (``--bisect auto``: when parity fails). ``--json FILE`` writes
the report (LocalizationReport.as_dict) and the bisect. Exit status: 0 when the cell passes parity, 1 when it
fails, 2 when it cannot run here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite-config", default=str(ROOT / "suite.toml"),
                        help="the suite config that declares the model (default: suite.toml)")
    parser.add_argument("--engine-cache", default=str(ROOT / ".engine-cache"),
                        help="the engine cache the suite builds into; a cached engine is reused (default: "
                             ".engine-cache)")
    parser.add_argument("--model", required=True, help="a [models.NAME] of the suite config")
    parser.add_argument("--engine", required=True, help="torch, onnxruntime, inductor, tensorrt")
    parser.add_argument("--precision", required=True, help="fp32, tf32, fp16, bf16, int8")
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N")
    parser.add_argument("--samples", type=int, default=None, help="rows of the parity dataset (default: the model's "
                        "parity_samples)")
    parser.add_argument("--generated", default=None, metavar="DISTRIBUTION",
                        help="judge generated inputs of this distribution (uniform, normal, ...), not the dataset")
    parser.add_argument("--batch", type=int, default=8, help="batch of --generated inputs")
    parser.add_argument("--seed", type=int, default=0, help="seed of --generated inputs")
    parser.add_argument("--rows", type=int, default=8, help="rows the per-layer comparison runs (default 8)")
    parser.add_argument("--top", type=int, default=10, help="worst layers listed (default 10)")
    parser.add_argument("--bisect", choices=("auto", "always", "never"), default="auto",
                        help="onnxruntime optimization-level bisect: when parity fails (auto), always or never")
    parser.add_argument("--workdir", default=None, help="keep the optimized ONNX graphs here")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the report as JSON")
    args = parser.parse_args(argv)

    from core.cache import ArtifactCache
    from core.inputs import synthetic_feed
    from engines.base import CellUnavailable
    from engines.localize import localize, onnxruntime_cell
    from engines.onnxrt.bisect import bisect_optimizations
    from metrics import compare_outputs
    from suite.config import ConfigError, load_config
    from suite.session import Cell, SuiteSession

    if args.engine == "onnxruntime":
        from engines.ort_import import import_onnxruntime

        # Errors only: a bisect makes dozens of sessions, and ONNX Runtime's default logger warns on each one
        # (1.31.1 on the CUDA EP: "No registered plugin EP device found", "Conv ... running in Fallback mode").
        import_onnxruntime().set_default_logger_severity(3)
    try:
        config = load_config(args.suite_config).select([args.model], [args.engine], [args.precision])
    except ConfigError as exc:
        print(f"localize: {exc}", file=sys.stderr)
        return 2
    session = SuiteSession(config, ArtifactCache(args.engine_cache), args.device)
    model = session.model(args.model)
    cell = Cell(args.model, args.engine, args.precision)
    try:
        engine = session.engine(cell)
    except CellUnavailable as exc:
        print(f"{cell.id}: cannot run here: {exc}", file=sys.stderr)
        return 2

    if args.generated:
        feed = synthetic_feed(model.inputs, args.batch, args.generated, args.seed)
        source = f"{args.generated} inputs (batch {args.batch}, seed {args.seed})"
    elif model.parity_dataset:
        samples = args.samples or model.parity_samples
        feed = session.dataset(model.parity_dataset).take(samples).feeds
        source = f"{model.parity_dataset}[:{len(next(iter(feed.values())))}]"
    else:
        feed = synthetic_feed(model.inputs, args.batch, "uniform", args.seed)
        source = f"uniform inputs (batch {args.batch}, seed {args.seed}): {model.name} has no parity_dataset"
    tolerance = model.tolerance(args.precision)
    reference = session.run_batched(session.reference_cell(model.name), feed)
    outputs = session.run_batched(cell, feed)
    parity = compare_outputs(reference, outputs, tolerance)
    passed = all(r.passed for r in parity.values())
    print(f"{cell.id} on {source}: {'passes' if passed else 'FAILS'} parity")
    for output in parity.values():
        if not output.passed:
            print("  " + output.explain().replace("\n", "\n  "))

    bisect_report = None
    run_bisect = args.engine == "onnxruntime" and (args.bisect == "always" or (args.bisect == "auto" and not passed))
    if run_bisect:
        options = model.engine_options.get(args.engine, {})
        path, providers, make_options = onnxruntime_cell(session.build(model.name), args.precision, args.device,
                                                         options, feed)
        bisect_report = bisect_optimizations(path, feed, reference, tolerance, providers,
                                             session_options=make_options,
                                             workdir=Path(args.workdir) / "bisect" if args.workdir else None)
    report = localize(args.engine, args.precision, session.build(model.name), None, feed, tolerance,
                      device=args.device, options=model.engine_options.get(args.engine, {}), top=args.top,
                      runner=engine.runner, cache=session.cache, max_rows=args.rows, bisect=False,
                      workdir=Path(args.workdir) if args.workdir else None)
    print()
    print(report.table())
    if bisect_report is not None:
        print()
        print(bisect_report.text())
    if args.json:
        data = {"cell": cell.id, "source": source, "parity_passed": passed,
                "parity": {n: r.as_dict() for n, r in parity.items()}, "localization": report.as_dict(),
                "bisect": None if bisect_report is None else bisect_report.as_dict()}
        Path(args.json).write_text(json.dumps(data, indent=1, default=str))
        print(f"\nwritten to {args.json}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
