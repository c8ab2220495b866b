"""The gate's pytest hooks and fixtures, and nothing else: each hook delegates to the module of its concern.

Registered as a plugin of its own (pyproject.toml's pytest11 entry point ``suite.gate.plugin``, or conftest.py's
pytest_plugins where the project is not installed). No other module imports this one: what the suite reads of the
gate is in suite/gate/state.py and tables.py, so this module is imported only when pytest registers it, early enough
for pytest to rewrite its asserts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from metrics.drift import DriftTolerances
from suite.gate import inject, tables
from suite.gate.baselines import BaselineError, refuse_self_test_run, saved_fingerprint
from suite.gate.check import METER_KEY, GateCheck
from suite.gate.cpu_meter import CpuMeter
from suite.gate.state import GATE_KEY, gate_from_options, gate_of
from suite.gate.wall_bound import DEFAULT_FACTOR
from suite.options import options_of
from suite.results import incompleteness
from suite.state import suite_session


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("inference-suite-gate", "inference suite: baselines and gates (docs/gating.md)")
    group.addoption("--latency-baseline", default=None, metavar="FILE|ID|latest|last:K",
                    help="saved pytest-benchmark run(s) to gate latency against: files or run ids (0003), comma-"
                         "separated, 'latest', or 'last:K' (the K newest under --benchmark-storage; with K >= 2 the "
                         "gate also learns each case's run-to-run noise)")
    group.addoption("--latency-regression", default="5%", metavar="PCT",
                    help="slowdown the latency gate must catch (default 5%%): a case fails when its median is "
                         "significantly slower (CI above 1) and slower by at least half of this")
    group.addoption("--latency-confidence", default="99%", metavar="PCT",
                    help="confidence of the latency gate's interval (default 99%%)")
    group.addoption("--latency-busy-limit", default="20%", metavar="PCT",
                    help="cases measured while other processes used more than this share of the CPUs are "
                         "reported as 'busy', not gated (default 20%%; 100%% gates them all)")
    group.addoption("--latency-busy-retries", type=int, default=2, metavar="N",
                    help="re-measure a case measured busy, or a device-bound case whose rounds fell in two "
                         "modes, up to N times (default 2); still busy, it is not judged")
    group.addoption("--latency-case-bound", default=f"{DEFAULT_FACTOR:g}x", metavar="FACTOR",
                    help="a latency case may take FACTOR times its first attempt, re-measures included (default "
                         "%(default)s): a re-measure that would end past it is not begun, or is stopped, and the case "
                         "ends 'busy', saying so")
    group.addoption("--accept-incomplete-baseline", action="store_true", default=False,
                    help="use a baseline saved by a run that was interrupted (its missing cases are not judged)")
    group.addoption("--accuracy-baseline", default=None, metavar="FILE",
                    help="a --suite-results JSON to gate top-1/top-5 and parity figures against")
    group.addoption("--accuracy-drift", default=DriftTolerances().describe(), metavar="SPEC",
                    help="allowed drift against --accuracy-baseline (default %(default)s): top-1/top-5/isclose "
                         "drops in points, MAE growth factor, each cell's peak GPU memory growth factor")
    group.addoption("--inject-slowdown", default=None, metavar="PCT",
                    help="SELF-TEST ONLY: make every latency round slower by this fraction of its own time "
                         "(busy-wait after the call) to show the latency gate fails")
    group.addoption("--inject-accuracy-drop", default=None, metavar="PCT",
                    help="SELF-TEST ONLY: flip the top-1 class of this fraction of rows in every non-reference "
                         "engine's outputs to show the drift gate fails")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[GATE_KEY] = gate_from_options(config)


def pytest_sessionstart(session: pytest.Session) -> None:
    """The accuracy knob alters every non-reference engine's outputs through the session's output seam
    (SuiteSession.alter_outputs: every accuracy/parity output goes through ``run_batched``)."""
    gate = gate_of(session.config)
    if gate is None or not gate.inject_accuracy_drop:
        return
    fraction = gate.inject_accuracy_drop

    def flip(cell: Any, outputs: dict[str, Any]) -> dict[str, Any]:
        return outputs if cell.is_reference else inject.flip_top1(outputs, fraction)

    suite_session(session.config).alter_outputs(flip)


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any, machine_info: Any,
                                          compared_benchmark: dict[str, Any]) -> None:
    """``--benchmark-compare`` loads the run it compares with itself: it is refused on the same grounds as a
    --latency-baseline (a run that did not end, a run made with a self-test knob)."""
    given = options_of(config)
    try:
        _refuse_incomplete_compared(compared_benchmark, bool(given.accept_incomplete_baseline))
        refuse_self_test_run(Path(str(given.benchmark_compare)), compared_benchmark, "--benchmark-compare's run")
    except BaselineError as exc:
        raise pytest.UsageError(str(exc)) from exc
    gate = gate_of(config)
    if gate is not None:
        spec = given.benchmark_compare
        gate.compared.append((f"--benchmark-compare {'latest' if spec is True else spec}",
                              saved_fingerprint(compared_benchmark)))


def _refuse_incomplete_compared(data: dict[str, Any], accept: bool) -> None:
    why = incompleteness(data)
    if why and not accept:
        raise BaselineError(f"--benchmark-compare: the compared run did not end ({why}): the cases it never reached "
                            "would compare with nothing; compare with a complete run, or pass "
                            "--accept-incomplete-baseline")


def pytest_report_header(config: pytest.Config) -> list[str]:
    return tables.header_lines(config)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    tables.terminal_summary(terminalreporter, config)


@pytest.fixture
def latency_wrapper(request: pytest.FixtureRequest) -> Any:
    """``latency_wrapper(timed)``: the timed callable, slowed by ``--inject-slowdown`` if given; also
    starts measuring other processes' CPU use for the case."""
    gate = gate_of(request.config)

    def wrap(timed: Any) -> Any:
        request.node.stash[METER_KEY] = CpuMeter()
        if gate is not None and gate.inject_slowdown:
            return inject.SlowedCall(timed, gate.inject_slowdown)
        return timed

    return wrap


@pytest.fixture
def gate(request: pytest.FixtureRequest) -> GateCheck:
    """``gate.check()`` at the end of a test: its accuracy/parity/latency records against the baselines."""
    return GateCheck(request)
