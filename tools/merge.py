"""suite-merge: one night's verdict from the shards of a plan (issue 44; suite/fleet/shard.py, tools/plan.py).

    suite-merge --plan plan.json --out DIR SHARD_RESULTS...

Each SHARD_RESULTS is a shard's ``--suite-results`` file, or the folder holding it as ``results.json``; its
pytest-benchmark JSON is read from ``benchmark.json`` beside it, where there is one. Checks, then writes:

- every file is a shard of this plan (its ``run.shard`` block: the plan's hash, K/N), of one suite commit and one
  config: a file of another plan, commit or config, or of no plan, is a usage error (exit 4), one line naming it;
- every planned shard appears exactly once, complete (it ran to its end: not interrupted, no start-up error): a
  lost, duplicated, incomplete or failed-to-start shard makes its cells not judged (``shard-lost``: one check per
  cell, the shard named; failures it did report still fail), so the night ends NOT JUDGED (75), never PASSED;
- ``DIR/results.json``: every shard's records and checks, one verdict: a --accuracy-baseline when it passed;
- ``DIR/benchmark.json``: every shard's latency cases in one pytest-benchmark file: a --latency-baseline or
  --benchmark-compare file as a one-host run's (marked incomplete where a shard is lost);
- ``DIR/verdict.json`` and the verdict block on the terminal; the exit status is the suite's (0, 1, 75; 4);
- ``DIR/report.html``: one self-contained page that opens with the shards' environments (hosts, drivers, GPUs, suite
  commit; what differs in red), then the merged verdict, every cell's verdict (its shard and host), and the per-model
  sections of a run's report (report/html.py ``render_merged_report``). Not a pytest-html file: the merge runs no
  tests; each shard's own pytest-html report stays in its artifact;
- ``DIR/durations.json``: each merged shard's seconds for its own cells (from the ``durations.json`` its job left
  beside its results, suite/fleet/scheduling.py's file), for the next night's ``suite-plan --durations``.

Each record and latency case keeps the host that measured it (``host``): a baseline is keyed by GPU model and cell,
never by host or shard, so re-sharding orphans nothing, and the host says where a number came from. A plan of
several GPU models is merged per GPU model into DIR/<label>/ (baselines are kept per GPU model); the exit status is
the worst of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from report.html import render_merged_report  # noqa: E402
from suite import verdict  # noqa: E402
from suite.fleet.shard import Plan, PlanError, Shard, load_plan, short  # noqa: E402
from suite.results import incompleteness, results_document, write_json_atomic  # noqa: E402

USAGE = 4
LOST = "shard-lost"


class MergeUsageError(ValueError):
    """An input that is not a shard of this night: one line, exit 4."""


@dataclass
class ShardRun:
    source: Path
    results: dict[str, Any]
    benchmark: dict[str, Any] | None
    block: dict[str, Any] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)  # its engine cache's seconds per unit, where it left them

    @property
    def index(self) -> int:
        return int(self.block["shard"])

    @property
    def host(self) -> str:
        environment = self.results.get("environment") or {}  # suite.environment.host_id: VMs are often named alike
        return str(environment.get("host_id") or environment.get("hostname") or "?")

    def label(self) -> str:
        return f"shard {self.index}/{self.block['of']} ({self.source}, host {self.host})"


def read_shard(arg: str) -> ShardRun:
    path = Path(arg)
    results_path = path / "results.json" if path.is_dir() else path
    try:
        results = json.loads(results_path.read_text())
    except (OSError, ValueError) as exc:
        raise MergeUsageError(f"{results_path}: cannot read a shard's results ({exc})") from exc
    if not isinstance(results, dict) or not isinstance(results.get("records"), list):
        raise MergeUsageError(f"{results_path}: not a --suite-results file (no 'records' list)")
    block = (results.get("run") or {}).get("shard")
    if not isinstance(block, dict) or "plan_hash" not in block:
        raise MergeUsageError(f"{results_path}: a run of no plan (no run.shard): run each shard with --plan --shard")
    bench_path = results_path.parent / "benchmark.json"
    benchmark = None
    if bench_path.is_file():
        try:
            benchmark = json.loads(bench_path.read_text())
        except (OSError, ValueError) as exc:
            raise MergeUsageError(f"{bench_path}: cannot read the shard's benchmark JSON ({exc})") from exc
    durations_path = results_path.parent / "durations.json"
    durations: dict[str, float] = {}
    if durations_path.is_file():
        try:
            durations = {str(k): float(v) for k, v in json.loads(durations_path.read_text()).items()}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise MergeUsageError(f"{durations_path}: not a durations file ({exc})") from exc
    return ShardRun(results_path, results, benchmark, block, durations)


def check_inputs(plan: Plan, runs: Sequence[ShardRun]) -> None:
    """Every file a shard of this plan, of one suite commit and one config; else one line naming the file."""
    for run in runs:
        b = run.block
        if b["plan_hash"] != plan.hash:
            raise MergeUsageError(f"{run.source}: shard {b.get('shard')}/{b.get('of')} of plan "
                                  f"{short(b['plan_hash'])}, not of plan {short(plan.hash)} ({plan.source})")
        if not 1 <= int(b.get("shard", 0)) <= len(plan.shards) or list(b.get("cells", ())) != list(
                plan.shard(int(b["shard"])).cells):
            raise MergeUsageError(f"{run.source}: says it is shard {b.get('shard')} of plan {short(plan.hash)}, with "
                                  "other cells than the plan's")
    for key, what in (("git_commit", "suite commit"), ("config_digest", "config")):
        seen: dict[str, ShardRun] = {}
        for run in runs:
            seen.setdefault(str((run.results.get("run") or {}).get(key)), run)
        if len(seen) > 1:
            (a_value, a), (b_value, b) = list(seen.items())[:2]
            raise MergeUsageError(f"{b.label()}: {what} {b_value}, but {a.label()}: {a_value}: one night is one "
                                  f"{what}; run every shard of the plan from the same checkout")
    if runs and str((runs[0].results.get("run") or {}).get("config_digest")) != plan.config:
        raise MergeUsageError(f"{runs[0].label()}: config {(runs[0].results.get('run') or {}).get('config_digest')}, "
                              f"the plan's is {plan.config}")


def lost_reason(run: ShardRun) -> str | None:
    """Why a shard's file does not count as the shard's whole run, or None."""
    incomplete = incompleteness(run.results)
    if incomplete:
        return f"incomplete ({incomplete})"
    v = run.results.get("verdict") or {}
    if v.get("error"):
        return f"stopped at start-up ({v['error']})"
    if not v.get("states"):
        return "no check ran (failed to start?)"
    return None


def shard_checks(run: ShardRun) -> list[verdict.Check]:
    """The shard's checks as its settled verdict lists them."""
    v = run.results.get("verdict") or {}
    listed = [*v.get("failed", ()), *v.get("known_failures", ()),
              *(c for cs in (v.get("not_judged") or {}).values() for c in cs)]
    out = [verdict.Check.from_dict(c) for c in listed]
    named = {c.id for c in out}
    out += [verdict.Check(i, verdict.PASSED) for i, s in (v.get("states") or {}).items()
            if i not in named and s == verdict.PASSED]
    return out


def merge_group(plan: Plan, shards: Sequence[Shard], runs: Sequence[ShardRun], accepted: tuple[str, ...] | None) \
        -> tuple[verdict.Ledger, list[str], list[ShardRun]]:
    """The group's ledger: every counted shard's checks, and a shard-lost check per cell of each shard that does not
    count; the lines that say which; the shards that count."""
    by_index: dict[int, list[ShardRun]] = {}
    for run in runs:
        by_index.setdefault(run.index, []).append(run)
    counted = [rs[0] for s in shards if len(rs := by_index.get(s.index, [])) == 1 and lost_reason(rs[0]) is None]
    if accepted is None:  # the shards' own accept list: the strictest they share (none of them accepts shard-lost)
        lists = [tuple((r.results.get("verdict") or {}).get("accepted") or ()) for r in counted]
        accepted = tuple(a for a in lists[0] if all(a in other for other in lists)) if lists else ()
    ledger = verdict.Ledger(accepted=accepted)
    lines: list[str] = []
    for run in counted:
        for check in shard_checks(run):
            ledger.absorb(check)
    for shard in shards:
        rs = by_index.get(shard.index, [])
        label = f"shard {shard.index}/{len(plan.shards)} ({shard.gpu_model}: {', '.join(shard.models)})"
        if len(rs) == 1 and lost_reason(rs[0]) is None:
            continue
        if not rs:
            why = "missing: no results file for it (lost, or failed to start)"
        elif len(rs) > 1:
            why = f"appears {len(rs)} times ({', '.join(str(r.source) for r in rs)}): which one is the night's?"
        else:
            why = f"{lost_reason(rs[0])}: {rs[0].source}"
            for check in shard_checks(rs[0]):  # a failure it reported stays a failure: lost is never cleaner
                if check.state == verdict.FAILED:
                    ledger.absorb(check)
        lines.append(f"{label} {why}: its {len(shard.cells)} cells are not judged ({LOST})")
        for cell in shard.cells:
            ledger.add(f"{label}: {cell}", verdict.NOT_JUDGED, LOST, f"{label} {why}")
    left = [set((r.results.get("verdict") or {}).get("required_engines_left_out") or {}) for r in counted]
    ledger.left_out = {e: "no model of the plan lists it" for e in set.intersection(*left)} if left else {}
    return ledger, lines, counted


def merged_results(plan: Plan, ledger: verdict.Ledger, counted: Sequence[ShardRun], lost: bool) -> dict[str, Any]:
    """One --suite-results document: the shards' records (each with its host), engines and one verdict."""
    records, engines = [], {}
    for run in sorted(counted, key=lambda r: r.index):
        records += [{**r, "host": run.host} if isinstance(r, dict) else r for r in run.results["records"]]
        engines.update(run.results.get("engines") or {})
    first = sorted(counted, key=lambda r: r.index)[0].results if counted else {}
    hosts = sorted({r.host for r in counted})
    environment = {**(first.get("environment") or {}), "hostname": ", ".join(hosts)}
    for key in ("plan", "shard"):
        environment.pop(key, None)
    run_block = {"git_commit": (first.get("run") or {}).get("git_commit"),
                 "config_digest": (first.get("run") or {}).get("config_digest"),
                 "config": (first.get("run") or {}).get("config"),
                 "merged": {"plan_hash": plan.hash, "shards": {str(r.index): {"host": r.host, "source": str(r.source),
                                                                              "wall_s": (r.results.get("run") or {})
                                                                              .get("wall_s")}
                                                                for r in counted}},
                 "wall_s": max(((r.results.get("run") or {}).get("wall_s") or 0.0 for r in counted), default=None)}
    return results_document(environment=environment, records=records, engines=engines, verdict=ledger.as_dict(),
                            complete=not lost, incomplete_reason="a shard of the plan is lost" if lost else None,
                            run=run_block)


def merged_benchmark(plan: Plan, counted: Sequence[ShardRun], lost: bool) -> dict[str, Any] | None:
    """One pytest-benchmark file from the shards' (each case's ``extra_info.host`` its shard's host)."""
    with_bench = [r for r in sorted(counted, key=lambda r: r.index) if r.benchmark is not None]
    if not with_bench:
        return None
    first = with_bench[0].benchmark or {}
    benchmarks = []
    for run in with_bench:
        for bench in (run.benchmark or {}).get("benchmarks", []):
            extra = {**(bench.get("extra_info") or {}), "host": run.host}
            benchmarks.append({**bench, "extra_info": extra})
    machine = dict(first.get("machine_info") or {})
    environment = {**(machine.get("suite_environment") or {}), "hostname": ", ".join(sorted({r.host for r in
                                                                                          with_bench}))}
    for key in ("plan", "shard"):
        environment.pop(key, None)
    machine["suite_environment"] = environment
    suite_block = {**(first.get("suite") or {}), "complete": not lost,
                   "incomplete_reason": "a shard of the plan is lost" if lost else None,
                   "merged_from_shards": {"plan_hash": plan.hash, "shards": [r.index for r in with_bench]}}
    suite_block.pop("shard", None)
    return {**first, "machine_info": machine, "benchmarks": sorted(benchmarks, key=lambda b: str(b.get("fullname"))),
            "datetime": max(str((r.benchmark or {}).get("datetime", "")) for r in with_bench), "suite": suite_block}


def cell_of(check_id: str, cells: Sequence[str]) -> str | None:
    """The planned cell a check belongs to: a lost shard's check names it after its label; a test's id names it first
    in its parameters (``test_x[MODEL-ENGINE-PRECISION-...]``). None: a check of a model but no cell, or of none."""
    if check_id.startswith("shard ") and ": " in check_id:
        return check_id.rsplit(": ", 1)[1]
    param = check_id.partition("[")[2].rstrip("]")
    found = [c for c in cells if param == c or param.startswith(c + "-")]
    return max(found, key=len) if found else None


def cell_verdicts(plan: Plan, shards: Sequence[Shard], ledger: verdict.Ledger, counted: Sequence[ShardRun]) \
        -> list[dict[str, Any]]:
    """Every planned cell of ``shards``, in the plan's order, with its shard, host and verdict (report/shard_section.py
    cells_section), by the run's own rule: failed with any failed check, not judged with any check not judged for a
    reason not accepted, else passed; not collected with no check (a cell that cannot run on the shard's device)."""
    host = {r.index: r.host for r in counted}
    rows = {c: {"cell": c, "shard": f"{s.index}/{len(plan.shards)}", "host": host.get(s.index), "passed": 0,
                "failed": 0, "not_judged": {}} for s in shards for c in s.cells}
    for check in ledger.checks.values():
        row = rows.get(cell_of(check.id, list(rows)) or "")
        if row is None:
            continue
        if check.state == verdict.NOT_JUDGED:
            row["not_judged"][str(check.reason)] = row["not_judged"].get(str(check.reason), 0) + 1
        else:
            row["passed" if check.state == verdict.PASSED else "failed"] += 1
    for row in rows.values():
        refused = set(row["not_judged"]) - set(ledger.accepted)
        row["verdict"] = ("failed" if row["failed"] else "not judged" if refused else "passed"
                          if row["passed"] or row["not_judged"] else "not collected")
    return list(rows.values())


def shard_rows(plan: Plan, shards: Sequence[Shard], runs: Sequence[ShardRun], counted: Sequence[ShardRun],
               lines: Sequence[str]) -> list[dict[str, Any]]:
    """One row per planned shard for the report's shard table: the environment of the run that counts, or why
    none does (the line merge_group wrote for it)."""
    out = []
    for shard in shards:
        run = next((r for r in counted if r.index == shard.index), None)
        why = next((line.split(": its ", 1)[0] for line in lines if line.startswith(f"shard {shard.index}/")), None)
        row: dict[str, Any] = {"shard": shard.index, "of": len(plan.shards), "gpu_model": shard.gpu_model,
                               "lost": why}
        if run is not None:
            row.update(environment={**(run.results.get("environment") or {}),
                                    "suite_commit": (run.results.get("run") or {}).get("git_commit")},
                       source=str(run.source), wall_s=(run.results.get("run") or {}).get("wall_s"))
        out.append(row)
    return out


def merged_durations(shards: Sequence[Shard], counted: Sequence[ShardRun]) -> dict[str, float]:
    """Each counted shard's seconds for its own units (its cells, its models' tests of no cell): an engine cache
    shared by hosts holds other shards' older seconds too, which are not tonight's."""
    by_index = {s.index: s for s in shards}
    return {unit: seconds for run in counted for unit, seconds in sorted(run.durations.items())
            if unit in by_index[run.index].units()}


def print_verdict(name: str, ledger: verdict.Ledger, lines: Sequence[str]) -> None:
    state, why = ledger.outcome()
    v = ledger.as_dict()
    c = v["counts"]
    print(f"{'=' * 29} VERDICT: {state.upper()} ({name}) {'=' * 29}")
    print(f"checks: {c['passed']} passed, {c['failed']} failed, {sum(c['not_judged'].values())} not judged")
    for line in why:
        print(f"  {line}")
    for line in lines:
        print(f"lost: {line}")
    for check in v["failed"][:20]:
        print(f"FAILED {check['id']}: {check['detail'][:200]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="the night's plan.json (suite-plan)")
    parser.add_argument("--out", required=True, help="folder for the merged results.json, benchmark.json, verdict.json")
    parser.add_argument("--accept-not-judged", default=None, metavar="REASONS",
                        help="reasons a check may end not judged and the night still pass (default: those every shard "
                             "accepted; shard-lost only if named here)")
    parser.add_argument("shards", nargs="*", help="each shard's --suite-results file, or the folder holding "
                                                  "results.json (and benchmark.json)")
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.plan)
        accepted = (verdict.check_reasons(args.accept_not_judged.split(","), "--accept-not-judged")
                    if args.accept_not_judged is not None else None)
        runs = [read_shard(a) for a in args.shards]
        check_inputs(plan, runs)
    except (PlanError, MergeUsageError, verdict.NotJudgedReasonError) as exc:
        print(f"suite-merge: {exc}", file=sys.stderr)
        return USAGE
    out = Path(args.out)
    status = 0
    groups = list(plan.doc["gpu_models"])
    for gpu_model in groups:
        shards = [s for s in plan.shards if s.gpu_model == gpu_model]
        ledger, lines, counted = merge_group(plan, shards, [r for r in runs if r.block.get("gpu_model") == gpu_model],
                                             accepted)
        lost = bool(lines)
        where = out if len(groups) == 1 else out / str(plan.doc["gpu_models"][gpu_model]["label"])
        merged = merged_results(plan, ledger, counted, lost)
        write_json_atomic(where / "results.json", merged)
        bench = merged_benchmark(plan, counted, lost)
        if bench is not None:
            write_json_atomic(where / "benchmark.json", bench)
        write_json_atomic(where / "verdict.json", {**ledger.as_dict(), "plan_hash": plan.hash, "gpu_model": gpu_model,
                                                   "lost": lines})
        durations = merged_durations(shards, counted)
        if durations:
            write_json_atomic(where / "durations.json", durations)
        (where / "report.html").write_text(render_merged_report(
            shard_rows(plan, shards, runs, counted, lines), cell_verdicts(plan, shards, ledger, counted),
            merged["records"], merged.get("engines") or {}, merged["environment"], ledger.as_dict(),
            f"Merged night on {gpu_model}: plan {short(plan.hash)}, {len(shards)} shard(s)"))
        print_verdict(gpu_model, ledger, lines)
        code = ledger.exit_status(0)
        status = code if (code == 1 or status == 0) else status
    return status


if __name__ == "__main__":
    sys.exit(main())
