"""A sequence of gated nights as the markdown table docs/nightly.md holds (issue 42: a nightly you can trust).

Given the nights' ``--suite-results`` files in order (plain or gzipped: tools/compare_runs.py's reader), e.g. what
``tools/gpu_sitting.sh nights`` leaves (NIGHTS_STATE/runs/n1.json, n2.json, ...), one row per night: its GPUs and
workers (the environment's worker_count and worker_gpus, suite/fleet/plugin.py worker_layout), what its latency was
gated against (the ``--latency-baseline`` of its command: last:K) and whether it had an accuracy baseline, its wall
time, its verdict, how many latency cases were judged (passed + failed) of those timed (every latency case but the
``unsupported`` ones, which never run), the regressions (latency cases failed, and the groups of cases that did:
suite/gate/latency.py group_drifts), the judged counts per class (device-bound and host-bound, each latency record's
``bound``) and the reasons the others were not judged.

Then the between-night spread per class: for every latency case timed in at least two of the nights, the largest of
its medians over the smallest; the median and the 90th percentile of that ratio over the class's cases. A class
whose cases move 1.3x from night to night cannot be gated at 5 %, whatever its interval says.

    python tools/night_table.py n1.json n2.json n3.json.gz [--json table.json]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.compare_runs import checks, load, medians  # noqa: E402

CLASSES = ("device", "host")
_LATENCY_TEST = re.compile(r"test_latency\[(.+)\]$")


def night_name(path: str) -> str:
    """n3.json.gz -> n3."""
    name = Path(path).name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name


def _case_param(case: tuple[str, str, str]) -> str:
    """A record's (cell, shape, path) as its test's parameter (suite/hooks/parametrize.py latency_case_id: 'all' left
    off)."""
    cell, shape, path = case
    return f"{cell}-{shape}" if path == "all" else f"{cell}-{shape}-{path}"


def _option(command: str, name: str) -> str | None:
    """The value of ``--name=V`` or ``--name V`` in a run's command line (the last one given), or None."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    value = None
    for i, word in enumerate(words):
        if word == name and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith(name + "="):
            value = word.split("=", 1)[1]
    return value


def _gpus(data: dict[str, Any]) -> str:
    """'2 (0,1)': the workers and the GPUs they were given; the run's worker count where the environment predates
    the layout keys."""
    environment = data.get("environment") or {}
    count = environment.get("worker_count", (data.get("run") or {}).get("workers"))
    gpus = environment.get("worker_gpus")
    return f"{count if count is not None else '?'}" + (f" ({gpus})" if gpus else "")


def night_row(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """One night's figures: what it was gated against, its verdict, and its latency cases judged, per class."""
    states = checks(data)
    latency = {m.group(1): state for test, state in states.items() if (m := _LATENCY_TEST.search(test))}
    bound = {_case_param(case): b for case, (_, b) in medians(data).items()}
    timed = {case: state for case, state in latency.items() if state != "not judged (unsupported)"}
    judged = {case for case, state in timed.items() if state in ("passed", "failed")}
    not_judged: dict[str, int] = {}
    for state in timed.values():
        if state.startswith("not judged ("):
            reason = state[len("not judged ("):].split(")")[0]
            not_judged[reason] = not_judged.get(reason, 0) + 1
    run = data.get("run") or {}
    command = str(run.get("command") or "")
    per_class = {c: {"judged": sum(1 for case in judged if bound.get(case) == c),
                     "timed": sum(1 for case in timed if bound.get(case) == c)} for c in CLASSES}
    return {"night": name, "gpus": _gpus(data), "latency_baseline": _option(command, "--latency-baseline"),
            "accuracy_baseline": _option(command, "--accuracy-baseline") is not None,
            "wall_s": run.get("wall_s"), "verdict": str((data.get("verdict") or {}).get("verdict")),
            "complete": bool(data.get("complete", True)), "judged": len(judged), "timed": len(timed),
            "regressions": sum(1 for state in timed.values() if state == "failed"),
            "group_regressions": sum(1 for test, state in states.items()
                                     if test.startswith("latency group ") and state == "failed"),
            "per_class": per_class, "not_judged": dict(sorted(not_judged.items()))}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of ``values``, interpolated between the two nearest ranks (numpy's default)."""
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100.0
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def spread(nights: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per class: the cases timed in at least two nights, and the median and 90th percentile over them of each
    case's largest median over its smallest. A case's class is the one most of its nights recorded (the latest
    night's on a tie)."""
    seen: dict[tuple[str, str, str], list[tuple[float, str]]] = {}
    for data in nights:
        for case, (ms, bound) in medians(data).items():
            seen.setdefault(case, []).append((ms, bound))
    ratios: dict[str, list[float]] = {c: [] for c in CLASSES}
    for values in seen.values():
        times = [ms for ms, _ in values]
        if len(values) < 2 or min(times) <= 0:
            continue
        bounds = [b for _, b in values]
        cls = max(reversed(bounds), key=bounds.count)  # most nights' class; reversed: the latest wins a tie
        ratios.setdefault(cls, []).append(max(times) / min(times))
    return {c: {"cases": len(r), "median": statistics.median(r) if r else None,
                "p90": percentile(r, 90) if r else None} for c, r in ratios.items()}


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f} %" if whole else "-"


def _regressions(row: dict[str, Any]) -> str:
    """The cases that failed, and the groups of cases (suite/gate/latency.py group_drifts) where any did."""
    groups = row.get("group_regressions", 0)
    return f"{row['regressions']}" + (f" + {groups} group(s)" if groups else "")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(rows: list[dict[str, Any]], spreads: dict[str, dict[str, Any]]) -> str:
    lines = ["| night | GPUs (workers) | gated against | wall s | verdict | latency judged | regressions "
             "| device-bound judged | host-bound judged | not judged |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gated = r["latency_baseline"] or "none"
        if r["accuracy_baseline"]:
            gated += " + accuracy"
        verdict = r["verdict"] + ("" if r["complete"] else " (incomplete)")
        wall = "-" if r["wall_s"] is None else f"{r['wall_s']:.0f}"
        classes = [f"{c['judged']} of {c['timed']}" for c in (r["per_class"][k] for k in CLASSES)]
        reasons = ", ".join(f"{k} {v}" for k, v in r["not_judged"].items()) or "-"
        lines.append(f"| {r['night']} | {r['gpus']} | {gated} | {wall} | {verdict} | {r['judged']} of {r['timed']} "
                     f"({_pct(r['judged'], r['timed'])}) | {_regressions(r)} | {classes[0]} | {classes[1]} "
                     f"| {reasons} |")
    lines += ["", "Between-night spread (each latency case timed in >= 2 nights: its largest median / its smallest):",
              "", "| class | cases | median max/min | p90 max/min |", "|---|---|---|---|"]
    for cls, s in spreads.items():
        lines.append(f"| {cls}-bound | {s['cases']} | {_ratio(s['median'])} | {_ratio(s['p90'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="the nights' --suite-results files (or .json.gz), in order")
    parser.add_argument("--json", help="also write the rows and the spread to this file")
    args = parser.parse_args(argv)
    nights = [load(path) for path in args.results]
    rows = [night_row(night_name(path), data) for path, data in zip(args.results, nights, strict=True)]
    spreads = spread(nights)
    print(markdown(rows, spreads))
    if args.json:
        Path(args.json).write_text(json.dumps({"nights": rows, "spread": spreads}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
