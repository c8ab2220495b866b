"""Once the run's tests are collected, before any test: the start-up check of every model they use (suite/preflight/),
so that a model that cannot run is one error naming it, not a failure in each of its tests, and the gates' coverage
of them; and the progress lines that the start-up check and the engine cache's builds print.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from core.cache import CacheUnusable
from suite import collection
from suite.config import ConfigError
from suite.gate.state import set_coverage
from suite.options import collect_only, overhead_model
from suite.preflight import PROGRESS_PREFIX, PreflightError, PreflightErrors, check_models, startup_message
from suite.state import RUN_KEY, ledger_of, suite_session

log = logging.getLogger("suite")


def note_collected(config: pytest.Config, ids: list[str]) -> None:
    """What the run will test, known once (this process's collection, or the first xdist worker's): the
    start-up check of the models it uses, and the gates' coverage of it."""
    state = config.stash[RUN_KEY]
    if state.collected:
        return
    state.collected = ids
    try:
        _preflight(config, ids)
        set_coverage(config, ids)
    except pytest.UsageError as exc:  # the error ends the run before any test: the verdict carries its text
        ledger_of(config).note_error(str(exc))
        raise


def check_early(config: pytest.Config) -> None:
    """An xdist controller, once its workers were started: the start-up check of every model the options select,
    made now, while the workers import, configure and collect in their own processes, instead of after the first
    collection, when they would all wait for it (14-20 s of the two-H100 night, docs/gpu.md). The collected tests'
    models are not known yet: every selected model is checked, and ``note_collected`` later raises what concerns
    the models the collected tests use. (Safe for the descriptors: the workers are already forked when preflight
    redirects this process's output.)"""
    state = config.stash[RUN_KEY]
    if collect_only(config):
        return
    try:
        _check(config, list(state.config.models))
    except (ConfigError, CacheUnusable) as exc:
        state.early_check = ("failed", exc)
    else:
        state.early_check = ("passed", None)


def progress(config: pytest.Config, text: str, logged: str) -> None:
    """A progress line (the cache's builds, the models' start-up check): ``PROGRESS_PREFIX text`` on the terminal,
    live whatever pytest's capture mode (not under -qq), and ``logged`` in the log."""
    log.info(logged)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and config.getoption("verbose") >= 0:
        reporter.write_line(f"{PROGRESS_PREFIX} {text}")


def _preflight(config: pytest.Config, nodeids: list[str]) -> None:
    """The start-up check of every model the collected tests use, each failure one line of one usage error
    (note_collected keeps its text for the verdict: the usage error ends the run first)."""
    state = config.stash[RUN_KEY]
    if collect_only(config):
        return
    overhead = overhead_model(config)
    used = collection.models_of(nodeids, state.config.models, overhead_model=overhead)
    if not used:
        return
    if state.early_check is not None:  # made while the workers started (check_early): what concerns these models
        _raise_for(config, _concerning(state.early_check[1], set(used)))
        return
    _raise_for(config, _caught(lambda: _check(config, used)))


def _caught(check: Callable[[], object]) -> BaseException | None:
    """The start-up check's finding as a value (None: passed), for _raise_for."""
    try:
        check()
    except (ConfigError, CacheUnusable) as exc:
        return exc
    return None


def _concerning(exc: BaseException | None, used: set[str]) -> BaseException | None:
    """The part of an early check's failure that concerns the models the collected tests use: a failed model
    that no collected test uses does not stop the run (as if it had not been checked)."""
    if not isinstance(exc, (PreflightError, PreflightErrors)):
        return exc
    failed = [e for e in (exc.errors if isinstance(exc, PreflightErrors) else [exc]) if e.model in used]
    if not failed:
        return None
    return failed[0] if len(failed) == 1 else PreflightErrors(failed)


def _raise_for(config: pytest.Config, exc: BaseException | None) -> None:
    state = config.stash[RUN_KEY]
    if isinstance(exc, ConfigError):
        raise pytest.UsageError(startup_message(exc, state.config.path.name)) from exc
    if isinstance(exc, CacheUnusable):  # the disk filled up under the start-up check's cache entries
        raise pytest.UsageError(f"--engine-cache: {exc}") from exc


def _check(config: pytest.Config, used: list[str]) -> None:
    """The start-up check of the models ``used`` (raises ConfigError or CacheUnusable)."""
    state, suite = config.stash[RUN_KEY], suite_session(config)
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def progress_line(text: str) -> None:
        progress(config, text, logged=text)

    def warn(text: str) -> None:
        log.warning(text)
        if reporter is not None:
            reporter.write_line(f"{PROGRESS_PREFIX} warning: {text}", yellow=True)

    check_models(state.config.select(used, None, None), suite.cache, suite.device, build_for=suite.build,
                 dataset_for=suite.dataset, progress=progress_line, warn=warn)
