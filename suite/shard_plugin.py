"""``--plan plan.json --shard K/N``: this run is shard K of a plan (suite/fleet/shard.py), and runs exactly its models'
tests, as one host's run would (one xdist worker per GPU, the same verdict rules); the other shards' tests are
deselected at collection, and the header says so in one line.

Fail closed: a plan that cannot be trusted, a shard count that is not the plan's, a config, model or cell list that
is not the plan's, a GPU that is not the shard's, or a collected test of another shard's cell is a usage error
(exit 4) naming what differs; never a smaller night that passes. A required engine that no model of the shard lists
is left out in the open ("not judged in this run, although the config requires them"), as --models would leave it:
the shards that run it judge it, and suite-merge (tools/merge.py) judges the night.

Its own pytest plugin (its pytest11 entry point), after suite/plugin.py's configure, so that the suite's hooks stay
as they are where no plan is given: no plan, today's run.
"""

from __future__ import annotations

import pytest

from suite.environment import fingerprint
from suite.fleet.scheduling import work_unit_of
from suite.fleet.shard import (
    PlanError,
    check_shard,
    config_cells,
    load_plan,
    owner,
    parse_shard,
    shard_block,
    stray_units,
)
from suite.fleet.workers import is_worker
from suite.gate.baseline_environment import config_digest
from suite.hooks.collection import some_names
from suite.options import options_of
from suite.state import RUN_KEY, SHARD_KEY


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("inference-suite", "inference regression suite")
    group.addoption("--plan", default=None, metavar="PLAN",
                    help="a plan of shards (suite-plan's plan.json): with --shard, run only that shard's models; a "
                         "shard whose config, models or cells are not the plan's is a usage error (docs/nightly.md)")
    group.addoption("--shard", default=None, metavar="K/N", help="which shard of --plan this run is: K of N, from 1")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """After the suite's configure (the run's config, narrowed by the options, is known): the plan checked against
    this run, and the shard recorded (SHARD_KEY)."""
    given = options_of(config)
    path, text = given.plan, given.shard
    if path is None and text is None:
        return
    if path is None or text is None:
        raise pytest.UsageError("--plan and --shard go together: --plan plan.json --shard K/N (suite-plan writes the "
                                "plan and says N)")
    if RUN_KEY not in config.stash:
        raise pytest.UsageError("--plan/--shard: the suite's plugin (suite.plugin) is not loaded")
    state = config.stash[RUN_KEY]
    device = given.device
    try:
        index, of = parse_shard(text)
        plan = load_plan(path)
        gpu = fingerprint(device).get("gpu_name") if device.startswith("cuda") and not is_worker(config) else None
        shard = check_shard(plan, index, of, config_digest(state.config.path), config_cells(state.config.models),
                            gpu)
    except PlanError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[SHARD_KEY] = shard_block(plan, shard)
    listed = {e for m in shard.models for e in state.config.models[m].engines}
    for engine in sorted(set(state.required_by) - listed):
        del state.required_by[engine]
        state.required_engines.discard(engine)
        state.left_out[engine] = (f"no model of {plan.label(index)} lists it: the shards that run its models judge "
                                  "it, and suite-merge the night")


def pytest_report_header(config: pytest.Config) -> list[str]:
    block = config.stash.get(SHARD_KEY, None)
    if block is None:
        return []
    return [f"shard {block['shard']}/{block['of']} of plan {block['plan_hash'][:12]} ({options_of(config).plan}), "
            f"planned for {block['gpu_model']}: models {', '.join(block['models'])} ({len(block['cells'])} cells); "
            "the other shards' tests are deselected"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The other shards' models' tests deselected (before the suite's own selection, a trylast hook); what is left
    must be this shard's cells, or the run is a usage error."""
    block = config.stash.get(SHARD_KEY, None)
    if block is None:
        return
    plan = load_plan(options_of(config).plan)
    shard = plan.shard(int(block["shard"]))
    if plan.hash != block["plan_hash"]:  # the file changed since configure
        raise pytest.UsageError(f"--plan {options_of(config).plan}: changed during the run (its hash is now "
                                f"{plan.hash[:12]}, was {block['plan_hash'][:12]})")
    place = work_unit_of(config)
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if owner(shard, place(item.nodeid)[1]) else dropped).append(item)
    stray = stray_units(shard, (place(item.nodeid)[0] for item in kept))
    if stray:
        raise pytest.UsageError(f"{plan.label(shard.index)}: collected test(s) of cell(s) not in the shard: "
                                f"{some_names(stray)}")
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept

