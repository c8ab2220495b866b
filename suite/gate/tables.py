"""What the gate prints: its report-header lines, its part of the verdict block (suite/hooks/summary.py), and the
latency and drift tables of the terminal summary. The HTML report (report/) reads ``Gate.as_dict`` instead."""

from __future__ import annotations

import os
from typing import Any

import pytest

from metrics.regression import detection_power
from suite.gate.latency import BENCHMARK_COMPARE_NOTE, NO_BASELINE_OPTIONS, LatencyOutcome, pct
from suite.gate.state import Gate, gate_of
from suite.options import options_of
from suite.state import suite_session


def header_lines(config: pytest.Config) -> list[str]:
    """The gate's lines of pytest's report header: its baselines, their warnings, the knobs."""
    gate = gate_of(config)
    if gate is None:
        return []
    lines = []
    if gate.latency_baseline is not None:
        b = gate.latency_baseline
        busy = sum(1 for v in b.interference.values() if v > gate.busy_limit)
        lines.append(f"latency gate: baseline {b.source} ({b.datetime or 'undated'}, {len(b.samples)} cases"
                     + (f", {busy} saved busy" if busy else "") + f"), fails at a significant slowdown >= "
                     f"{gate.max_slowdown * 50:g}% (--latency-regression {gate.max_slowdown * 100:g}%)")
    if gate.results_baseline is not None:
        lines.append(f"drift gate: baseline {gate.results_baseline.source} "
                     f"({len(gate.results_baseline.records)} records), tolerances {gate.drift.describe()}")
    lines.extend(f"WARNING: {w}" for w in gate.warnings)
    for which, (source, diff) in gate.environment_differences().items():
        lines.append(f"WARNING: {which} baseline {source} comes from a DIFFERENT ENVIRONMENT:")
        lines.extend(f"WARNING:   {k}: {b} -> {c}" for k, (b, c) in diff.items())
    if options_of(config).benchmark_compare_fail:
        lines.append(f"NOTE: {BENCHMARK_COMPARE_NOTE}")
    if gate.inject_slowdown:
        lines.append(f"SELF-TEST: every latency round is slowed down by {gate.inject_slowdown * 100:g}%")
    if gate.inject_accuracy_drop:
        lines.append(f"SELF-TEST: top-1 flipped on {gate.inject_accuracy_drop * 100:g}% of rows of every engine")
    return lines


def verdict_lines(config: pytest.Config) -> list[tuple[str, dict[str, bool]]]:
    """The gate's part of the verdict block (suite/hooks/summary.py): coverage, regressions with their figures,
    and what weakens the comparison."""
    gate = gate_of(config)
    if gate is None:
        return []
    lines: list[tuple[str, dict[str, bool]]] = []
    if options_of(config).benchmark_compare_fail:
        lines.append((f"NOTE: {BENCHMARK_COMPARE_NOTE}", {"yellow": True}))
    for which, coverage in gate.coverage.items():
        lines.append((f"{which} gate: {coverage.describe(gate.gated(which))}",
                      {"yellow": bool(coverage.without_baseline or coverage.absent_from_run)}))
    ungated = gate.ungated()
    if ungated:
        lines.append((f"latency gate: no baseline given ({NO_BASELINE_OPTIONS}): gated 0 of {ungated} cases; "
                      f"{ungated} timed, not judged (no-baseline)", {"yellow": True}))
    line = other_hosts_line(gate)
    if line:
        lines.append((line, {"yellow": True}))
    for o in gate.latency:
        if o.status == "regression" and o.comparison is not None:
            c = o.comparison
            where = gate.other_host(o.label)
            lines.append((f"  REGRESSION {o.label}: {c.baseline_median_s * 1e3:.4g} -> "
                          f"{c.current_median_s * 1e3:.4g} ms ({c.change_pct:+.2f}%), CI {c.interval_text}"
                          + (f"; {where}" if where else ""), {"red": True}))
    for o in gate.drift_results:
        if o.comparison.failed:
            figures = "; ".join(f.describe() for f in o.comparison.failures)
            lines.append((f"  DRIFT {o.label}: {figures}", {"red": True}))
    for warning in gate.warnings + gate.saved_busy_warning():
        lines.append((f"WARNING: {warning}", {"yellow": True}))
    busy = busy_run_line(gate, suite_session(config).records, os.getloadavg()[0], len(os.sched_getaffinity(0)))
    if busy:
        lines.append((busy, {"yellow": True}))
    return lines


def busy_run_line(gate: Gate, records: list[dict[str, Any]], load: float, cores: int) -> str | None:
    """One line where latency cases were timed while other processes used the CPUs (the CPU meter's share of any
    attempt above --latency-busy-limit, suite/gate/cpu_meter.py) or stopped at their bound: the run was slow, and its
    times are a busy machine's. Beside one busy loop on 2 cores torch cases ran up to 135x slower (issue 47)."""
    shares = [[a.get("interference") for a in r.get("attempts") or ()] for r in records if r.get("kind") == "latency"]
    busy = sorted(max(x for x in s if x is not None) for s in shares
                  if any(x is not None and x > gate.busy_limit for x in s))
    if not busy and not gate.stopped:
        return None
    line = (f"machine busy: other processes used more than {gate.busy_limit * 100:g}% of the CPUs while {len(busy)} of "
            f"{len(shares)} latency cases were timed" + (f" (median {pct(busy[len(busy) // 2])})" if busy else "")
            + f", load average {load:.1f} on {cores} cores at the end: this run's times are a busy machine's")
    if gate.stopped:
        names = list(gate.stopped)
        line += (f"; {len(names)} case(s) stopped re-measuring at their bound (--latency-case-bound "
                 f"{gate.case_bound:g}x), not judged (busy): {', '.join(names[:4])}"
                 + (" ..." if len(names) > 4 else ""))
    return line


def terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The gate's sections of the terminal summary: another environment, the knobs, the two tables."""
    gate = gate_of(config)
    if gate is None:
        return
    gate.finish(suite_session(config).records)
    tr = terminalreporter
    for which, (source, diff) in gate.environment_differences().items():
        tr.section(f"WARNING: {which} baseline from a DIFFERENT ENVIRONMENT", sep="!", red=True, bold=True)
        tr.write_line(f"{source} was measured on another machine or software stack; its comparisons are shown "
                      "but may reflect the environment, not the engine:", red=True)
        for key, (base, cur) in diff.items():
            tr.write_line(f"  {key:<24} {base!s:>28}  ->  {cur!s}", red=True)
    if gate.inject_slowdown or gate.inject_accuracy_drop:
        tr.section("SELF-TEST KNOBS WERE ON", sep="!", yellow=True)
        if gate.inject_slowdown:
            tr.write_line(f"--inject-slowdown {gate.inject_slowdown * 100:g}%: every latency round was made slower")
        if gate.inject_accuracy_drop:
            tr.write_line(f"--inject-accuracy-drop {gate.inject_accuracy_drop * 100:g}%: engine outputs were altered")
    if gate.latency_baseline is not None:
        latency_table(tr, gate)
        group_lines(tr, gate)
    if gate.results_baseline is not None:
        drift_table(tr, gate)
        session = suite_session(config)
        structure_lines(tr, gate.structure(session.engine_facts(), session.records))


def group_lines(tr: Any, gate: Gate) -> None:
    """The groups' drift (suite/gate/latency.py group_drifts): each engine's line, and every group that moved."""
    shown = [g for g in gate.groups if len(g.group) == 3 or g.verdict in ("regression", "improvement")]
    if not shown:
        return
    tr.write_line("latency by group (median change over the group's cases against the kept nights, metrics/"
                  "group_drift.py):")
    for g in shown:
        tr.write_line(f"  {g.explain()}", red=g.verdict == "regression", green=g.verdict == "improvement")


def structure_lines(tr: Any, structure: dict[str, Any] | None) -> None:
    """What changed in the engines against the accuracy baseline's, and beside each case that moved, the change
    behind it or that none was found."""
    if structure is None:
        return
    changes = structure["changes"]
    tr.write_line(f"engine structure: {len(changes)} of {structure['compared']} cells changed against the baseline's"
                  + (":" if changes else " (graph, precision, providers, size)"))
    for cell, lines in changes.items():
        tr.write_line(f"  {cell}: {'; '.join(lines)}", yellow=True)
    kernels = kernels_line(structure)
    if kernels:
        tr.write_line(kernels, yellow=bool(structure["kernels"]["other_kernels"]))
    for case, why in structure["moved"].items():
        tr.write_line(f"  moved {case}: {why}")


def kernels_line(structure: dict[str, Any]) -> str | None:
    """For every case both runs listed kernels for (--kernel-profile): how many now run other kernels, named."""
    kernels = structure.get("kernels")
    if not kernels:
        return None
    other = kernels["other_kernels"]
    return (f"kernels: other kernels in {len(other)} of {kernels['profiled']} cases profiled in both runs"
            + (f": {', '.join(other[:8])}" + (" ..." if len(other) > 8 else "") if other else ""))


def power_line(gate: Gate) -> str | None:
    """How much each compared case could have seen (metrics.regression LatencyComparison.detectable_slowdown): the
    count that could catch a 2 % and a 5 % slowdown, and the median smallest detectable change, so that
    'unchanged' says what it rules out."""
    smallest = sorted(o.comparison.detectable_slowdown for o in gate.latency
                      if o.comparison is not None and o.status not in ("busy", "no-baseline"))
    if not smallest:
        return None
    middle = smallest[len(smallest) // 2]
    compared, at2, at5 = detection_power(smallest)
    return (f"power: {at2} of {compared} compared cases could see a 2% slowdown, {at5} a 5% one; median smallest "
            "detectable slowdown "
            + ("unbounded" if middle == float("inf") else f"{middle * 100:.1f}%"))


def other_hosts_line(gate: Gate) -> str | None:
    """How many compared cases were gated against a baseline another host measured (a merged night's, or one
    kept from another host of the GPU model): their change holds the hosts' difference too."""
    moved, compared, hosts = gate.other_hosts()
    if not moved:
        return None
    return (f"latency gate: {moved} of {compared} compared cases against a baseline measured on another host "
            f"({', '.join(hosts)}; this run: {gate.host()}); each such case says so "
            "(docs/nightly.md, \"Past one host\")")


def latency_table(tr: Any, gate: Gate) -> None:
    by_status: dict[str, list[LatencyOutcome]] = {}
    for o in gate.latency:
        by_status.setdefault(o.status, []).append(o)
    title = (f"latency gate: {gate.max_slowdown * 100:g}% threshold, {gate.confidence * 100:g}% CI, "
             f"baseline {gate.latency_baseline.source if gate.latency_baseline else '-'}")
    tr.section(title, sep="-", red=bool(by_status.get("regression")))
    shown = [o for s in ("regression", "improvement", "slower-clock", "busy", "inconclusive")
             for o in by_status.get(s, [])]
    if shown:
        tr.write_line(f"{'case':<52}{'baseline':>11}{'current':>11}{'change':>9}  {'CI of ratio':<18}"
                      f"{'others CPU now / base':>22}  verdict")
        for o in shown:
            c = o.comparison
            assert c is not None
            others = f"{pct(o.interference)} / {pct(o.baseline_interference)}"
            status = o.status + (f" ({o.busy_side})" if o.busy_side else "")
            tr.write_line(f"{o.label:<52}{c.baseline_median_s * 1e3:>9.4g}ms{c.current_median_s * 1e3:>9.4g}ms"
                          f"{c.change_pct:>+8.2f}%  {c.interval_text:<18}{others:>22}  {status}",
                          red=o.status == "regression", green=o.status == "improvement",
                          yellow=o.status in ("busy", "inconclusive", "slower-clock"))
            if o.clocks:
                tr.write_line(f"    {o.clocks}", yellow=True)
            where = gate.other_host(o.label)
            if where:
                tr.write_line(f"    {where}", yellow=True)
    counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_status.items()))
    tr.write_line(f"cases: {counts or 'none compared'}")
    line = other_hosts_line(gate)
    if line:
        tr.write_line(line, yellow=True)
    power = power_line(gate)
    if power:
        tr.write_line(power)
    missing = by_status.get("no-baseline", [])
    if missing:
        tr.write_line(f"no baseline for {len(missing)} cases: {', '.join(o.label for o in missing[:8])}"
                      + (" ..." if len(missing) > 8 else ""), yellow=True)
    base = gate.latency_baseline
    if base is not None and base.without_samples:
        tr.write_line(f"{len(base.without_samples)} baseline cases hold no per-round samples (saved before the gate "
                      "existed; save a new baseline)", yellow=True)


def drift_table(tr: Any, gate: Gate) -> None:
    failed = [o for o in gate.drift_results if o.comparison.failed]
    changed = [o for o in gate.drift_results if o.comparison.changed and not o.comparison.failed]
    tr.section(f"accuracy/parity drift gate: {gate.drift.describe()}, baseline "
               f"{gate.results_baseline.source if gate.results_baseline else '-'}", sep="-", red=bool(failed))
    for o in failed + changed:
        figures = "; ".join(f.describe() for f in o.comparison.figures)
        tr.write_line(f"{'DRIFT ' if o.comparison.failed else 'moved '}{o.label}: {figures}",
                      red=o.comparison.failed)
    unchanged = len(gate.drift_results) - len(failed) - len(changed)
    tr.write_line(f"records: {len(failed)} drifted beyond tolerance, {len(changed)} moved within it, "
                  f"{unchanged} identical")
    if gate.no_accuracy_baseline:
        tr.write_line(f"no baseline for {len(gate.no_accuracy_baseline)} records: "
                      f"{', '.join(gate.no_accuracy_baseline[:6])}" + (" ..." if len(gate.no_accuracy_baseline) > 6
                                                                        else ""), yellow=True)
