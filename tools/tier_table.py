"""Markdown tables of a GPU tier run, from the suite's records (``--suite-results``), for notes and READMEs.

Per model: one row per engine, precision and batch size with the median and p99 of each latency path,
throughput on the device-resident path, NVML peak memory and utilisation, and parity on the dataset.
With ``--bare bare.json`` (tools/bare_loop.py) the suite's ResNet-50 fp16 figures are set beside the
bare loops'. Later files override earlier ones for the same record, so a re-run of some cells can be
laid over a full run.

    python tools/tier_table.py gpu-results/*/results.json [--bare bare.json]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BARE_PATHS = {"torch-eager-channels-last": ("torch", "model"), "torch-cuda-graph": ("torch", "graph"),
              "onnxruntime-cuda-iobinding": ("onnxruntime", "model")}


def read_records(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Records of every file (a results JSON or its .partial.jsonl), the last one of each key winning."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in paths:
        text = Path(path).read_text()
        rows = ([json.loads(line) for line in text.splitlines() if line.strip()] if path.endswith(".jsonl")
                else json.loads(text)["records"])
        for r in rows:
            key = (r["kind"], r["cell"], r.get("path"), r.get("batch_size"), r.get("dataset"), r.get("name"))
            merged[key] = r
    return list(merged.values())


def _ms(r: dict[str, Any] | None) -> str:
    return "—" if r is None else f"{r['median_ms']:.3f} / {r['p99_ms']:.3f}"


def model_table(model: str, records: list[dict[str, Any]]) -> str:
    lat = {(r["engine"], r["precision"], r["batch_size"], r["path"]): r
           for r in records if r["kind"] == "latency" and r["model"] == model}
    parity = {(r["engine"], r["precision"]): r for r in records
              if r["kind"] == "parity" and r["model"] == model and r.get("dataset")}
    lines = [f"### {model}", "",
             "| engine | precision | batch | latency-all ms (median / p99) | latency-model ms | latency-graph ms "
             "| items/s (model path, else graph, else all) "
             "| peak MiB | util % | parity: cosine, top-1 agree %, isclose % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for engine, precision, batch in sorted({k[:3] for k in lat}):
        rows = {p: lat.get((engine, precision, batch, p)) for p in ("all", "model", "graph")}
        best = rows["model"] or rows["graph"] or rows["all"]  # a run may have timed one path only
        gpu = (best or {}).get("gpu") or {}
        par = parity.get((engine, precision))
        par_text = "reference" if (engine, precision) == ("torch", "fp32") else (
            "—" if par is None else f"{par['cosine']:.5f}, {par['top1_agreement_pct']:.1f}, {par['isclose_pct']:.1f}"
            + ("" if par["passed"] else " FAILED"))
        util = gpu.get("mean_sm_util_pct")
        lines.append(f"| {engine} | {precision} | {batch} | {_ms(rows['all'])} | {_ms(rows['model'])} | "
                     f"{_ms(rows['graph'])} | {best['throughput_per_s']:.0f} | {gpu.get('peak_memory_mib', '—')} | "
                     f"{'—' if util is None else f'{util:.0f}'} | {par_text} |")
    return "\n".join(lines)


def overhead_table(records: list[dict[str, Any]]) -> str:
    rows = sorted((r for r in records if r["kind"] == "harness_overhead" and "pairing" in r),
                  key=lambda r: (r["model"], r["engine"], r.get("path", "model"), r["batch_size"]))
    if not rows:
        return ""
    lines = ["### Harness overhead (paired rounds)", "",
             "| cell | path | batch | suite median ms | bare median ms | overhead (median round) | 95% interval "
             "| ratio of medians | limit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        # Records from before the paired-ratio statistic carry only the ratio of medians as overhead_pct.
        paired = "overhead_low_pct" in r
        interval = f"{r['overhead_low_pct']:+.2f} .. {r['overhead_high_pct']:+.2f}%" if paired else "—"
        ratio = r.get("ratio_of_medians_pct", None if paired else r["overhead_pct"])
        lines.append(f"| {r['cell']} | {r.get('path', 'model')} | {r['batch_size']} | {r['suite_median_ms']:.4f} | "
                     f"{r['bare_median_ms']:.4f} | {_pct(r['overhead_pct']) if paired else '—'} | "
                     f"{interval} | {_pct(ratio)} | {r['limit_pct']:.0f}% |")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2f}%"


def bare_table(bare: dict[str, Any], records: list[dict[str, Any]]) -> str:
    lat = {(r["engine"], r["path"], r["batch_size"]): r for r in records
           if r["kind"] == "latency" and r["model"] == "resnet50" and r["precision"] == "fp16"}
    lines = ["### ResNet-50 fp16: suite against bare loops (separate processes, not paired)", "",
             "| path | batch | suite median ms | bare median ms | difference | suite items/s |",
             "|---|---|---|---|---|---|"]
    for b in bare["results"]:
        engine, path = BARE_PATHS[b["path"]]
        s = lat.get((engine, path, b["batch_size"]))
        if s is None:
            continue
        lines.append(f"| {b['path']} | {b['batch_size']} | {s['median_ms']:.3f} | {b['median_ms']:.3f} | "
                     f"{s['median_ms'] / b['median_ms'] - 1:+.1%} | {s['throughput_per_s']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="results.json or results.json.partial.jsonl files")
    parser.add_argument("--bare", help="tools/bare_loop.py output to compare ResNet-50 fp16 with")
    args = parser.parse_args()
    records = read_records(args.results)
    models = sorted({r["model"] for r in records if r["kind"] == "latency"})
    parts = [model_table(m, records) for m in models] + [overhead_table(records)]
    if args.bare:
        parts.append(bare_table(json.loads(Path(args.bare).read_text()), records))
    print("\n\n".join(p for p in parts if p))


if __name__ == "__main__":
    main()
