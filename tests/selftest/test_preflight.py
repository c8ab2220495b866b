"""Start-up check of each model: every mistake is one short error naming the model, the key, the
declared inputs and the model's own complaint; a model that passed is not run again."""

import copy
import re

import numpy as np
import pytest

from engines.artifacts import ModelBuild
from engines.base import InputSpec
from suite.cache import ArtifactCache
from suite.config import ConfigError, parse_config
from suite.preflight import FactorySignatureError, PreflightError, call_factory, check_models, smoke_feed
from suite.session import SuiteSession
from tests.selftest import preflight_models

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
    err = _error(tmp_path, factory=f"{M}:raises")
    assert str(err) == (f"[models.m].factory = '{M}:raises': the factory raised FileNotFoundError: weights.pt: "
                        f"no such file in the package; {DECLARED}")


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
