"""What the suite prints on the terminal besides the verdict block (suite/hooks/summary.py): the header's lines on the
config, the required engines and the accepted not-judged reasons, and the summary's engine cache, engines, rebuild
check, time, CPU shares, GPU memory and not-collected lines.
"""

from __future__ import annotations

from typing import Any

import pytest

from suite.checks.rebuild import describe as describe_rebuild
from suite.fleet.timeline import Timeline, set_up_seconds
from suite.fleet.warm_up import warm_up_line
from suite.gpu_memory import memory_summary
from suite.hooks import collection
from suite.options import options_of
from suite.state import LEDGER_KEY, RUN_INFO_KEY, RUN_KEY, SESSION_KEY


def header_lines(config: pytest.Config) -> list[str]:
    """pytest_report_header: the config, the device, the required engines and the not-judged reasons accepted."""
    state, ledger = config.stash.get(RUN_KEY, None), config.stash.get(LEDGER_KEY, None)
    if state is None or ledger is None:
        return []
    required = ", ".join(f"{e} ({why})" for e, why in sorted(state.required_by.items())) or "nothing"
    if state.left_out:
        required += "; not judged in this run, although the config requires them: " + ", ".join(
            f"{e} ({how})" for e, how in sorted(state.left_out.items()))
    accepted, given = ", ".join(ledger.accepted) or "no reason", options_of(config)
    return [f"suite: config {state.config.path}, device {given.device_requested}; required engines: {required}",
            f"suite: a check may end not judged, and the run still pass, for: {accepted}"
            + ("" if given.accept_not_judged is not None else f" ([run] accept_not_judged in "
               f"{state.config.path.name}; --accept-not-judged overrides)")]


def summary(tr: Any, config: pytest.Config) -> None:
    """pytest_terminal_summary: the engine cache's corrupt entries, the engines built, the rebuild check, the time per
    phase and worker, the workers' CPU shares, peak GPU memory, what was not collected, and the cache's line."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    stats = session.cache.stats
    corrupt = stats.corrupt_rebuilds
    if corrupt:
        tr.section("engine cache: corrupt entries rebuilt", sep="-", yellow=True)
        for event in corrupt:
            tr.write_line(f"{event.label}: {event.detail}")
    facts = session.engine_facts()
    if facts:
        tr.section("engines", sep="-")
        tr.write_line(f"{'cell':<44}{'size MB':>10}{'layers':>9}{'params':>12}")
        for cell_id, f in facts.items():
            size = f"{f['size_mb']:.2f}" if f.get("size_mb") is not None else "-"
            tr.write_line(f"{cell_id:<44}{size:>10}{f.get('layers') or '-':>9}{f.get('parameters') or '-':>12}")
    rebuilds = [r for r in session.records if r.get("kind") == "rebuild"]
    if rebuilds:
        tr.section("rebuild check (--rebuild-check)", sep="-")
        for r in rebuilds:
            same = r["identical_outputs"] and r["identical_artifacts"] in (True, None)
            tr.write_line(describe_rebuild(r["cell"], r), yellow=not same)
    phases = config.pluginmanager.get_plugin("suite-fleet").phases()  # type: ignore[union-attr]
    if phases:
        workers = config.pluginmanager.get_plugin("suite-fleet").worker_seconds()  # type: ignore[union-attr]
        tr.write_line("time per phase: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
                      + (f" (summed over {len(workers)} workers: " + ", ".join(f"{w} {t:.1f} s" for w, t in
                                                                              workers.items()) + ")"
                         if workers else ""))
    set_up = set_up_seconds(session.records)
    if set_up:
        tr.write_line(f"latency set-up outside the rounds: {sum(set_up.values()):.1f} s ("
                      + ", ".join(f"{k} {v:.1f} s" for k, v in set_up.items()) + ")")
    worker_time = config.pluginmanager.get_plugin("suite-fleet").timeline.summary()  # type: ignore[union-attr]
    if worker_time:
        tr.write_line(worker_time)
    info = config.stash.get(RUN_INFO_KEY, None)
    outside = Timeline.outside_summary(info.get("milestones", {})) if info else None
    if outside:
        tr.write_line(outside)
    warm = info.get("warm_up") if info else None
    if warm:
        tr.write_line(warm_up_line(warm))
    cpus = config.pluginmanager.get_plugin("suite-fleet").worker_cpus  # type: ignore[union-attr]
    if cpus:
        tr.write_line("worker CPU shares: " + "; ".join(f"{w} {c['cpus']}, {c['threads'] or 'default'} threads"
                                                        for w, c in sorted(cpus.items())))
    memory = memory_summary(session.records)
    if memory:
        tr.write_line(memory)
    for line in collection.not_collected_lines(config):
        tr.write_line(line)
    state = config.stash.get(RUN_KEY, None)
    if state is not None and state.results_written is not None:  # (one that failed said so in its own line)
        tr.write_line(f"suite results written to {state.results_written[0]}")
    elif state is not None and state.results_note:
        tr.write_line(state.results_note)
    tr.write_line(stats.summary_line())
