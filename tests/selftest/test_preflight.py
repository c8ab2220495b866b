"""Start-up check of each model: every mistake is one short error naming the model, the key, the
declared inputs and the model's own complaint; a model that passed is not run again."""

import copy
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

from core.cache import ArtifactCache, CacheUnusable
from core.factory import FactorySignatureError, call_factory
from core.inputs import InputSpec
from engines.artifacts import ModelBuild
from suite import state, verdict
from suite.config import ConfigError, load_config, parse_config
from suite.hooks import collection, startup_check
from suite.preflight import (
    WEIGHTS_FILE,
    PreflightError,
    PreflightErrors,
    check_models,
    smoke_feed,
    startup_message,
)
from suite.session import SuiteSession
from tests.selftest import preflight_models
from tests.selftest.fake_options import options_stash

pytestmark = pytest.mark.selftest

M = "tests.selftest.preflight_models"
GOOD = {"factory": f"{M}:linear16", "outputs": ["logits"], "batch_sizes": [2, 4], "engines": ["torch"],
        "inputs": [{"name": "x", "shape": [16], "low": -1.0, "high": 1.0}]}
DECLARED = "declared inputs: x float32 [16] in [-1, 1]"


def _config(**changes):
    entry = copy.deepcopy(GOOD)
    entry.update(changes)
    return parse_config({"models": {"m": entry}})


def _error(tmp_path, **changes) -> PreflightError:
    with pytest.raises(PreflightError) as info:
        check_models(_config(**changes), ArtifactCache(tmp_path / "cache"), "cpu")
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message, message
    return info.value


def test_a_good_model_passes_and_its_result_is_cached(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    config = _config(accuracy_dataset=f"{M}:data_ok", parity_dataset=f"{M}:data_ok")
    forwards = preflight_models.CALLS["forward"]
    first = check_models(config, cache, "cpu")["m"]
    assert not first.cached and first.batch == 2 and preflight_models.CALLS["forward"] == forwards + 1
    again = check_models(config, ArtifactCache(tmp_path / "cache"), "cpu")["m"]
    assert again.cached and again.digest == first.digest
    assert preflight_models.CALLS["forward"] == forwards + 1, "a cached positive result must skip the forward"


def test_the_cache_key_follows_what_decides_the_outcome(tmp_path):
    """A changed declaration is checked again: a cached pass must not vouch for different inputs."""
    cache = ArtifactCache(tmp_path / "cache")
    check_models(_config(), cache, "cpu")
    assert check_models(_config(), cache, "cpu")["m"].cached
    assert not check_models(_config(outputs=["scores"]), cache, "cpu")["m"].cached
    with pytest.raises(PreflightError, match=r"\[models.m\].inputs: the smoke forward"):
        check_models(_config(inputs=[{"name": "x", "shape": [10]}]), cache, "cpu")


def test_a_failed_check_is_not_cached(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    for _ in range(2):
        with pytest.raises(PreflightError, match="smoke forward"):
            check_models(_config(inputs=[{"name": "x", "shape": [10]}]), cache, "cpu")
    entries = [p for p in (tmp_path / "cache" / "preflight").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert not entries, entries


def test_wrong_input_shape_is_one_line_with_the_models_complaint(tmp_path):
    """shape = [10] for a Linear(16, 4): today 1,360 lines of output from inside the exporter."""
    err = _error(tmp_path, inputs=[{"name": "x", "shape": [10]}])
    assert err.model == "m" and err.key == "inputs"
    assert str(err) == ("[models.m].inputs: the smoke forward on a synthetic batch of 2 failed: RuntimeError: "
                        "mat1 and mat2 shapes cannot be multiplied (2x10 and 16x4); "
                        "declared inputs: x float32 [10] in [0, 1]")


def test_factory_that_cannot_be_imported(tmp_path):
    err = _error(tmp_path, factory="tests.selftest.no_such_module:make")
    assert str(err).startswith("[models.m].factory = 'tests.selftest.no_such_module:make': cannot import module "
                               "'tests.selftest.no_such_module'")
    assert str(err).endswith(DECLARED)
    err = _error(tmp_path, factory=f"{M}:nope")
    assert re.match(r"\[models.m\].factory = '.*:nope': tests.selftest.preflight_models has no 'nope'; "
                    r"callables there: .*linear16", str(err))


def test_factory_that_raises_gives_the_last_line_of_its_message(tmp_path):
    """...and where in the user's code it was raised (the line that raised, in raises())."""
    line = preflight_models.raises.__code__.co_firstlineno + 1
    err = _error(tmp_path, factory=f"{M}:raises")
    assert str(err) == (f"[models.m].factory = '{M}:raises': the factory raised FileNotFoundError: weights.pt: "
                        f"no such file in the package (at preflight_models.py:{line} in raises); {DECLARED}")


def test_factory_that_returns_something_else(tmp_path):
    err = _error(tmp_path, factory=f"{M}:not_a_module")
    assert str(err) == (f"[models.m].factory = '{M}:not_a_module': the factory of model 'm' returned dict, "
                        f"not a torch.nn.Module; {DECLARED}")


def test_factory_with_two_parameters(tmp_path):
    err = _error(tmp_path, factory=f"{M}:two_params")
    assert "two_params() requires cache, size; a factory takes no argument or one" in str(err)


def test_zero_argument_factory_works_in_preflight_and_in_the_engine_build(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    assert check_models(_config(factory=f"{M}:linear16_no_args"), cache, "cpu")["m"].batch == 2
    build = ModelBuild("m", preflight_models.linear16_no_args, (InputSpec("x", (16,)),), ("logits",), cache)
    assert build.torch_module().fc.in_features == 16 and not build.torch_module().training


def test_call_factory_passes_the_cache_only_to_a_factory_that_takes_it():
    cache = object()
    assert call_factory(lambda: "none", cache) == "none"
    assert call_factory(lambda c: c, cache) is cache
    assert call_factory(lambda c=None: c, cache) is cache
    assert call_factory(lambda *args: args, cache) == (cache,)
    with pytest.raises(FactorySignatureError, match=r"requires cache; a factory takes"):
        call_factory(lambda *, cache: cache, cache)


@pytest.mark.parametrize("factory,outputs,problem", [
    ("two_outputs", ["logits"], "the model returns 2 unnamed output(s) (tuple), the config names 1: ['logits']; a "
                                "tuple or list is bound by position, so the counts must match (return a dict to "
                                "bind by name)"),
    ("linear16", ["logits", "probs"], "the model returns 1 unnamed output(s) (Tensor), the config names 2: "
                                      "['logits', 'probs']; a tuple or list is bound by position, so the counts must "
                                      "match (return a dict to bind by name)"),
    ("dict_outputs", ["logits"], "outputs ['logits'] are configured but the model does not return them; it returns "
                                 "dict with names ['probs', 'embedding'] (configured: ['logits'])"),
])
def test_outputs_that_do_not_match_the_names(tmp_path, factory, outputs, problem):
    err = _error(tmp_path, factory=f"{M}:{factory}", outputs=outputs)
    assert err.key == "outputs"
    assert str(err) == f"[models.m].outputs = {outputs}: {problem}; {DECLARED}"


def test_dict_output_with_the_configured_keys_passes(tmp_path):
    check_models(_config(factory=f"{M}:dict_outputs", outputs=["probs"]), ArtifactCache(tmp_path), "cpu")


def test_output_without_the_batch_axis(tmp_path):
    err = _error(tmp_path, factory=f"{M}:no_batch_axis")
    assert str(err) == ("[models.m].outputs: output 'logits' has shape [4] for a batch of 2; every output needs "
                        f"the batch axis first; {DECLARED}")


@pytest.mark.parametrize("key", ["accuracy_dataset", "parity_dataset", "calibration_dataset"])
def test_dataset_that_raises(tmp_path, key):
    err = _error(tmp_path, **{key: f"{M}:data_raises"})
    assert err.key == key
    assert str(err) == (f"[models.m].{key} = '{M}:data_raises': the dataset raised RuntimeError: no network at "
                        f"run time; {DECLARED}")


@pytest.mark.parametrize("ref,problem", [
    ("data_wrong_name", "its feeds are named ['image']; inputs declare ['x']"),
    ("data_wrong_shape", "feed 'x' has rows of shape [10]; inputs declare [16]"),
    ("data_label_mismatch", "7 labels for 8 rows"),
    ("data_not_a_dataset", "returned list, not a dataset with named feeds (fixtures.data.Dataset)"),
    ("nope", "tests.selftest.preflight_models has no 'nope'"),
])
def test_dataset_that_does_not_fit_the_declared_inputs(tmp_path, ref, problem):
    err = _error(tmp_path, parity_dataset=f"{M}:{ref}")
    assert str(err).startswith(f"[models.m].parity_dataset = '{M}:{ref}': {problem}")
    assert str(err).endswith(DECLARED)


def test_accuracy_dataset_needs_labels(tmp_path):
    err = _error(tmp_path, accuracy_dataset=f"{M}:data_unlabelled")
    assert "the dataset has no labels; top-1/top-5 accuracy needs them" in str(err)
    check_models(_config(parity_dataset=f"{M}:data_unlabelled"), ArtifactCache(tmp_path / "ok"), "cpu")


def test_preflight_error_is_a_config_error(tmp_path):
    """The plugin turns ConfigError into a usage error: one message, no INTERNALERROR."""
    assert isinstance(_error(tmp_path, factory=f"{M}:raises"), ConfigError)


def test_smoke_batch_is_within_range_never_all_zero_and_of_the_declared_dtype(tmp_path):
    bit = InputSpec("x", (1,), "int64", 0, 1)  # one value in {0, 1}: half of all seeds draw a zero
    assert all(smoke_feed((bit,), 1, seed)["x"].any() for seed in range(40))
    ids = InputSpec("ids", (64,), "int64", 0, 9)
    feed = smoke_feed((ids,), 3)["ids"]
    assert feed.dtype == np.int64 and feed.min() >= 0 and feed.max() <= 9 and len(np.unique(feed)) > 1
    # Declared ids beyond the embedding's 10 rows: the forward fails and says so.
    ok = {"name": "ids", "shape": [5], "dtype": "int64", "low": 0, "high": 9}
    check_models(_config(factory=f"{M}:int_embedding", inputs=[ok], outputs=["v"]), ArtifactCache(tmp_path / "b"),
                 "cpu")
    with pytest.raises(PreflightError, match=r"inputs: the smoke forward .* IndexError: index out of range"):
        check_models(_config(factory=f"{M}:int_embedding", inputs=[{**ok, "high": 500}], outputs=["v"]),
                     ArtifactCache(tmp_path / "c"), "cpu")


def test_the_session_shares_its_module_and_datasets_with_preflight(tmp_path):
    """With the session's build and dataset, the factory runs once per run, not once more for preflight."""
    config = _config(factory=f"{M}:linear16", accuracy_dataset=f"{M}:data_ok")
    session = SuiteSession(config, ArtifactCache(tmp_path / "cache"))
    factories = preflight_models.CALLS["factory"]
    checked = check_models(config, session.cache, "cpu", build_for=session.build, dataset_for=session.dataset)
    session.build("m").torch_module()
    session.dataset(f"{M}:data_ok")
    assert preflight_models.CALLS["factory"] == factories + 1
    assert checked["m"].digest == session.build("m").model_digest()


def test_session_build_errors_are_reported_the_same_way(tmp_path):
    """Through the session's ModelBuild a non-module and an import error read as they do without it."""
    for factory, text in ((f"{M}:not_a_module", "returned dict, not a torch.nn.Module"),
                          ("tests.selftest.no_such_module:make", "cannot import module")):
        config = _config(factory=factory)
        session = SuiteSession(config, ArtifactCache(tmp_path / "cache"))
        with pytest.raises(PreflightError, match=rf"^\[models.m\].factory = '{re.escape(factory)}': .*{text}"):
            check_models(config, session.cache, "cpu", build_for=session.build, dataset_for=session.dataset)


# =========================================================================== first contact, a second audit

X10 = [{"name": "x", "shape": [10]}]  # for a Linear(16, 4): the smoke forward fails
OVERHEAD_ID = "tests/latency/test_harness_overhead.py::test_harness_overhead[1-torch-model]"


class _Reporter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(line)


class _PytestConfig:
    """What suite.hooks.startup_check._preflight reads of pytest's config: the run's state, the session, options, the
    terminal."""

    def __init__(self, config, cache: ArtifactCache, **options) -> None:
        self.stash = {state.RUN_KEY: state.RunState(config, set(), {}),
                      state.SESSION_KEY: SuiteSession(config, cache), state.LEDGER_KEY: verdict.Ledger(),
                      **options_stash(**options)}
        self.reporter = _Reporter()
        self.pluginmanager = self

    def get_plugin(self, name: str):
        return self.reporter if name == "terminalreporter" else None


def test_models_of_counts_the_model_the_harness_overhead_check_uses():
    """Its ids name a batch and a path, not a model: the model is --overhead-model's (default: the first)."""
    models = {"a": None, "b": None}
    assert collection.models_of([OVERHEAD_ID], models) == []  # the form suite/fleet/plugin.py's timing asks
    assert collection.models_of([OVERHEAD_ID], models, overhead_model="b") == ["b"]
    assert collection.models_of([OVERHEAD_ID, "tests/accuracy/test_accuracy.py::test_top1_top5[a-torch-fp32]"], models,
                            overhead_model="b") == ["a", "b"]
    assert collection.models_of(["tests/selftest/test_x.py::test_y[b-1]"], models, overhead_model="a") == ["b"]


def test_only_the_harness_overhead_check_selected_still_checks_its_model(tmp_path):
    """A broken model behind `pytest tests/latency/test_harness_overhead.py`: its check fails, naming the model; the
    run goes on to fail that test (issue 42: a model's failure is its tests', not a usage error of the run)."""
    pytest_config = _PytestConfig(_config(inputs=X10), ArtifactCache(tmp_path / "cache"))
    startup_check._preflight(pytest_config, [OVERHEAD_ID])
    failed = pytest_config.stash[state.RUN_KEY].failed_models
    assert list(failed) == ["m"]
    assert failed["m"].startswith("[models.m].inputs: the smoke forward on a synthetic batch of 2 failed: "
                                  "RuntimeError: mat1 and mat2")


def test_a_failed_model_is_not_an_error_of_the_run_and_is_told_once(tmp_path):
    """The model's failure is not the run's error (nothing ended it): the ledger has none; the whole block is shown
    once, under a line naming the failed models."""
    pytest_config = _PytestConfig(_config(inputs=X10), ArtifactCache(tmp_path / "cache"))
    startup_check.note_collected(pytest_config, ["tests/accuracy/test_accuracy.py::test_top1_top5[m-torch-fp32]"])
    assert state.ledger_of(pytest_config).error is None
    lines = pytest_config.reporter.lines
    assert lines[-2] == ("[engine cache] start-up check failed for m: each of its tests fails with the cause; the "
                         "other models' tests run")
    assert lines[-1].startswith("<memory>: [models.m].inputs: the smoke forward on a synthetic batch of 2")


def test_a_usage_error_of_the_start_up_check_is_kept_for_the_verdict(tmp_path, monkeypatch):
    """What is wrong with the run itself (a ConfigError that names no model, an unusable cache) still ends it
    before any test: its text waits in the run's ledger for the verdict."""
    pytest_config = _PytestConfig(_config(), ArtifactCache(tmp_path / "cache"))

    def unusable(*args, **kwargs):
        raise CacheUnusable("engine cache /x: No space left on device")

    monkeypatch.setattr(startup_check, "check_models", unusable)
    with pytest.raises(pytest.UsageError) as info:
        startup_check.note_collected(pytest_config, ["tests/accuracy/test_accuracy.py::test_top1_top5[m-torch-fp32]"])
    assert str(info.value) == "--engine-cache: engine cache /x: No space left on device"
    assert state.ledger_of(pytest_config).error == str(info.value)
    assert state.ledger_of(pytest_config).as_dict()["error"] == str(info.value)


def test_an_early_check_fails_only_the_models_its_tests_use(tmp_path):
    """An xdist controller checks every selected model while its workers start (check_early), before it knows
    which models the collected tests use; at the first collection it fails the models among those that failed,
    and only those."""
    config = parse_config({"models": {"ok": copy.deepcopy(GOOD), "bad": {**copy.deepcopy(GOOD), "inputs": X10},
                                      "worse": {**copy.deepcopy(GOOD), "factory": f"{M}:not_a_module"}}})
    ids = {m: f"tests/accuracy/test_accuracy.py::test_top1_top5[{m}-torch-fp32]" for m in ("ok", "bad", "worse")}
    forwards = preflight_models.CALLS["forward"]
    early = _PytestConfig(config, ArtifactCache(tmp_path / "cache"))
    startup_check.check_early(early)  # raises nothing: it keeps its finding
    outcome, kept = early.stash[state.RUN_KEY].early_check
    assert outcome == "failed" and [e.model for e in kept.errors] == ["bad", "worse"]
    startup_check.note_collected(early, [ids["ok"]])  # only "ok" is used: nothing failed, nothing checked again
    assert preflight_models.CALLS["forward"] == forwards + 2  # ok and bad's smoke forwards, once each
    assert early.stash[state.RUN_KEY].failed_models == {}
    for used, failed in (([ids["ok"], ids["bad"]], ["bad"]), ([ids["worse"], ids["bad"]], ["bad", "worse"])):
        again = _PytestConfig(config, ArtifactCache(tmp_path / "cache"))
        startup_check.check_early(again)
        startup_check.note_collected(again, used)
        assert sorted(again.stash[state.RUN_KEY].failed_models) == failed
        assert state.ledger_of(again).error is None
    passing = _PytestConfig(parse_config({"models": {"ok": copy.deepcopy(GOOD)}}), ArtifactCache(tmp_path / "c2"))

    startup_check.check_early(passing)
    assert passing.stash[state.RUN_KEY].early_check == ("passed", None)
    startup_check.note_collected(passing, [ids["ok"]])


def test_every_broken_model_is_reported_one_line_each(tmp_path):
    """Two broken models and a good one between them: one error with a line for each broken model."""
    config = parse_config({"models": {"a": {**copy.deepcopy(GOOD), "inputs": X10}, "ok": copy.deepcopy(GOOD),
                                      "b": {**copy.deepcopy(GOOD), "factory": f"{M}:not_a_module"}}})
    with pytest.raises(PreflightErrors) as info:
        check_models(config, ArtifactCache(tmp_path / "cache"), "cpu")
    errors = info.value.errors
    assert [(e.model, e.key) for e in errors] == [("a", "inputs"), ("b", "factory")]
    assert str(errors[0]).startswith("[models.a].inputs: the smoke forward on a synthetic batch of 2 failed")
    assert str(errors[1]) == (f"[models.b].factory = '{M}:not_a_module': the factory of model 'b' returned dict, not a "
                              "torch.nn.Module; declared inputs: x float32 [16] in [-1, 1]")
    assert startup_message(info.value, "suite.toml").splitlines() == [
        "suite.toml: 2 models failed their start-up check, one line each:", f"  {errors[0]}", f"  {errors[1]}"]
    assert isinstance(info.value, ConfigError)  # the plugin's usage error, not an INTERNALERROR


def test_what_a_failing_model_printed_is_counted_and_its_end_shown(tmp_path, capfd):
    """A forward printing 300 lines: none reaches the terminal; the error says 300 and shows the last 5."""
    err = _error(tmp_path, factory=f"{M}:chatty", inputs=X10)
    assert capfd.readouterr() == ("", "")
    assert err.details() == ["m's factory and smoke forward printed 300 lines (hidden); the last 5:",
                             *(f"| debug: forward step {i} x.shape=(2, 10)" for i in range(295, 300))]
    assert startup_message(err, "suite.toml").splitlines()[1:] == [f"  {line}" for line in err.details()]


def test_output_below_python_is_hidden_too(tmp_path, capfd):
    """Written to the descriptors themselves (as a C extension writes), stdout and stderr alike."""
    err = _error(tmp_path, factory=f"{M}:chatty_below_python", inputs=X10)
    assert capfd.readouterr() == ("", "")
    assert err.details() == ["m's factory and smoke forward printed 41 lines (hidden); the last 5:",
                             *(f"| native: loading kernel {i}" for i in range(36, 40)), "| native: done"]


def test_a_model_that_passes_prints_nothing_but_the_suites_progress(tmp_path, capfd):
    for factory in ("chatty", "chatty_below_python"):
        check_models(_config(factory=f"{M}:{factory}"), ArtifactCache(tmp_path / factory), "cpu")
        assert capfd.readouterr() == ("", ""), factory
    # A factory that trains into the cache: the cache's progress lines still reach the terminal, as they come.
    cache = ArtifactCache(tmp_path / "trains", on_event=lambda e: print(f"[engine cache] {e.action} {e.label}"))
    check_models(_config(factory=f"{M}:trains"), cache, "cpu")
    out, err = capfd.readouterr()
    assert "epoch" not in out + err
    assert out.splitlines()[:2] == ["[engine cache] start train trains", "[engine cache] build train trains"]


def test_progress_is_told_before_the_factory_is_called_and_when_it_returned(tmp_path):
    """A slow factory (0.5 s): the line before says which model and factory, the line after how long it took."""
    heard = []
    before = preflight_models.CALLS.get("slow_started", 0)
    check_models(_config(factory=f"{M}:slow_linear16"), ArtifactCache(tmp_path / "cache"), "cpu",
                 progress=lambda text: heard.append((text, preflight_models.CALLS.get("slow_started", 0))))
    assert heard[0] == (f"making m (factory {M}:slow_linear16) ...", before)
    assert re.fullmatch(r"made m in (0\.[5-9]|[1-9]\d*\.\d) s", heard[1][0]) and heard[1][1] == before + 1


def test_weights_that_change_between_runs_are_warned_about(tmp_path):
    """Unseeded weights change every cache key on every run: a warning (not an error: retraining is allowed) when
    the weights differ from last run's and the architecture does not; nothing for a seeded factory."""
    warned: list[str] = []

    def run(factory: str) -> None:
        check_models(_config(factory=f"{M}:{factory}"), ArtifactCache(tmp_path / "cache"), "cpu", warn=warned.append)

    run("linear16")
    run("linear16_no_args")
    assert warned == []
    run("unseeded")  # the same Linear16, other weights
    run("unseeded")
    assert len(warned) == 2
    for text in warned:
        assert re.fullmatch(r"m: the factory returned different weights than last run \(digest [0-9a-f]{12} -> "
                            r"[0-9a-f]{12}\): seed it, or every run rebuilds every engine", text), text
    run("chatty")  # another architecture: rebuilt on purpose, no warning
    assert len(warned) == 2
    assert (tmp_path / "cache" / "preflight" / WEIGHTS_FILE).is_file()


def test_engine_cache_expands_the_home_directory(tmp_path, monkeypatch):
    """--engine-cache=~/x: the shell leaves the '~' after '=', and Path('~/x') is a directory named '~'."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ArtifactCache("~/engines").root == tmp_path / "engines"
    assert ArtifactCache("~nosuchuser-pf/x").root == Path("~nosuchuser-pf/x")


def test_a_module_that_does_not_parse_is_an_import_failure_with_its_line(tmp_path, monkeypatch):
    (tmp_path / "pf_broken_syntax.py").write_text("import torch\n\n\ndef make(:\n    return torch.nn.Linear(16, 4)\n")
    (tmp_path / "pf_import_raises.py").write_text("import os\n\nraise RuntimeError('needs a GPU\\nat import time')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    err = _error(tmp_path, factory="pf_broken_syntax:make")
    assert str(err) == ("[models.m].factory = 'pf_broken_syntax:make': cannot import module 'pf_broken_syntax': "
                        f"SyntaxError at pf_broken_syntax.py:4: invalid syntax; {DECLARED}")
    err = _error(tmp_path, factory="pf_import_raises:make")
    assert str(err) == ("[models.m].factory = 'pf_import_raises:make': cannot import module 'pf_import_raises': "
                        "importing it raised RuntimeError: at import time (at pf_import_raises.py:3 in <module>); "
                        f"{DECLARED}")


def test_a_factory_that_raises_inside_torch_is_placed_at_the_users_line(tmp_path):
    lines, start = inspect.getsourcelines(preflight_models.load_missing_weights)
    line = start + next(i for i, text in enumerate(lines) if "module.load_state_dict" in text)
    err = _error(tmp_path, factory=f"{M}:load_missing_weights")
    assert str(err) == (f"[models.m].factory = '{M}:load_missing_weights': the factory raised RuntimeError: Missing "
                        f'key(s) in state_dict: "fc.weight", "fc.bias". (at preflight_models.py:{line} in '
                        f"load_missing_weights); {DECLARED}")


def test_a_factory_that_returns_the_class(tmp_path):
    err = _error(tmp_path, factory=f"{M}:returns_class")
    assert str(err) == (f"[models.m].factory = '{M}:returns_class': the factory of model 'm' returned the class "
                        f"Linear16, not an instance of it; did you return the class? call it: return Linear16(); "
                        f"{DECLARED}")


def test_config_file_errors_name_the_file_once(tmp_path):
    """The plugin labels them 'suite config:'; the message itself does not say it again."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[models.x\n")
    for path, problem in ((bad, "is not valid TOML: "), (tmp_path / "none.toml", "does not exist"),
                          (tmp_path, "cannot be read: ")):
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert str(info.value).startswith(f"{path} {problem}"), str(info.value)


def test_an_unknown_name_on_the_command_line_suggests_the_close_one():
    config = parse_config({"models": {"digits_cnn": copy.deepcopy(GOOD), "resnet18": copy.deepcopy(GOOD)}})
    with pytest.raises(ConfigError, match=r"^--models: unknown 'digit_cnn' \(did you mean digits_cnn\?\); valid: "
                                          r"digits_cnn, resnet18$"):
        config.select(["digit_cnn"], None, None)
    with pytest.raises(ConfigError, match=r"^--engines: unknown 'onnxruntim' \(did you mean onnxruntime\?\); "):
        config.select(None, ["onnxruntim"], None)
    with pytest.raises(ConfigError, match=r"^--precisions: unknown 'fp64'; valid: "):  # fp16 is not what was meant
        config.select(None, None, ["fp64"])


def test_the_readmes_example_is_the_error_a_real_check_gives(tmp_path):
    """README "Adding a model" shows the error of shape = [10] for a Linear(16, 4): at the batch the check runs."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Adding a model", 1)[1].split("\n## ", 1)[0]
    example = " ".join(section.split("one line naming the key", 1)[1].split("```\n", 1)[1].split("\n```", 1)[0]
                       .splitlines())
    config = parse_config({"models": {"my_net": {**copy.deepcopy(GOOD), "inputs": X10}}})
    with pytest.raises(PreflightError) as info:
        check_models(config, ArtifactCache(tmp_path / "cache"), "cpu")
    assert example == str(info.value)
    assert "batch of 2" in example and "smallest batch size, but at least 2" in " ".join(section.split())


def test_an_output_whose_first_dimension_is_the_batch_by_accident_is_checked_at_a_second_batch(tmp_path):
    """out.t() with 5 classes at batch 5 has the shape (5, 5): right at that batch only. Where an output holds the
    batch's size on another axis, a second forward at another batch of the profile tells them apart; a profile of
    one batch size has nothing to tell them apart with."""
    two_inputs = [{"name": "image", "shape": [1, 8, 8]}, {"name": "extra", "shape": [3], "low": -1.0, "high": 1.0}]
    transposed = {"factory": "tests.selftest.hostile_models:transposed", "outputs": ["out"], "inputs": two_inputs}
    error = _error(tmp_path, batch_sizes=[5, 8], **transposed)
    assert error.key == "outputs"
    assert "output 'out' has shape [5, 8] for a batch of 8; every output needs the batch axis first" in str(error)
    assert check_models(_config(batch_sizes=[5], **transposed), ArtifactCache(tmp_path / "one"), "cpu")["m"].batch == 5


# =========================================================================== forward()'s parameters (issue 24)

TOKENS = [{"name": "input_ids", "shape": ["seq"], "dtype": "int64", "low": 0, "high": 99},
          {"name": "attention_mask", "shape": ["seq"], "dtype": "int64", "low": 0, "high": 1,
           "role": "attention_mask"}]
BERT = {"factory": f"{M}:tiny_bert_model", "inputs": TOKENS, "outputs": ["last_hidden_state"],
        "axes": {"seq": {"min": 4, "opt": 8, "max": 16}}, "engines": ["torch", "onnxruntime"]}


def test_a_bert_model_whose_forward_takes_more_than_the_declared_inputs_fails_in_one_line(tmp_path):
    """BertModel passed the smoke forward (its other parameters have defaults), then every ONNX Runtime cell failed
    at export. Now: one line naming the model, forward()'s parameters, the declared inputs and the fix."""
    err = _error(tmp_path, **BERT)
    params = [n for n, p in inspect.signature(preflight_models.tiny_bert_model().forward).parameters.items()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]  # not **kwargs (transformers 5 has them)
    assert err.model == "m" and err.key == "inputs"
    assert str(err).startswith(
        f"[models.m].inputs: forward() of BertModel takes {len(params)} parameters ({', '.join(params)}), the "
        "config declares 2 inputs (input_ids, attention_mask); the dynamo ONNX export and inductor pass the declared "
        "inputs to forward() by position, one parameter each: wrap the model so that forward() takes exactly "
        "(input_ids, attention_mask) (README.md: 'Hugging Face models'); declared inputs: input_ids int64 [")


def test_a_plain_module_with_a_parameter_more_than_declared_fails_the_same_way(tmp_path):
    err = _error(tmp_path, factory=f"{M}:optional_scale", engines=["torch", "onnxruntime"])
    assert str(err) == ("[models.m].inputs: forward() of OptionalScale takes 2 parameters (x, scale), the config "
                        "declares 1 input (x); the dynamo ONNX export and inductor pass the declared inputs to "
                        "forward() by position, one parameter each: wrap the model so that forward() takes exactly "
                        f"(x) (README.md: 'Hugging Face models'); {DECLARED}")


@pytest.mark.parametrize("changes", [{"engines": ["torch"]}, {"export": {"exporter": "torchscript"}}])
def test_forward_parameters_are_checked_only_where_a_build_passes_the_inputs_by_parameter(tmp_path, changes):
    """torch runs forward(x) as the smoke forward does; the torchscript exporter traces a call, binding nothing."""
    check_models(_config(**{"factory": f"{M}:optional_scale", "engines": ["torch", "onnxruntime"], **changes}),
                 ArtifactCache(tmp_path / "cache"), "cpu")


def test_the_check_is_the_exports_own(tmp_path):
    """The export's error is the start-up check's, word for word: one function decides both."""
    from engines.onnx.export import export_onnx, export_options

    err = _error(tmp_path, factory=f"{M}:optional_scale", engines=["torch", "onnxruntime"])
    with pytest.raises(Exception) as info:
        export_onnx(preflight_models.optional_scale(), "m", (InputSpec("x", (16,)),), ("logits",),
                    tmp_path / "m.onnx", export_options())
    assert str(info.value) == "model 'm': " + str(err).split("inputs: ", 1)[1].split("; declared inputs:")[0]


def test_the_readmes_hugging_face_wrapper_passes(tmp_path, monkeypatch):
    """README 'Hugging Face models': its wrapper of BertModel passes where BertModel itself does not."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Hugging Face models", 1)[1].split("\n## ", 1)[0]
    (tmp_path / "hf_readme_example.py").write_text(section.split("```python\n", 1)[1].split("```", 1)[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    checked = check_models(_config(**{**BERT, "factory": "hf_readme_example:bert"}), ArtifactCache(tmp_path / "c"),
                           "cpu")
    assert checked["m"].batch == 2


def test_the_verdicts_failed_line_keeps_the_exceptions_class_and_its_cause():
    """The verdict's 'failed:' line cut the id and detail at 240 characters: a cell whose export failed read
    '...ONNX export of model 'bert' failed ({...}): EngineBuildEr', the cause gone. The ledger already keeps a
    detail to one line of 300 characters; the line shows all of it."""
    from types import SimpleNamespace

    from suite.hooks.summary import print_verdict
    from suite.options import OPTIONS_KEY, SuiteOptions

    cause = "EngineBuildError: model forward() takes ['input_ids', 'mask', 'use_cache'], config declares 2 inputs"
    message = (f"engines.base.EngineBuildError: ONNX export of model 'bert' failed ({{'opset': 18, 'exporter': "
               f"'dynamo', 'sample_batch': 2, 'revision': 2}}): {cause}")
    assert len(message) <= 300  # what the ledger keeps of a detail
    nodeid = "tests/parity/test_parity.py::test_parity_on_generated_inputs[bert-onnxruntime-fp32-uniform]"
    ledger = verdict.Ledger()
    ledger.add_report(SimpleNamespace(nodeid=nodeid, when="call", outcome="failed", user_properties=[],
                                      longrepr=SimpleNamespace(reprcrash=SimpleNamespace(message=message))))
    lines: list[str] = []
    tr = SimpleNamespace(write_sep=lambda *a, **k: None, write_line=lambda line, **k: lines.append(line))
    stash = pytest.Stash()
    stash[state.LEDGER_KEY] = ledger
    stash[OPTIONS_KEY] = SuiteOptions()
    print_verdict(SimpleNamespace(stash=stash, pluginmanager=SimpleNamespace(get_plugin=lambda name: tr)))
    assert f"  {nodeid}: {message}" in lines, lines


# =========================================================================== one model's failure is its own (issue 42)

TWO_MODELS = f"""
[run]
requires = ["torch"]
accept_not_judged = ["no-data", "no-baseline", "unsupported"]

[models.good]
factory = "{M}:linear16"
inputs = [{{ name = "x", shape = [16], low = -1.0, high = 1.0 }}]
outputs = ["logits"]
batch_sizes = [2, 4]
engines = ["torch"]
accuracy_dataset = "{M}:data_ok"
min_top1 = 0.25

[models.broken]
factory = "{M}:forward_raises"
inputs = [{{ name = "x", shape = [16], low = -1.0, high = 1.0 }}]
outputs = ["logits"]
batch_sizes = [2, 4]
engines = ["torch"]
accuracy_dataset = "{M}:data_ok"
min_top1 = 0.25
"""
BROKEN_LINE = ("model broken failed its start-up check, so this check cannot run: [models.broken].inputs: the smoke "
               "forward on a synthetic batch of 2 failed: ValueError: Wrong shape for input_ids (shape "
               "torch.Size([2, 16])) or attention_mask; declared inputs: x float32 [16] in [-1, 1]")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_model_whose_forward_raises_fails_its_tests_and_the_others_are_judged(tmp_path, workers):
    """Two models, one whose smoke forward raises (as minilm_l6_fused's did on transformers 4.57): its tests fail,
    each with the model and the cause in one line; the other model's tests run and pass; the verdict is FAILED and
    the exit status 1, not a usage error (4) before any test. Under xdist the workers fail them too (the
    controller checked)."""
    from tests.selftest.suite_runs import explain, run_suite

    (tmp_path / "suite.toml").write_text(TWO_MODELS)
    root = Path(__file__).resolve().parents[2]
    done = run_suite(tmp_path, "--suite-config", str(tmp_path / "suite.toml"), "--suite-results",
                     str(tmp_path / "results.json"), *workers, tests=(str(root / "tests" / "accuracy"),))
    assert done.returncode == 1, explain(done)
    assert "VERDICT: FAILED" in done.stdout, explain(done)
    assert "start-up check failed for broken: each of its tests fails with the cause" in done.stdout, explain(done)
    results = json.loads((tmp_path / "results.json").read_text())["verdict"]
    states = results["states"]
    broken = {i: s for i, s in states.items() if "[broken-" in i or i.endswith("[broken]")}
    good = {i: s for i, s in states.items() if "[good-" in i or i.endswith("[good]")}
    assert broken and set(broken.values()) == {"failed"}, states
    assert good and set(good.values()) == {"passed"}, states
    assert "error" not in results  # nothing ended the run
    assert {c["detail"] for c in results["failed"]} == {f"Failed: {BROKEN_LINE}"[:300]}, results["failed"]
    assert f"{len(broken)} failed, {len(good)} passed" in done.stdout, explain(done)  # failed, not pytest's errors
    for nodeid in broken:  # the verdict's failed: line, and pytest's report of the test: the one line
        assert f"  {nodeid}: Failed: {BROKEN_LINE}" in done.stdout, explain(done)
    assert f"\n{BROKEN_LINE}\n" in done.stdout, explain(done)
    assert "Traceback" not in done.stdout + done.stderr, explain(done)
