"""The run's state: what the suite's plugins keep on pytest's config, each under a ``config.stash`` key.

One module for it, below the plugins (suite/plugin.py, suite/fleet/plugin.py, suite/gate/, suite/hooks/summary.py)
and report/plugin.py, so that each reads the run from here and none imports another's hooks to find it.
suite/hooks/configure.py sets these in pytest_configure and suite/hooks/verdict_wiring.py at the end of the run
(pytest_sessionfinish); the gate's own state is its Gate, under suite.gate.state's GATE_KEY.

Only the keys, their accessors and RunState: the types the keys hold are imported for the type checker only, so
that importing this module imports nothing of the suite's at run time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from suite.config import SuiteConfig
    from suite.lifetime import EngineLifetime
    from suite.session import SuiteSession
    from suite.verdict import Ledger


class RunState:
    """What the controlling process knows about the run beyond the ledger: requirements and timing."""

    def __init__(self, config: SuiteConfig, required_engines: set[str], required_by: dict[str, str]) -> None:
        self.config = config
        self.required_engines = required_engines
        self.required_by = required_by
        self.collected: list[str] = []
        #: an xdist controller's start-up check, made while its workers start (suite/hooks/startup_check.py
        #: check_early): None before it ran, else ("passed", None) or ("failed", the exception)
        self.early_check: tuple[str, BaseException | None] | None = None
        self.started = time.time()
        self.unwritten: list[str] = []  # files the run failed to write (suite/hooks/verdict_wiring.py)
        #: the --suite-results file this run wrote, and what it wrote there: settled again when a later file fails
        self.results_written: tuple[str, dict[str, Any]] | None = None
        #: what became of the --suite-results file where none was written (--collect-only), for the summary
        self.results_note: str | None = None
        #: engines the config requires that this run leaves out, and why (an explicit --engines, or --models)
        self.left_out: dict[str, str] = {}
        #: the models that failed their start-up check, each with its one line (suite/hooks/startup_check.py): set by
        #: the check (this process's, or an xdist controller's), read from its file by an xdist worker; None: not known
        #: yet
        self.failed_models: dict[str, str] | None = None
        #: where an xdist controller leaves ``failed_models`` for its workers (suite/hooks/startup_check.py
        #: configure_node)
        self.failed_models_file: Path | None = None


#: The session: config, cache, datasets, engines and reference outputs (every process).
SESSION_KEY: pytest.StashKey[SuiteSession] = pytest.StashKey()
#: The verdict's ledger, one per run (every process; only the controller's settles the verdict).
LEDGER_KEY: pytest.StashKey[Ledger] = pytest.StashKey()
#: Requirements, collected test ids, timing (RunState).
RUN_KEY: pytest.StashKey[RunState] = pytest.StashKey()
#: Which engines live, and for how long (suite/lifetime.py).
LIFETIME_KEY: pytest.StashKey[EngineLifetime] = pytest.StashKey()
#: Checks not collected because they cannot run on this run's device: {reason: (cell ids or the check's name,
#: how many tests)}, this process's (the terminal summary states them, one line per reason).
NOT_COLLECTED_KEY: pytest.StashKey[dict[str, tuple[list[str], int]]] = pytest.StashKey()
#: The settled verdict, ``suite.verdict.Ledger.as_dict()``: set once the run is judged (read by report/plugin.py;
#: absent where the run stopped before, e.g. during start-up).
VERDICT_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()
#: How the run was made (suite/hooks/run_identity.py run_info), set with the verdict (read by report/plugin.py).
RUN_INFO_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()
#: What differs between the baselines' environments and this run's (suite/gate/baseline_environment.py difference_block;
#: None: no baseline), set with the verdict (printed by suite/hooks/summary.py, read by report/plugin.py).
DIFFERENCE_KEY: pytest.StashKey[dict[str, Any] | None] = pytest.StashKey()
#: The plan and shard this run is (suite/fleet/shard.py shard_block), where it runs one (--plan, --shard): set at
#: configure time by suite/shard_plugin.py, said by its --suite-results, benchmark JSON and environment (every process).
SHARD_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()


def suite_session(config: pytest.Config) -> SuiteSession:
    return config.stash[SESSION_KEY]


def ledger_of(config: pytest.Config) -> Ledger:
    return config.stash[LEDGER_KEY]
