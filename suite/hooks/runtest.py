"""Around each test: what an exception out of it means for the verdict, and what its teardown releases.

A test whose model failed the start-up check fails in its setup with the check's line, before anything of the model
is made (suite/hooks/startup_check.py says which failures those are).
A cell or latency path that cannot run here (CellUnavailable) is a skip with its reason code, or a failure where
the cell is the reference or its engine is required; a resource error (out of memory, a CUDA error) fails its check
naming the memory in use; after each test the engines the next one does not need are released and each finished
cell's peak GPU memory goes to the drift gate. The hooks are suite/plugin.py's; engine lifetime is suite/lifetime.py.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from engines.base import UNAVAILABLE, CellUnavailable
from suite import verdict
from suite.gate import census
from suite.gate.state import gate_of
from suite.gpu_memory import in_use, resource_error
from suite.hooks import startup_check
from suite.lifetime import cell_of
from suite.state import LIFETIME_KEY, RUN_KEY, SESSION_KEY


def pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
    """pytest_pyfunc_call's wrapper: a cell or latency path that cannot run here is a skip with its reason code,
    unless the user required it.

    The fp32 reference must always run (every other cell is judged against it), and an engine the
    config requires ([run] requires) or the command line names (--engines) must run where the check
    needs something missing: those fail, naming the requirement."""
    try:
        return (yield)
    except CellUnavailable as exc:
        _not_a_resource_error(pyfuncitem, exc)
        state = pyfuncitem.config.stash[RUN_KEY]
        cell = getattr(exc, "cell", None)
        if cell is not None and cell.is_reference:
            pytest.fail(f"the fp32 reference {cell.id} cannot run, so nothing can be judged against it: {exc}",
                        pytrace=False)
        if cell is not None and exc.code == UNAVAILABLE and cell.engine in state.required_engines:
            pytest.fail(f"{cell.id}: engine {cell.engine} is required ({state.required_by[cell.engine]}) and cannot "
                        f"run here: {exc}", pytrace=False)
        verdict.skip(exc.code, str(exc))
    except Exception as exc:
        _not_a_resource_error(pyfuncitem, exc)
        raise


def _not_a_resource_error(item: pytest.Item, exc: BaseException) -> None:
    """An out-of-memory error, an arena's failed allocation or a CUDA error fails its check, whatever raised it
    (an engine's build, a capture, a run), naming the cell, the GPU memory in use and the engines alive."""
    cell = cell_of(item)
    if cell is None or isinstance(exc, AssertionError):  # a test of no engine; a judgement (its text may quote one)
        return
    found = resource_error(exc)
    if found is None:
        return
    lifetime = item.config.stash[LIFETIME_KEY]
    pytest.fail(f"resource error in {cell.id}: {found}\n  GPU memory in use: "
                f"{in_use(lifetime.session.device, lifetime.meter)}\n  engines alive in this process: "
                f"{', '.join(lifetime.session.alive()) or 'none'}", pytrace=False)


def before_setup(item: pytest.Item) -> None:
    """A test of a model that failed its start-up check fails now, naming the model and the cause: not a skip (the
    check could not run because the model is broken here, which is what the run must report), and before its
    fixtures make the model again."""
    failure = startup_check.model_failure(item)
    if failure is not None:
        model, line = failure
        item.user_properties.append((verdict.START_UP_FAILURE, model))
        pytest.fail(line, pytrace=False)


def after_call(item: pytest.Item, records: list[dict[str, Any]]) -> None:
    """After the test function, whatever it raised: each cell of the records it made whose precision census says
    its precision is not run is not judged as a check of that precision (suite/gate/census.py). Issued here, where
    every test that records a cell passes, not from ``gate.check()``, which the rebuild and padding tests never
    call (issue 45)."""
    if SESSION_KEY in item.config.stash:
        census.check_precision(item, item.config.stash[SESSION_KEY], records)


def after_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the test's fixtures are gone: release the engines the next test does not need (suite/lifetime.py),
    and compare each finished cell's peak GPU memory with the accuracy baseline's (the drift gate)."""
    lifetime = item.config.stash.get(LIFETIME_KEY, None)
    if lifetime is None or startup_check.model_failure(item) is not None:  # it made nothing, and measured nothing
        return
    gate = gate_of(item.config)
    failures = []
    for record in lifetime.after(item, nextitem):
        component, message = gate.check_memory(record) if gate is not None else (None, None)
        if component is not None:
            verdict.report_component(item, component)
        if message:
            failures.append(message)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
