"""What a run was: the suite's commit and config, the command, the workers and their shares, its wall time; kept in
--suite-results, the report and a saved pytest-benchmark run so that two runs can be told apart."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from suite.gate.baseline_environment import config_digest, config_keys
from suite.gate.state import self_test_knobs
from suite.gpu_memory import memory_summary
from suite.options import options_of
from suite.state import LEDGER_KEY, RUN_KEY, SHARD_KEY, suite_session

_ROOT = Path(__file__).resolve().parent.parent.parent


def run_info(config: pytest.Config) -> dict[str, Any]:
    """What the report and the results say about how this run was made."""
    state = config.stash[RUN_KEY]
    suite = suite_session(config)
    fleet_plugin = config.pluginmanager.get_plugin("suite-fleet")
    ended = time.time()
    return {"config": str(state.config.path), "device": options_of(config).device,
            "workers": len(fleet_plugin.worker_phases) or 1,  # type: ignore[union-attr]
            "phases": fleet_plugin.phases(),  # type: ignore[union-attr]
            "worker_seconds": fleet_plugin.worker_seconds(),  # type: ignore[union-attr]
            "worker_time": fleet_plugin.timeline.per_worker(),  # type: ignore[union-attr]
            "test_times": fleet_plugin.timeline.tests(),  # type: ignore[union-attr]
            **({"worker_cpus": dict(sorted(fleet_plugin.worker_cpus.items()))}  # type: ignore[union-attr]
               if fleet_plugin.worker_cpus else {}),  # type: ignore[union-attr]
            **({"warm_up": warm} if (warm := fleet_plugin.warm_ups()) else {}),  # type: ignore[union-attr]
            **({"peak_gpu_memory": memory} if (memory := memory_summary(suite.records)) else {}),
            "engine_options": {m.name: {e: dict(o) for e, o in m.engine_options.items() if o and e in m.engines}
                               for m in state.config.models.values()},
            **run_identity(config), "command": " ".join(config.invocation_params.args),
            "wall_s": round(ended - state.started, 1), "cache": suite.cache.stats.summary_line(),
            "milestones": fleet_plugin.timeline.outside_tests(state.started, ended)}  # type: ignore[union-attr]


#: What run_identity records, which every saved run carries.
IDENTITY_KEYS = ("git_commit", "config_digest", "config_keys", "shard")


def run_identity(config: pytest.Config) -> dict[str, Any]:
    """The suite's own commit and config, which every saved run records: a baseline measured by another version of
    the suite, or under another config, shows it in the difference that opens the report; and a shard's plan and
    shard, which suite-merge checks (tools/merge.py)."""
    state = config.stash.get(RUN_KEY, None)
    shard = config.stash.get(SHARD_KEY, None)  # a shard of a plan says which (suite/fleet/shard.py)
    return {"git_commit": git_commit(),
            "config_digest": config_digest(state.config.path) if state is not None else None,
            "config_keys": config_keys(state.config.path) if state is not None else None,
            **({"shard": shard} if shard is not None else {})}


def saved_benchmark_run(config: pytest.Config) -> dict[str, Any]:
    """What a saved pytest-benchmark run says of the suite's run: whether it ended (the gate refuses an incomplete
    baseline), the suite's commit and config, and the self-test knobs that altered it, if any."""
    ledger = config.stash.get(LEDGER_KEY, None)
    interrupted = ledger.interrupted if ledger is not None else None
    return {"complete": interrupted is None, "incomplete_reason": interrupted,
            **run_identity(config),
            **({"self_test_knobs": knobs} if (knobs := self_test_knobs(config)) else {})}


def git_commit() -> str | None:
    try:
        head = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head} (uncommitted changes)" if head and dirty else head or None
