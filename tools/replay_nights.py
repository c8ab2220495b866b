"""A sequence of saved nights judged again by the latency gate as it is now (issue 42): false alarms and judged share
of a gate change, measured on nights already run, without a GPU.

    python tools/replay_nights.py n1-benchmark.json n2-benchmark.json ... [--k 5] [--threshold 0.05]
                                  [--confidence 0.99] [--min-kept 2] [--inject N=FRACTION]

Why: a gate rule is right when unchanged nights in a row pass and a real slowdown fails; measuring that on the GPU
costs a whole-tier night per data point (30 device-minutes a sitting hold about three). The nights' pytest-benchmark
files keep every case's rounds, its host reference per round (``host_ref_s``), its class (``bound``) and the CPU
share others used (``gate.interference``): enough to judge each night again with the gate's own code
(suite/gate/latency.py ``check_latency``, the class model of ``suite.gate.bound.class_noise``) as the workflow orders
it: each night against the nights kept before it (at most ``--k``, newest last, as ``--latency-baseline last:K``;
none until ``--min-kept`` are kept, as tools/gpu_sitting.sh's nights), and a night kept when none of its cases
regressed.
Not replayed: re-measurements (a case's saved rounds are its last attempt's) and the checks other than latency.

``--inject N=FRACTION`` judges night N (1-based) with every round of every case slowed by FRACTION (its host
reference unchanged, as an engine's own extra work would leave it), and never keeps it: what the gate catches.
``--inject-bound device`` (or ``host``) slows only that class's cases: a device-side slowdown leaves the host's time
alone. Each night's groups are judged too (metrics/group_drift.py: an engine's cases of one bound, and each model's),
and a group's regression counts as one.

Prints one row per night: cases judged (passed or failed) per class, regressions, and each regression's line. Exit 0
when no night without ``--inject`` had a regression, 1 otherwise, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from metrics.drift import DriftTolerances
from suite.gate.baselines import BaselineError, latency_key, load_latency_baselines, parse_fraction
from suite.gate.bound import class_noise
from suite.gate.latency import STATE
from suite.gate.state import Gate
from suite.options import SuiteOptions
from suite.verdict import FAILED, PASSED, Ledger


def night_records(path: Path) -> list[dict[str, Any]]:
    """The latency cases of one saved night as the gate's records (a benchmark's ``extra_info``)."""
    data = json.loads(path.read_text())
    records = []
    for bench in data.get("benchmarks", []):
        extra = dict(bench.get("extra_info") or {})
        if latency_key(extra) is None or not extra.get("samples_s"):
            continue
        extra["interference"] = (extra.get("gate") or {}).get("interference")
        records.append(extra)
    return records


#: the run's --latency-busy-limit default: a case others kept busy beyond it is judged as the run judged it
BUSY_LIMIT = parse_fraction(SuiteOptions.latency_busy_limit, "--latency-busy-limit")


def judge(records: list[dict[str, Any]], kept: list[Path], threshold: float, confidence: float,
          slowdown: float = 0.0, slowed: str = "all") -> dict[str, Any]:
    """One night's latency cases against the kept nights: per class (bound) judged and total, and the regressions."""
    baseline = load_latency_baselines(kept, accept_incomplete=True) if kept else None
    gate = Gate(max_slowdown=threshold, confidence=confidence, busy_limit=BUSY_LIMIT, drift=DriftTolerances(),
                inject_slowdown=None, inject_accuracy_drop=None, environment={}, latency_baseline=baseline)
    if baseline is not None:
        gate.noise = class_noise(baseline, confidence)
    counts: dict[str, list[int]] = {}
    regressions = []
    for record in records:
        if slowdown and slowed in ("all", record.get("bound")):
            record = {**record, "samples_s": [s * (1.0 + slowdown) for s in record["samples_s"]]}
        outcome, failure = gate.check_latency(record, str(latency_key(record)), record.get("interference"))
        if outcome is None:
            continue
        judged = STATE[outcome.status] in (PASSED, FAILED)
        row = counts.setdefault(str(record.get("bound", "host")), [0, 0])
        row[0] += judged
        row[1] += 1
        if failure and outcome.comparison is not None:
            c = outcome.comparison
            regressions.append(f"{outcome.label} ({record.get('bound', 'host')}-bound): {c.change_pct:+.2f} %, CI "
                               f"{c.interval_text}, {c.interval}")
    ledger = Ledger()
    gate.take_group_drifts(ledger)
    regressions += [f"group {g.explain()}" for g in gate.groups if g.verdict == "regression"]
    judged = [g for g in gate.groups if g.verdict != "not-judged"]
    return {"counts": counts, "regressions": regressions,
            "groups": f"{len(judged)} of {len(gate.groups)}" if gate.groups else "-"}


def replay(paths: list[Path], k: int, min_kept: int, threshold: float, confidence: float,
           inject: dict[int, float], slowed: str = "all") -> list[dict[str, Any]]:
    """Every night in order, each judged against the nights kept before it; the rows."""
    kept: list[Path] = []
    rows = []
    for number, path in enumerate(paths, 1):
        against = kept[-k:] if len(kept) >= min_kept else []
        result = judge(night_records(path), against, threshold, confidence, inject.get(number, 0.0), slowed)
        keep = number not in inject and not result["regressions"]
        if keep:
            kept.append(path)
        rows.append({"night": number, "file": str(path), "against": len(against), "kept": keep,
                     "injected": inject.get(number), **result})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as markdown, and each regression's line under it."""
    lines = ["| night | gated against | kept | judged (all) | device-bound judged | host-bound judged | groups judged "
             "| regressions |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    for row in rows:
        counts = row["counts"]
        judged, total = sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())
        cls = {b: f"{c[0]} of {c[1]}" for b, c in counts.items()}
        share = f"{judged} of {total} ({100 * judged / total:.0f} %)" if total else "-"
        name = f"n{row['night']}" + (f" (+{row['injected'] * 100:g} % injected)" if row["injected"] else "")
        lines.append(f"| {name} | {row['against'] or 'none'} | {'yes' if row['kept'] else 'no'} | {share} | "
                     f"{cls.get('device', '-')} | {cls.get('host', '-')} | {row['groups']} | "
                     f"{len(row['regressions'])} |")
        notes += [f"- {name}: {r}" for r in row["regressions"]]
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nights", nargs="+", type=Path, help="each night's pytest-benchmark JSON, oldest first")
    ap.add_argument("--k", type=int, default=5, help="kept nights a night is gated against (last:K)")
    ap.add_argument("--min-kept", type=int, default=2, help="kept nights before the latency gate starts")
    ap.add_argument("--threshold", type=float, default=0.05, help="--latency-threshold as a fraction")
    ap.add_argument("--confidence", type=float, default=0.99)
    ap.add_argument("--inject", action="append", default=[], metavar="N=FRACTION")
    ap.add_argument("--inject-bound", choices=("all", "device", "host"), default="all",
                    help="the class of cases --inject slows")
    args = ap.parse_args(argv)
    try:
        inject = {int(n): float(f) for n, f in (item.split("=", 1) for item in args.inject)}
        rows = replay(args.nights, args.k, args.min_kept, args.threshold, args.confidence, inject,
                      args.inject_bound)
    except (OSError, ValueError, BaselineError) as exc:
        print(f"replay_nights: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    return 1 if any(r["regressions"] and not r["injected"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
