"""Once the run's tests are collected, before any test: the start-up check of every model they use (suite/preflight/),
so that a model that cannot run is one line naming it and the cause, not a long traceback in each of its tests, and
the gates' coverage of them; and the progress lines that the start-up check and the engine cache's builds print.

Where a failure ends the run, and where it fails only its model (issue 42). A night used to stop whole, exit 4 and
no test run, when one model failed its check: transformers 4.57 made minilm_l6_fused's smoke forward raise, and
every other model's verdict went with it. The line, per error class:

- a usage error (exit 4, no test runs): what is wrong in the config file or the command line themselves, found by
  reading them, before any model's code runs: ``ConfigError`` from suite/config/ (unknown keys, bad values, a
  ``factory`` not of the form ``package.module:callable``, ``--models`` naming no model; raised in
  suite/hooks/configure.py), the options' errors, and ``CacheUnusable`` (the engine cache, which every model needs, is
  unusable: a full disk under the check's own entries);
- that model's failure (``PreflightError``, one per failed model, ``PreflightErrors`` for several): what making and
  running the model found: its factory's module does not import, the factory raises or returns no module, the
  smoke forward raises or returns other outputs than the config names, a data set is missing or does not fit.
  The same file passes or fails these with the packages, weights and data installed (minilm_l6_fused's declared
  inputs were right for transformers 5 and wrong for 4.57), so the check cannot tell a wrong declaration from a
  changed environment, and either way the other models can still be judged. Each of the model's collected tests
  fails in its setup, before anything of the model is made, with one line: the model and the check's line
  (``model_failure``); the full block (with what the model printed) is shown once, when the check ends; the
  verdict counts the model's checks failed, and the other models' tests run and are judged as usual.

Under xdist the controller checks and its workers run the tests: the controller leaves the failed models in a file
of the engine cache (``configure_node`` tells each worker where) before it hands out any test.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.cache import CacheUnusable
from suite.config import ConfigError
from suite.gate.state import set_coverage
from suite.hooks import collection
from suite.lifetime import model_of_nodeid
from suite.options import collect_only, options_of, overhead_model
from suite.preflight import PROGRESS_PREFIX, PreflightError, PreflightErrors, check_models, startup_message
from suite.state import RUN_KEY, ledger_of, suite_session

log = logging.getLogger("suite")

#: The key of an xdist worker's workerinput that names the file of the failed models (configure_node).
FAILED_MODELS_INPUT = "suite_failed_models"


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
    if reporter is not None and options_of(config).verbose >= 0:
        reporter.write_line(f"{PROGRESS_PREFIX} {text}")


def _preflight(config: pytest.Config, nodeids: list[str]) -> None:
    """The start-up check of every model the collected tests use: a model that failed fails its tests (one line
    each, ``model_failure``); what is wrong with the run itself is a usage error (note_collected keeps its text for
    the verdict: the usage error ends the run first). The module's docstring draws the line."""
    state = config.stash[RUN_KEY]
    if collect_only(config):
        return
    overhead = overhead_model(config)
    used = collection.models_of(nodeids, state.config.models, overhead_model=overhead)
    if not used:
        _note_failed_models(config, [])
        return
    if state.early_check is not None:  # made while the workers started (check_early): what concerns these models
        found = _concerning(state.early_check[1], set(used))
    else:
        found = _caught(lambda: _check(config, used))
    if isinstance(found, (PreflightError, PreflightErrors)):
        _note_failed_models(config, found.errors if isinstance(found, PreflightErrors) else [found])
        _tell_failed_models(config, found)
        return
    _note_failed_models(config, [])
    _raise_for(config, found)


def _note_failed_models(config: pytest.Config, errors: list[PreflightError]) -> None:
    """Remember each failed model's line for its tests, and leave them where an xdist controller's workers read
    them (an empty file too: the workers know the check is done)."""
    state = config.stash[RUN_KEY]
    state.failed_models = {e.model: str(e) for e in errors}
    path = state.failed_models_file
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state.failed_models, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:  # the workers cannot be told: the run cannot keep its promise to fail those models
        raise pytest.UsageError(f"--engine-cache: cannot leave the models that failed their start-up check for "
                                f"the workers in {path}: {exc}") from exc


def _tell_failed_models(config: pytest.Config, found: PreflightError | PreflightErrors) -> None:
    """The whole block once (each failed model's line and what it printed), on the terminal and in the log: each
    test of those models then fails with its model's line alone."""
    state = config.stash[RUN_KEY]
    text = startup_message(found, state.config.path.name)
    names = ", ".join(sorted(state.failed_models or {}))
    head = (f"{PROGRESS_PREFIX} start-up check failed for {names}: each of its tests fails with the cause; the other "
            "models' tests run")
    log.error("%s\n%s", head, text)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for line in (head, *text.splitlines()):
            reporter.write_line(line, red=True)


def configure_node(config: pytest.Config, node: Any) -> None:
    """An xdist controller, as it starts a worker: where the worker reads the models that failed their start-up
    check (a file of the engine cache, one per run, written by the check before any test is handed out)."""
    state = config.stash[RUN_KEY]
    if state.failed_models_file is None:
        run = str(getattr(node, "workerinput", {}).get("testrunuid") or uuid.uuid4().hex)
        state.failed_models_file = suite_session(config).cache.root / "preflight" / f"failed-models-{run}.json"
    node.workerinput[FAILED_MODELS_INPUT] = str(state.failed_models_file)


def forget_failed_models(config: pytest.Config) -> None:
    """At the end of an xdist controller's run: its file for the workers goes."""
    state = config.stash.get(RUN_KEY, None)
    if state is not None and state.failed_models_file is not None and not hasattr(config, "workerinput"):
        with contextlib.suppress(OSError):
            state.failed_models_file.unlink()


def model_failure(item: pytest.Item) -> tuple[str, str] | None:
    """(the model, the line its test fails with) where the test's model failed the start-up check (None: it did
    not, or the test uses no model). An xdist worker reads the controller's finding from the file configure_node
    named."""
    config = item.config
    state = config.stash.get(RUN_KEY, None)
    if state is None:
        return None
    if state.failed_models is None:
        path = getattr(config, "workerinput", {}).get(FAILED_MODELS_INPUT)
        if not path:
            return None
        try:
            state.failed_models = {str(k): str(v) for k, v in json.loads(Path(path).read_text()).items()}
        except FileNotFoundError:  # not written: the controller checked no model (--collect-only)
            return None
    if not state.failed_models:
        return None
    model = model_of_nodeid(item.nodeid, list(state.config.models), overhead_model(config))
    if model is None or model not in state.failed_models:
        return None
    return model, f"model {model} failed its start-up check, so this check cannot run: {state.failed_models[model]}"


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
