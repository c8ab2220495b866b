"""suite.toml parsing: the shipped config is valid; every broken entry is a clear error."""

import copy
from pathlib import Path

import pytest

from suite.config import ConfigError, load_config, parse_config, resolve

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {
    "models": {
        "m": {"factory": "fixtures.models.digits:digits_cnn", "outputs": ["logits"],
              "inputs": [{"name": "image", "shape": [1, 28, 28]}]},
    },
}


def _with(**changes):
    raw = copy.deepcopy(MINIMAL)
    raw["models"]["m"].update(changes)
    return raw


def test_shipped_config_parses_and_resolves():
    config = load_config(ROOT / "suite.toml")
    assert {"digits_cnn", "digits_siamese", "efficientnet_lite0", "resnet18", "mobilenet_v2"} <= set(config.models)
    for model in config.models.values():
        resolve(model.factory, model.name)
        for ref in filter(None, (model.accuracy_dataset, model.parity_dataset, model.calibration_dataset)):
            resolve(ref, model.name)
    assert [i.name for i in config.models["digits_siamese"].inputs] == ["left", "right"]


def test_defaults_and_profile():
    config = parse_config(MINIMAL)
    m = config.models["m"]
    assert m.batch_sizes == (1, 8, 32) and m.profile.as_dict() == {"min": 1, "opt": 32, "max": 32}
    assert m.tolerance("fp32").rtol == 1e-3 and m.tolerance("fp32").atol == 1e-5
    assert m.accuracy_threshold("int8").min_top1_ratio == 0.99


def test_per_precision_override_merges_over_defaults():
    raw = _with(precision={"fp16": {"parity": {"rtol": 0.05}}})
    m = parse_config(raw).models["m"]
    assert m.tolerance("fp16").rtol == 0.05 and m.tolerance("fp16").atol == 1e-2
    assert m.tolerance("fp32").rtol == 1e-3


@pytest.mark.parametrize("raw,match", [
    (_with(enignes=["torch"]), r"\[models.m\]: unknown key\(s\) enignes; valid: .*engines"),
    (_with(engines=["tensorflow"]),
     r"\[models.m\].engines: unknown 'tensorflow'; valid: torch, onnxruntime, inductor, tensorrt"),
    (_with(precisions=["fp8"]), r"unknown 'fp8'; valid: fp32, tf32, fp16, bf16, int8"),
    (_with(batch_sizes=[0, 8]), r"batch_sizes must be positive"),
    (_with(inputs=[{"name": "x"}]), r"inputs\[0\]: needs name and shape"),
    (_with(inputs=[{"name": "x", "shape": [3], "dtype": "floaty"}]), r"unknown dtype 'floaty'"),
    (_with(precisions=["int8"]), r"int8 needs calibration_dataset"),
    (_with(precision={"fp16": {"parity": {"rtool": 1}}}), r"precision.fp16.parity: unknown key\(s\) rtool"),
    (_with(int8={"method": "magic"}), r"int8.method: unknown 'magic'; valid: minmax, entropy, percentile"),
    ({"models": {}}, r"no \[models.NAME\] entries"),
    ({**MINIMAL, "latency": {"rounds": 1}}, r"rounds must be >= 2"),
    ({**MINIMAL, "extra": {}}, r"unknown key\(s\) extra"),
    ({**MINIMAL, "engine_options": {"torch": {"channel_last": True}}},
     r"\[engine_options.torch\]: unknown key\(s\) channel_last; valid: channels_last"),
    (_with(engine_options={"inductor": {"cxx": "g++", "compiler": "clang"}}),
     r"\[models.m\].engine_options.inductor: unknown key\(s\) compiler; valid: cxx, precisions"),
])
def test_broken_config_is_a_clear_error(raw, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(raw)


def test_missing_required_key_names_it():
    raw = copy.deepcopy(MINIMAL)
    del raw["models"]["m"]["outputs"]
    with pytest.raises(ConfigError, match=r"\[models.m\]: missing required key 'outputs'"):
        parse_config(raw)


def test_selection_unknown_names_list_valid_ones():
    config = parse_config(MINIMAL)
    with pytest.raises(ConfigError, match=r"--models: unknown 'nope'; valid: m"):
        config.select(["nope"], None, None)
    with pytest.raises(ConfigError, match=r"--precisions: unknown 'fp64'"):
        config.select(None, None, ["fp64"])
    narrowed = config.select(["m"], ["onnxruntime"], None)
    assert narrowed.models["m"].engines == ("onnxruntime",)


@pytest.mark.parametrize("ref,match", [
    ("no_colon", "not of the form"),
    ("fixtures.nonexistent:thing", "cannot import module"),
    ("fixtures.models.digits:nope", "has no 'nope'; callables there: .*digits_cnn"),
])
def test_bad_factory_reference(ref, match):
    with pytest.raises(ConfigError, match=match):
        resolve(ref, "[models.m].factory")


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[models.x\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_cli_usage_error_names_the_model():
    """The pytest option path: an unknown --models is a usage error (exit code 4) with the valid list."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "pytest", "--models", "nosuchmodel", "--collect-only", "-q",
                           "-p", "no:cacheprovider", str(ROOT / "tests" / "selftest" / "test_config.py")],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--models: unknown 'nosuchmodel'; valid: digits_cnn" in proc.stderr


def test_known_failures_name_valid_cells_and_a_reason():
    m = parse_config(_with(known_failures={"onnxruntime-int8": "kernel bug, cosine 0.5"})).models["m"]
    assert m.known_failures == {"onnxruntime-int8": "kernel bug, cosine 0.5"}
    with pytest.raises(ConfigError, match=r"known_failures: unknown 'onnxrt'"):
        parse_config(_with(known_failures={"onnxrt-int8": "x"}))
    with pytest.raises(ConfigError, match=r"give the reason"):
        parse_config(_with(known_failures={"onnxruntime-int8": " "}))


def test_generated_distributions_per_precision():
    m = parse_config(_with(precision={"fp16": {"generated": ["uniform"]}})).models["m"]
    assert m.generated["fp16"] == ("uniform",)
    assert "extremes" not in m.generated["int8"] and "extremes" in m.generated["fp32"]
    with pytest.raises(ConfigError, match=r"generated: unknown 'gaussian'"):
        parse_config(_with(precision={"fp16": {"generated": ["gaussian"]}}))


def test_latency_batch_sizes_must_lie_in_the_profile():
    with pytest.raises(ConfigError, match=r"latency_batch_sizes \[64\] fall outside"):
        parse_config(_with(batch_sizes=[1, 32], latency_batch_sizes=[1, 64]))
