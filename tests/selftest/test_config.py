"""suite.toml parsing: the shipped config is valid; every broken entry is one clear error naming its key."""

import copy
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from metrics import compare_outputs, judge_accuracy
from suite.config import (
    ConfigError,
    KnownFailure,
    check_rounds_option,
    load_config,
    parse_batch_sizes_option,
    parse_config,
    resolve,
    threshold_changes,
)
from suite.config.defaults import default_precision_tables

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {
    "models": {
        "m": {"factory": "fixtures.models.digits:digits_cnn", "outputs": ["logits"],
              "inputs": [{"name": "image", "shape": [1, 28, 28]}]},
    },
}
DATA = "fixtures.data.digits:digits_test"
KNOWN = {"reason": "kernel bug, cosine 0.5", "match": r"cosine 0\.5\d* < 0\.98 required", "outputs": ["logits"],
         "metrics": ["cosine"], "expected": {"cosine": {"value": 0.51, "margin": 0.05}}}


def _with(**changes):
    raw = copy.deepcopy(MINIMAL)
    raw["models"]["m"].update(changes)
    return raw


def _input(**changes):
    return _with(inputs=[{"name": "image", "shape": [1, 28, 28], **changes}])


def _top(**tables):
    return {**copy.deepcopy(MINIMAL), **tables}


def test_shipped_config_parses_and_resolves():
    config = load_config(ROOT / "suite.toml")
    assert {"digits_cnn", "digits_siamese", "efficientnet_lite0", "resnet18", "mobilenet_v2"} <= set(config.models)
    for model in config.models.values():
        resolve(model.factory, model.name)
        for ref in filter(None, (model.accuracy_dataset, model.parity_dataset, model.calibration_dataset)):
            resolve(ref, model.name)
    assert [i.name for i in config.models["digits_siamese"].inputs] == ["left", "right"]
    assert config.requires == ("torch", "onnxruntime")
    assert config.accept_not_judged == ("unsupported", "no-data", "precision-not-run", "unavailable", "no-baseline")


def test_shipped_gpu_config_requires_cuda_and_its_engines():
    config = load_config(ROOT / "suite-gpu.toml")
    # The nightly must fail when one of its engines cannot run: TensorRT included, and nothing missing accepted.
    assert config.requires == ("cuda", "torch", "onnxruntime", "inductor", "tensorrt")
    assert config.accept_not_judged == ("unsupported", "no-data")


def test_shipped_gpu_config_has_resnet50_static_beside_resnet50():
    """The static-against-dynamic comparison: the same network, inputs, batches and data; static engines."""
    models = load_config(ROOT / "suite-gpu.toml").models
    dynamic, static = models["resnet50"], models["resnet50_static"]
    for attr in ("factory", "inputs", "outputs", "batch_sizes", "latency_shapes", "parity_dataset", "export"):
        assert getattr(static, attr) == getattr(dynamic, attr), attr
    assert static.static_batch and not dynamic.static_batch and static.batch_sizes == (1, 32, 256)
    assert static.engines == ("onnxruntime", "tensorrt") and static.precisions == ("fp16",)
    assert static.tolerance("fp16") == dynamic.tolerance("fp16")


def test_static_batch_and_export_options_parse_into_the_model():
    m = parse_config(_with(static_batch=True, opt_batch=8, export={"opset": 17, "exporter": "torchscript"})).models["m"]
    assert m.static_batch and m.profile.as_dict() == {"min": 1, "opt": 8, "max": 32, "static_batch": True}
    assert m.export == {"opset": 17, "exporter": "torchscript"}
    plain = parse_config(_with(export={"sample_batch": 4})).models["m"]
    assert not plain.static_batch and plain.export == {"sample_batch": 4}
    assert parse_config(MINIMAL).models["m"].export == {}


def test_defaults_and_profile():
    config = parse_config(MINIMAL)
    m = config.models["m"]
    assert m.batch_sizes == (1, 8, 32) and m.profile.as_dict() == {"min": 1, "opt": 32, "max": 32}
    assert m.tolerance("fp32").rtol == 1e-3 and m.tolerance("fp32").atol == 1e-5
    assert m.accuracy_threshold("int8").min_top1_ratio == 0.99
    assert config.requires == () and config.accept_not_judged == () and config.latency.rounds == 30


def test_per_precision_override_merges_over_defaults():
    raw = _with(precision={"fp16": {"parity": {"rtol": 0.05}}})
    m = parse_config(raw).models["m"]
    assert m.tolerance("fp16").rtol == 0.05 and m.tolerance("fp16").atol == 1e-2
    assert m.tolerance("fp32").rtol == 1e-3


@pytest.mark.parametrize("where,key,value,why", [
    ("parity", "rtol", 1e9, r"an element within 100% of the reference's magnitude is 'close'"),
    ("parity", "rtol", 1.0, r"[^)]*a zero output, or one of twice the value, passes"),
    ("parity", "atol", 1e9, r"every element within 1 of the reference's is 'close'"),
    ("parity", "min_isclose_pct", 0.0, r"0% of elements close is met by any output"),
    ("parity", "min_cosine", -1.0, r"every cosine is >= -1"),
    ("parity", "min_row_cosine", -1.0, r"every cosine is >= -1"),
    ("parity", "min_top1_agreement_pct", 0.0, r"0% agreement is met by any output"),
    ("parity", "min_retrieval_agreement_pct", 0, r"0% agreement is met by any output"),
    ("accuracy", "max_top1_drop", 1.0, r"top-1 cannot drop by more than 100%"),
    ("accuracy", "max_top5_drop", 1, r"top-5 cannot drop by more than 100%"),
])
def test_a_threshold_that_cannot_fail_is_refused_where_it_is_written(where, key, value, why):
    """Issue 43 item 7: rtol = atol = 1e9, min_cosine = -1 and min_isclose_pct = 0 let a sign-flipped engine pass in
    silence. Each is one line naming the key, at the model's table or the top's."""
    default = default_precision_tables()["fp32"][where].get(key)
    instead = (rf"delete it for the precision's default \({default:g}\)" if default is not None
               else "delete it: by default there is no such check")
    shown = re.escape(f"{value:g}")
    for raw, at in ((_with(precision={"fp32": {where: {key: value}}}), r"\[models\.m\]\.precision\.fp32"),
                    (_top(precision={"fp32": {where: {key: value}}}), r"\[precision\.fp32\]")):
        with pytest.raises(ConfigError, match=rf"^{at}\.{where}\.{key}: {shown} cannot fail \({why}.*\): a "
                                              rf"threshold that passes any output judges nothing; tighten it, or "
                                              rf"{instead}$"):
            parse_config(raw)


@pytest.mark.parametrize("where,key,value", [
    ("parity", "rtol", 0.999), ("parity", "atol", 0.5), ("parity", "min_isclose_pct", 0.1),
    ("parity", "min_cosine", -0.999), ("parity", "min_row_cosine", -0.5), ("parity", "min_top1_agreement_pct", 1.0),
    ("parity", "max_row_rel_error", 10.0), ("accuracy", "max_top1_drop", 0.999),
])
def test_a_loose_threshold_that_can_still_fail_is_taken(where, key, value):
    parse_config(_with(precision={"fp32": {where: {key: value}}}))


def test_a_precision_may_repeat_its_own_default_even_where_it_cannot_fail():
    """int8's isclose is reported, not gated (README 'Defaults per precision'): writing its default says nothing
    new; the same 0 at fp32 is refused."""
    m = parse_config(_with(precision={"int8": {"parity": {"min_isclose_pct": 0.0}}})).models["m"]
    assert m.tolerance("int8").min_isclose_pct == 0.0
    with pytest.raises(ConfigError, match=r"fp32\.parity\.min_isclose_pct: 0 cannot fail"):
        parse_config(_with(precision={"fp32": {"parity": {"min_isclose_pct": 0.0}}}))


@pytest.mark.parametrize("key", ["min_top1", "min_top5"])
def test_an_accuracy_floor_of_zero_is_refused(key):
    with pytest.raises(ConfigError, match=rf"^{M}\.{key}: 0 cannot fail \(any model's accuracy is >= 0\)"):
        parse_config(_with(accuracy_dataset=DATA, **{key: 0}))
    assert getattr(parse_config(_with(accuracy_dataset=DATA, **{key: 0.01})).models["m"], key) == 0.01


def test_approximate_outputs_names_the_models_outputs():
    m = parse_config(_with(precision={"int8": {"parity": {"approximate_outputs": ["logits"]}}})).models["m"]
    assert m.tolerance("int8").approximate_outputs == ("logits",) and m.tolerance("fp32").approximate_outputs == ()
    with pytest.raises(ConfigError, match=rf"^{M}: precision int8's parity.approximate_outputs names \['ids'\], not "
                                          r"among the model's outputs \['logits'\]$"):
        parse_config(_with(precision={"int8": {"parity": {"approximate_outputs": ["ids"]}}}))
    for bad, match in (("logits", r"expected a list"), ([], r"must not be empty"), ([1], r"\[0\]: expected a non-empty "
                                                                                         "string")):
        with pytest.raises(ConfigError, match=rf"^{M}\.precision\.int8\.parity\.approximate_outputs.*{match}"):
            parse_config(_with(precision={"int8": {"parity": {"approximate_outputs": bad}}}))


def test_thresholds_apart_from_the_defaults_are_named_looser_or_tighter():
    """Issue 43 item 7: what the verdict block and the report's first section list (suite/hooks/summary.py,
    report/verdict_section.py), from threshold_changes."""
    raw = _with(accuracy_dataset=DATA, min_top1=0.5, precision={"fp32": {
        "parity": {"rtol": 0.5, "min_cosine": 0.99, "min_isclose_pct": 99.5, "max_row_rel_error": 1e-6,
                   "approximate_outputs": ["logits"]},
        "accuracy": {"max_top1_drop": 0.001, "max_top5_drop": 0.005}}})
    m = parse_config(raw).models["m"]
    changes = threshold_changes("fp32", m.tolerance("fp32").as_dict(), dataclasses.asdict(m.accuracy_threshold("fp32")))
    assert changes == ["parity.rtol 0.5 (default 0.001, looser)", "parity.min_isclose_pct 99.5 (default 99, tighter)",
                       "parity.min_cosine 0.99 (default 0.99999, looser)",
                       "parity.max_row_rel_error 1e-06 (default 0.0001, tighter)",
                       "approximate_outputs ['logits'] (default none: integers compared exactly, looser)",
                       "accuracy.max_top1_drop 0.001 (default 0.005, tighter)"]
    plain = parse_config(_with()).models["m"]
    for precision in ("fp32", "tf32", "fp16", "bf16", "int8"):
        assert threshold_changes(precision, plain.tolerance(precision).as_dict(),
                                 dataclasses.asdict(plain.accuracy_threshold(precision))) == []
    off = threshold_changes("fp32", {"min_cosine": None, "min_row_cosine": 0.5}, {"max_top1_drop": None})
    assert off == ["parity.min_cosine off (default 0.99999, looser)", "parity.min_row_cosine 0.5 (default off, "
                   "tighter)", "accuracy.max_top1_drop off (default 0.005, looser)"]


def test_input_dtype_is_normalized_and_bounds_are_floats():
    spec = parse_config(_input(dtype="f4", low=0, high=255)).models["m"].inputs[0]
    assert (spec.dtype, spec.low, spec.high) == ("float32", 0.0, 255.0)


def test_a_bool_input_is_declared_with_its_range_0_to_1():
    spec = parse_config(_input(dtype="bool")).models["m"].inputs[0]
    assert (spec.dtype, spec.low, spec.high) == ("bool", 0.0, 1.0)


def test_integer_bounds_up_to_the_largest_float_within_the_type_are_taken():
    spec = parse_config(_input(dtype="int64", low=-(2**63), high=2**63 - 1024)).models["m"].inputs[0]
    assert (spec.low, spec.high) == (-(2.0**63), 2.0**63 - 1024)


M = r"\[models\.m\]"
BROKEN = [
    # ---- unknown names -------------------------------------------------------------------------------
    (_with(enignes=["torch"]), rf"^{M}: unknown key\(s\) enignes; valid: .*engines"),
    (_with(engines=["tensorflow"]),
     rf"^{M}\.engines\[0\]: unknown 'tensorflow'; valid: torch, onnxruntime, inductor, tensorrt$"),
    (_with(precisions=["fp8"]), rf"^{M}\.precisions\[0\]: unknown 'fp8'; valid: fp32, tf32, fp16, bf16, int8$"),
    (_top(extra={}), r"unknown key\(s\) extra"),
    (_with(precision={"fp16": {"parity": {"rtool": 1}}}), r"precision.fp16.parity: unknown key\(s\) rtool"),
    (_with(int8={"method": "magic"}), r"int8.method: unknown 'magic'; valid: minmax, entropy, percentile"),
    ({"models": {}}, r"no \[models.NAME\] entries"),
    (_top(engine_options={"torch": {"channel_last": True}}),
     r"\[engine_options.torch\]: unknown key\(s\) channel_last; valid: channels_last"),
    (_with(engine_options={"inductor": {"cxx": "g++", "compiler": "clang"}}),
     rf"{M}.engine_options.inductor: unknown key\(s\) compiler; valid: cxx, precisions"),
    # ---- empty lists make a model vanish: errors, not a green run of nothing -------------------------
    (_with(precisions=[]), rf"^{M}\.precisions: must not be empty, got \[\]$"),
    (_with(engines=[]), rf"^{M}\.engines: must not be empty"),
    (_with(batch_sizes=[]), rf"^{M}\.batch_sizes: must not be empty"),
    (_with(latency_batch_sizes=[]), rf"^{M}\.latency_batch_sizes: must not be empty"),
    (_with(inputs=[]), rf"^{M}\.inputs: must not be empty"),
    (_with(outputs=[]), rf"^{M}\.outputs: must not be empty"),
    (_top(defaults={"precisions": []}), r"^\[defaults\]\.precisions: must not be empty"),
    # ---- a string where a list belongs would be iterated letter by letter ----------------------------
    (_with(precisions="fp32"), rf"^{M}\.precisions: expected a list, got 'fp32'$"),
    (_with(outputs="logits"), rf"^{M}\.outputs: expected a list, got 'logits'$"),
    (_with(outputs=["logits", "logits"]), rf"^{M}\.outputs: duplicate output names"),
    (_with(engines=["torch", "torch"]), rf"^{M}\.engines: 'torch' listed more than once$"),
    # ---- integers are integers: 1.9, true and "1" are not batch sizes --------------------------------
    (_with(batch_sizes=[1.9]), rf"^{M}\.batch_sizes\[0\]: expected a batch size \(an integer\) >= 1, got 1\.9$"),
    (_with(batch_sizes=[True]), rf"^{M}\.batch_sizes\[0\]: expected a batch size \(an integer\) >= 1, got True$"),
    (_with(batch_sizes=["1"]), rf"^{M}\.batch_sizes\[0\]: expected a batch size \(an integer\) >= 1, got '1'$"),
    (_with(batch_sizes=[0, 8]), rf"^{M}\.batch_sizes\[0\]: expected a batch size \(an integer\) >= 1, got 0$"),
    (_with(batch_sizes=[8, 8]), rf"^{M}\.batch_sizes: \[8\] listed more than once"),
    (_with(batch_sizes=1), rf"^{M}\.batch_sizes: expected a list, got 1$"),
    (_top(defaults={"batch_sizes": [1, -4]}), r"^\[defaults\]\.batch_sizes\[1\]: expected a batch size"),
    (_with(latency_batch_sizes=[1.0]), rf"^{M}\.latency_batch_sizes\[0\]: expected a batch size"),
    (_with(parity_samples=0), rf"^{M}\.parity_samples: expected an integer >= 1, got 0$"),
    (_with(parity_samples="64"), rf"^{M}\.parity_samples: expected an integer >= 1, got '64'$"),
    (_top(latency={"rounds": 1}), r"^\[latency\]\.rounds: expected an integer in \[2, 10000\], got 1$"),
    (_top(latency={"rounds": 2.5}), r"^\[latency\]\.rounds: expected an integer in \[2, 10000\], got 2\.5$"),
    (_top(latency={"rounds": "30"}), r"^\[latency\]\.rounds: expected an integer in \[2, 10000\], got '30'$"),
    (_top(latency={"rounds": 1_000_000_000}),  # issue 43: ran until killed
     r"^\[latency\]\.rounds: expected an integer in \[2, 10000\], got 1000000000$"),
    (_top(latency={"warmup_fraction": 1.0}), r"^\[latency\]\.warmup_fraction: expected a finite number in \[0, 1\)"),
    (_top(latency={"warmup_fraction": -0.1}), r"^\[latency\]\.warmup_fraction: expected a finite number"),
    (_top(latency={"min_time_s": 1.0}), r"^\[latency\]: min_time_s was removed: it was never read"),
    # ---- the shape profile ---------------------------------------------------------------------------
    (_with(opt_batch="x"), rf"^{M}\.opt_batch: expected an integer >= 1, got 'x'$"),
    (_with(batch_sizes=[1, 32], opt_batch=64),
     rf"^{M}\.opt_batch: opt_batch 64 is outside batch_sizes \[1, 32\] \(range 1\.\.32\)"),
    (_with(reference_batch=0), rf"^{M}\.reference_batch: expected an integer >= 1, got 0$"),
    (_with(batch_sizes=[4, 32], reference_batch=2),
     rf"^{M}\.reference_batch: reference_batch 2 is outside batch_sizes \[4, 32\] \(range 4\.\.32\); the reference"),
    (_top(defaults={"reference_batch": 64}),
     rf"^\[defaults\]\.reference_batch \(used by {M}\): reference_batch 64 is outside batch_sizes \[1, 8, 32\]"),
    # ---- [models.NAME.export] and static_batch ---------------------------------------------------------
    (_with(export={"opset": 6}), rf"^{M}\.export\.opset: expected an opset \(an integer\) in \[7, \d+\] \(from the "
     r"oldest torch\.onnx exports to the newest the installed onnx [\d.]+ defines\), got 6$"),
    (_with(export={"opset": 999}), rf"^{M}\.export\.opset: expected an opset .*, got 999$"),
    (_with(export={"opset": "18"}), rf"^{M}\.export\.opset: expected an opset .*, got '18'$"),
    (_with(export={"opset": True}), rf"^{M}\.export\.opset: expected an opset .*, got True$"),
    (_with(export={"exporter": "onnx"}), rf"^{M}\.export\.exporter: unknown 'onnx'; valid: dynamo, torchscript$"),
    (_with(export={"exporter": ""}), rf"^{M}\.export\.exporter: expected a non-empty string, got ''$"),
    (_with(export={"sample_batch": 0}),
     rf"^{M}\.export\.sample_batch: expected a batch size \(an integer\) >= 1, got 0$"),
    (_with(batch_sizes=[1, 8], export={"sample_batch": 16}),
     rf"^{M}\.export\.sample_batch: 16 is outside batch_sizes \[1, 8\] \(range 1\.\.8\); the export traces"),
    (_with(static_batch=True, export={"sample_batch": 2}),
     rf"^{M}\.export\.sample_batch: set, but the model has static_batch = true, whose exports each trace at their "
     r"own batch; it would never be used$"),
    (_with(export={"batch": 2}), rf"^{M}\.export: unknown key\(s\) batch; valid: exporter, opset, sample_batch$"),
    (_with(export=["torchscript"]), rf"^{M}\.export: expected a table, got \['torchscript'\]$"),
    (_with(static_batch="yes"), rf"^{M}\.static_batch: expected true or false, got 'yes'$"),
    (_with(static_batch=1), rf"^{M}\.static_batch: expected true or false, got 1$"),
    (_with(static_batch=True, precisions=["fp32", "int8"], calibration_dataset=DATA),
     rf"^{M}\.static_batch: true, but precisions has int8, which has no static-batch graph"),
    (_top(defaults={"opt_batch": 256}),
     rf"^\[defaults\]\.opt_batch \(used by {M}\): opt_batch 256 is outside batch_sizes \[1, 8, 32\]"),
    (_with(batch_sizes=[1, 32], latency_batch_sizes=[1, 64]),
     rf"^{M}\.latency_batch_sizes: latency_batch_sizes \[64\] fall outside batch_sizes \[1, 32\]"),
    # ---- inputs --------------------------------------------------------------------------------------
    (_with(inputs=[{"name": "x"}]), r"inputs\[0\]: needs name and shape"),
    (_with(inputs=["image"]), rf"^{M}\.inputs\[0\]: expected a table like"),
    (_input(shape=[1, 0, 28]), rf"^{M}\.inputs\[0\]\.shape\[1\]: expected a dimension \(an integer\) >= 1, got 0$"),
    (_input(shape=[1, -28, 28]), rf"^{M}\.inputs\[0\]\.shape\[1\]: expected a dimension .* got -28$"),
    (_input(shape=[4, "T"]), rf"^{M}\.inputs\[0\]\.shape\[1\]: axis 'T' is not declared in {M}\.axes \(declared: n"),
    (_input(shape=[4, 2.0]), rf"^{M}\.inputs\[0\]\.shape\[1\]: expected a dimension .* got 2\.0$"),
    (_input(shape="1x28x28"), rf"^{M}\.inputs\[0\]\.shape: expected a list"),
    (_input(name=""), rf"^{M}\.inputs\[0\]\.name: expected a non-empty string, got ''$"),
    (_input(dtype="floaty"), rf"^{M}\.inputs\[0\]\.dtype: unknown dtype 'floaty'; valid: float16, float32, "
                             r"float64, int8, int16, int32, int64, uint8, bool$"),
    (_input(dtype="float128"), r"unknown dtype 'float128'"),
    (_input(dtype="complex64"), r"unknown dtype 'complex64'"),
    (_input(dtype="U8"), r"unknown dtype 'U8'"),
    (_input(dtype=32), rf"^{M}\.inputs\[0\]\.dtype: expected a non-empty string, got 32$"),
    (_input(low=float("nan")), rf"^{M}\.inputs\[0\]\.low: expected a finite number, got nan$"),
    (_input(high=float("inf")), rf"^{M}\.inputs\[0\]\.high: expected a finite number, got inf$"),
    (_input(low="0"), rf"^{M}\.inputs\[0\]\.low: expected a finite number, got '0'$"),
    (_input(low=1.0, high=1.0), rf"^{M}\.inputs\[0\]: low 1\.0 must be below high 1\.0"),
    (_input(low=2.0, high=1.0), rf"^{M}\.inputs\[0\]: low 2\.0 must be below high 1\.0"),
    (_input(dtype="int64", low=0, high=9.5), rf"^{M}\.inputs\[0\]\.high: 9\.5 is not an integer within int64"),
    (_input(dtype="uint8", low=-1, high=9), rf"^{M}\.inputs\[0\]\.low: -1 is not an integer within uint8 \[0, 255\]"),
    (_input(dtype="float16", low=0, high=1e6), rf"^{M}\.inputs\[0\]\.high: 1000000\.0 does not fit in float16"),
    (_input(dtype="bool", low=0, high=2), rf"^{M}\.inputs\[0\]\.high: 2; a bool input takes low = 0 and high = 1"),
    # int64's max is an int64, but the bound is held as a float, which rounds it to 2**63: past the type
    (_input(dtype="int64", low=0, high=2**63 - 1), rf"^{M}\.inputs\[0\]\.high: 9223372036854775807 is held as the "
     r"float 9\.2233720368547758e\+18, outside int64 .* use at most 9223372036854774784$"),
    (_input(dtype="float64", low=-1.7e308, high=1.7e308),
     rf"^{M}\.inputs\[0\]: low -1\.7e\+308 to high 1\.7e\+308 is wider than a float64 can hold \(high - low overflows"),
    (_with(inputs=[{"name": "a", "shape": [1]}, {"name": "a", "shape": [2]}]), rf"^{M}\.inputs: duplicate input names"),
    # ---- thresholds ----------------------------------------------------------------------------------
    (_with(min_top1=1.5, accuracy_dataset=DATA), rf"^{M}\.min_top1: expected a finite number in \[0, 1\], got 1\.5$"),
    (_with(min_top5=1.5, accuracy_dataset=DATA), rf"^{M}\.min_top5: expected a finite number in \[0, 1\], got 1\.5$"),
    (_with(min_top5=95, accuracy_dataset=DATA), rf"^{M}\.min_top5: expected a finite number in \[0, 1\], got 95$"),
    (_with(min_top1="0.9", accuracy_dataset=DATA), rf"^{M}\.min_top1: expected a finite number"),
    (_with(min_top1=0.9), rf"^{M}\.min_top1: set, but the model has no accuracy_dataset"),
    (_with(precision={"fp16": {"parity": {"rtol": -1}}}),
     rf"^{M}\.precision\.fp16\.parity\.rtol: rtol must be finite and >= 0, got -1$"),
    (_with(precision={"fp16": {"parity": {"min_cosine": "high"}}}),
     rf"^{M}\.precision\.fp16\.parity\.min_cosine: expected a finite number, got 'high'$"),
    (_with(precision={"fp16": {"parity": {"min_isclose_pct": 0.9e3}}}),
     rf"^{M}\.precision\.fp16\.parity\.min_isclose_pct: min_isclose_pct must be in \[0, 100\], got 900\.0$"),
    (_top(precision={"int8": {"accuracy": {"min_top1_ratio": 0}}}),
     r"^\[precision\.int8\]\.accuracy\.min_top1_ratio: min_top1_ratio must be in \(0, 1\], got 0$"),
    (_with(precision={"fp32": {"accuracy": {"max_top1_drop": 1.5}}}),
     rf"^{M}\.precision\.fp32\.accuracy\.max_top1_drop: max_top1_drop must be a fraction in \[0, 1\], got 1\.5$"),
    (_with(precision={"fp32": {"accuracy": {"max_top5_drop": True}}}),
     rf"^{M}\.precision\.fp32\.accuracy\.max_top5_drop: expected a finite number, got True$"),
    (_with(precision={"fp32": {"accuracy": {"min_top1": 0.5}}}), r"accuracy: unknown key\(s\) min_top1"),
    (_with(precision={"fp16": {"generated": []}}), rf"^{M}\.precision\.fp16\.generated: must not be empty"),
    (_with(precision={"fp16": 3}), rf"^{M}\.precision\.fp16: expected a table, got 3$"),
    # ---- int8 ----------------------------------------------------------------------------------------
    (_with(precisions=["int8"]), r"int8 needs calibration_dataset"),
    (_top(int8={"samples": 1.5}), r"^\[int8\]\.samples: expected an integer >= 1, got 1\.5$"),
    (_with(int8={"samples": 0}), rf"^{M}\.int8\.samples: expected an integer >= 1, got 0$"),
    (_with(int8={"percentile": 0}), rf"^{M}\.int8\.percentile: expected a finite number in \(0, 100\], got 0$"),
    (_with(int8={"percentile": 100.5}), rf"^{M}\.int8\.percentile: expected a finite number in \(0, 100\]"),
    (_with(int8={"per_channel": "yes"}), rf"^{M}\.int8\.per_channel: expected true or false, got 'yes'$"),
    (_with(int8={"method": 3}), rf"^{M}\.int8\.method: expected a non-empty string, got 3$"),
    # ---- references and text -------------------------------------------------------------------------
    (_with(factory=3), rf"^{M}\.factory: expected a non-empty string, got 3$"),
    (_with(factory="fixtures.models.digits"), rf"^{M}\.factory: 'fixtures.models.digits' is not of the form"),
    (_with(accuracy_dataset=["a:b"]), rf"^{M}\.accuracy_dataset: expected a non-empty string"),
    (_with(parity_dataset="nocolon"), rf"^{M}\.parity_dataset: 'nocolon' is not of the form"),
    (_with(calibration_dataset=":x"), rf"^{M}\.calibration_dataset: ':x' is not of the form"),
    (_with(description=3), rf"^{M}\.description: expected a non-empty string, got 3$"),
    # ---- engine options ------------------------------------------------------------------------------
    (_top(engine_options={"torch": {"channels_last": "yes"}}),
     r"^\[engine_options\.torch\]\.channels_last: expected true or false, got 'yes'$"),
    (_with(engine_options={"onnxruntime": {"execution_provider": "rocm"}}),
     rf"^{M}\.engine_options\.onnxruntime\.execution_provider: unknown 'rocm'; valid: cpu, cuda, tensorrt$"),
    (_top(engine_options={"onnxruntime": {"intra_op_threads": 0}}),
     r"^\[engine_options\.onnxruntime\]\.intra_op_threads: expected an integer >= 1, got 0$"),
    (_top(engine_options={"onnxruntime": {"intra_op_threads": 2.0}}), r"intra_op_threads: expected an integer"),
    (_top(engine_options={"inductor": {"precisions": []}}), r"^\[engine_options\.inductor\]\.precisions: must not"),
    (_top(engine_options={"inductor": {"precisions": ["fp8"]}}),
     r"^\[engine_options\.inductor\]\.precisions\[0\]: unknown 'fp8'"),
    (_top(engine_options={"inductor": {"precisions": "fp32"}}), r"inductor\]\.precisions: expected a list"),
    (_top(engine_options={"inductor": {"cxx": 3}}), r"^\[engine_options\.inductor\]\.cxx: expected a non-empty"),
    (_top(engine_options={"tensorrt": {"workspace_mb": 0}}),
     r"^\[engine_options\.tensorrt\]\.workspace_mb: expected an integer >= 1, got 0$"),
    (_top(engine_options={"tensorrt": {"builder_optimization_level": 6}}),
     r"^\[engine_options\.tensorrt\]\.builder_optimization_level: expected an integer in \[0, 5\], got 6$"),
    (_top(engine_options={"tensorrt": {"builder_optimization_level": 3.0}}), r"expected an integer in \[0, 5\]"),
    (_top(engine_options={"tensorrt": 3}), r"^\[engine_options\.tensorrt\]: expected a table, got 3$"),
    # ---- tables that name what the model never runs -----------------------------------------------------
    (_with(int8={"method": "entropy"}), rf"^{M}\.int8: set, but the model's precisions \['fp32'\] have no int8, so "
                                        r"it would never be used"),
    (_with(engine_options={"tensorrt": {"workspace_mb": 512}}),
     rf"^{M}\.engine_options\.tensorrt: set, but the model's engines \['torch', 'onnxruntime'\] have no tensorrt"),
    (_with(engines=["torch", "inductor"], engine_options={"inductor": {"precisions": ["fp32", "fp16"]}}),
     rf"^{M}\.engine_options\.inductor\.precisions\[1\]: 'fp16' is not among the model's precisions \['fp32'\]"),
    (_top(engine_options={"inductor": {"precisions": ["fp16"]}},
          models={"m": {**MINIMAL["models"]["m"], "engines": ["torch", "inductor"]}}),
     rf"^\[engine_options\.inductor\]\.precisions \(used by {M}\): \['fp16'\] share no precision with the "
     r"model's precisions \['fp32'\], so every inductor cell would end not judged"),
    # ---- [run] ---------------------------------------------------------------------------------------
    (_top(run={"requires": ["gpu"]}), r"^\[run\]\.requires\[0\]: unknown 'gpu'; valid: cuda, torch, onnxruntime"),
    (_top(run={"requires": "cuda"}), r"^\[run\]\.requires: expected a list, got 'cuda'$"),
    (_top(run={"requires": ["inductor"]}),
     r"^\[run\]\.requires\[0\]: engine 'inductor' is required but no model lists it in engines"),
    (_top(run={"accept_not_judged": ["sometimes"]}),
     r"^\[run\]\.accept_not_judged: unknown reason\(s\) 'sometimes'; valid: unsupported, unavailable, no-data"),
    (_top(run={"accept_not_judged": ["none", "busy"]}),
     r"^\[run\]\.accept_not_judged = \['none', 'busy'\]: 'none' means no reason and cannot be combined with others$"),
    (_top(run={"accept_not_judged": [3]}), r"^\[run\]\.accept_not_judged\[0\]: expected a non-empty string, got 3$"),
    (_top(run={"accept_not_judged": "unsupported"}), r"^\[run\]\.accept_not_judged: expected a list"),
    (_top(run={"require": ["cuda"]}), r"^\[run\]: unknown key\(s\) require; valid: accept_not_judged, requires$"),
    # ---- a batch that no machine holds ----------------------------------------------------------------
    (_with(batch_sizes=[1, 10_000_000_000]), rf"^{M}\.batch_sizes: a batch of 10000000000 takes 28\.5 TiB of inputs "
                                             r"\(3136 bytes a row, each named axis at its max\), more than the 16 GiB"),
    (_top(defaults={"batch_sizes": [1, 10_000_000]}),
     rf"^\[defaults\]\.batch_sizes \(used by {M}\): a batch of 10000000 takes 29\.2 GiB"),
    # ---- model names: they start every test id ----------------------------------------------------------
    ({"models": {"": MINIMAL["models"]["m"]}}, r"^\[models\.''\]: a model name is ASCII letters, digits, '_', '\.' "
                                              r"and '-', not starting with '-'"),
    ({"models": {"-m": MINIMAL["models"]["m"]}}, r"^\[models\.'-m'\]: a model name is ASCII letters"),
    ({"models": {"a b": MINIMAL["models"]["m"]}}, r"^\[models\.'a b'\]: a model name"),
    ({"models": {"\u00e9": MINIMAL["models"]["m"]}}, r"^\[models\.'\u00e9'\]: a model name"),
    ({"models": {"x-torch-fp32": MINIMAL["models"]["m"]}},
     r"^\[models\.x-torch-fp32\]: the name holds 'torch-fp32', an engine-precision pair"),
    ({"models": {"onnxruntime-int8-v2": MINIMAL["models"]["m"]}}, r"holds 'onnxruntime-int8', an engine-precision"),
    # ---- tables that are not tables ------------------------------------------------------------------
    (_top(models=[]), r"^\[models\]: expected a table, got \[\]$"),
    (_top(models={"m": 3}), rf"^{M}: expected a table, got 3$"),
    (_top(defaults=[]), r"^\[defaults\]: expected a table"),
    (_top(precision={"fp16": []}), r"^\[precision.fp16\]: expected a table"),
]


@pytest.mark.parametrize("raw,match", BROKEN)
def test_broken_config_is_a_clear_error(raw, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(raw)


# Values of every type TOML can hold, and None (a caller's dict), put in place of each key in turn.
_ODD_VALUES = [None, True, 0, -1, 1.5, float("nan"), "", "x", [], [0], ["x"], [[1]], {}, {"x": 1}]
_KEY_PATHS = [
    ("models", "m", key) for key in ("factory", "inputs", "outputs", "batch_sizes", "latency_batch_sizes",
                                     "opt_batch", "reference_batch", "precisions", "engines", "accuracy_dataset",
                                     "parity_dataset",
                                     "calibration_dataset", "min_top1", "min_top5", "parity_samples", "precision",
                                     "int8", "engine_options", "description", "known_failures", "export",
                                     "static_batch")
] + [("models", "m", "inputs", 0, key) for key in ("name", "shape", "dtype", "low", "high")] + [
    ("models", "m", "export", key) for key in ("opset", "exporter", "sample_batch")
] + [
    ("defaults", key) for key in ("batch_sizes", "latency_batch_sizes", "opt_batch", "reference_batch", "precisions",
                                  "engines", "parity_samples")
] + [("latency", "rounds"), ("latency", "warmup_fraction"), ("int8", "method"), ("int8", "samples"),
     ("int8", "percentile"), ("int8", "per_channel"), ("run", "requires"), ("run", "accept_not_judged"),
     ("precision", "fp16", "parity", "rtol"), ("precision", "fp16", "accuracy", "max_top1_drop"),
     ("precision", "fp16", "parity", "approximate_outputs"), ("precision", "fp16", "parity", "max_row_rel_error"),
     ("precision", "fp16", "generated"), ("models", "m", "known_failures", "torch-fp32"),
     ("engine_options", "torch", "channels_last"), ("engine_options", "onnxruntime", "execution_provider"),
     ("engine_options", "onnxruntime", "intra_op_threads"), ("engine_options", "inductor", "precisions"),
     ("engine_options", "inductor", "cxx"), ("engine_options", "tensorrt", "workspace_mb"),
     ("engine_options", "tensorrt", "builder_optimization_level"), ("models", "m", "inputs", 0, "shape", 0)]


@pytest.mark.parametrize("path", _KEY_PATHS, ids=lambda p: ".".join(map(str, p)))
def test_any_value_of_any_type_is_accepted_or_a_config_error_never_a_traceback(path):
    """Whatever is written at a key, the answer is a parsed config or one ConfigError naming that key."""
    for value in _ODD_VALUES:
        raw = copy.deepcopy(MINIMAL)
        raw["models"]["m"]["accuracy_dataset"] = DATA  # so that min_top1/min_top5 are judged on their own
        node = raw
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
        node[path[-1]] = value
        try:
            parse_config(raw)
        except ConfigError as exc:
            assert str(path[-1]) in str(exc) or str(path[-2]) in str(exc), (path, value, str(exc))


def test_model_names_that_fit_a_test_id_are_taken():
    for name in ("m", "my-net", "resnet50_static", "v1.2", "_x", "torch", "fp32-net", "torch_fp32"):
        assert name in parse_config({"models": {name: MINIMAL["models"]["m"]}}).models


def test_missing_required_key_names_it():
    raw = copy.deepcopy(MINIMAL)
    del raw["models"]["m"]["outputs"]
    with pytest.raises(ConfigError, match=r"\[models.m\]: missing required key 'outputs'"):
        parse_config(raw)


def test_selection_unknown_names_list_valid_ones_and_keeps_the_run_table():
    config = parse_config(_top(run={"requires": ["cuda", "onnxruntime"], "accept_not_judged": ["unsupported"]}))
    with pytest.raises(ConfigError, match=r"--models: unknown 'nope'; valid: m"):
        config.select(["nope"], None, None)
    with pytest.raises(ConfigError, match=r"--precisions: unknown 'fp64'"):
        config.select(None, None, ["fp64"])
    narrowed = config.select(["m"], ["onnxruntime"], None)
    assert narrowed.models["m"].engines == ("onnxruntime",)
    assert narrowed.requires == ("cuda", "onnxruntime") and narrowed.accept_not_judged == ("unsupported",)


def test_accept_not_judged_none_means_no_reason():
    assert parse_config(_top(run={"accept_not_judged": ["none"]})).accept_not_judged == ()


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


# =========================================================================== known failures


def test_known_failure_says_what_fails_and_how():
    m = parse_config(_with(engines=["onnxruntime"], known_failures={"onnxruntime-fp32": {**KNOWN,
                                                                                         "checks": ["parity"]}}))
    entry = m.models["m"].known_failures["onnxruntime-fp32"]
    assert entry == KnownFailure(KNOWN["reason"], KNOWN["match"], ("parity",), ("logits",), ("cosine",),
                                 (("cosine", 0.51, 0.05),))
    assert entry.covers("parity", "m-onnxruntime-fp32: output 'logits' (32, 10): cosine 0.51 < 0.98 required")
    assert not entry.covers("accuracy", "cosine 0.51 < 0.98 required")
    assert not entry.covers("parity", "EngineBuildError: int8 calibration of 'm' (minmax, 256 rows) failed")
    default = parse_config(_with(known_failures={"onnxruntime-fp32": KNOWN})).models["m"].known_failures
    assert default["onnxruntime-fp32"].checks == ("accuracy", "parity")


def test_a_known_failure_has_a_floor():
    """issue 43, item 1: an entry for top-1 agreement 84 % absorbed the same figure at 58 %. A failed figure is the
    known one only within its declared value and margin: below the floor (above a ceiling) it is another failure."""
    entry = KnownFailure("r", "x", ("parity",), ("a",), ("top1_agreement_pct", "max_abs_error"),
                         (("top1_agreement_pct", 84.0, 3.0), ("max_abs_error", 0.1, 0.05)))
    assert entry.bound("top1_agreement_pct") == 81.0 and entry.bound("max_abs_error") == pytest.approx(0.15)
    assert entry.bound("cosine") is None
    assert entry.beyond((("a", "top1_agreement_pct", 81.0), ("a", "max_abs_error", 0.15))) is None  # at the bounds
    assert entry.beyond((("a", "top1_agreement_pct", 99.0), ("a", "max_abs_error", 0.0))) is None  # better is fine
    assert entry.beyond((("a", "top1_agreement_pct", 84.0), ("a", "top1_agreement_pct", 58.0))) == (
        "it has top1_agreement_pct of output 'a' at 58, beyond the declared 84 - 3 (the entry's floor 81): it failed "
        "further than the known failure")
    assert entry.beyond((("a", "top1_agreement_pct", 80.99),)) is not None
    assert "beyond the declared 0.1 + 0.05 (the entry's ceiling 0.15)" in entry.beyond((("a", "max_abs_error", 0.151),))
    for missing in (None, float("nan")):
        assert entry.beyond((("a", "top1_agreement_pct", missing),)) == (
            "it has no recorded value of top1_agreement_pct of output 'a' to hold to the declared one")
    assert entry.beyond((("a", "cosine", 0.5),)) == ("it has failed figure cosine of output 'a', for which the entry "
                                                     "declares no value and margin")
    assert "(expected top1_agreement_pct 84 +- 3, max_abs_error 0.1 +- 0.05)" in entry.describe()


def test_a_known_failure_absorbs_only_its_figures_on_its_outputs():
    """Issue 23: an entry for output a also absorbed output b's garbage (cosine -1), because its pattern was
    searched in the whole failure text; and a plain ValueError (mismatched shapes) whose text matched."""
    entry = KnownFailure("r", r"isclose [0-9.]+% < ", ("parity",), ("a",), ("isclose_pct",))
    ours = "m-onnxruntime-fp32 on d[:64]: output 'a' (64, 5): isclose 0.00% < 99.00% required (rtol=0.001, atol=1e-05)"
    garbage = "m-onnxruntime-fp32 on d[:64]: output 'b' (64, 5): isclose 0.00% < 99.00% required; cosine -1.00000 < "
    assert entry.covers("parity", ours)
    assert entry.covers("parity", ours, (("a", "isclose_pct"),))
    # The figures decide, not the text: another output, another figure, a figure without a name, none at all.
    assert not entry.covers("parity", ours, (("a", "isclose_pct"), ("b", "isclose_pct"), ("b", "cosine")))
    assert "output 'b': isclose_pct, cosine; declared: outputs ['a'], metrics ['isclose_pct']" in entry.refusal(
        "parity", ours, (("a", "isclose_pct"), ("b", "isclose_pct"), ("b", "cosine")))
    assert not entry.covers("parity", ours, (("a", "cosine"),))
    assert not entry.covers("parity", ours, (("a", None),))
    assert entry.refusal("parity", ours, ()) == ("it states no failed figure of an output, so it is not the declared "
                                                 "failure")
    assert not entry.covers("parity", ours, (("a", "nonfinite"),))
    # Read from a parity message where no figures are given (tests/parity's choice to localize).
    assert not entry.covers("parity", f"{ours}\n{garbage}")
    assert not entry.covers("parity", "isclose 0.00% < 99.00% required")  # no output named: no figure
    # An exception is never a known failure, whatever its text.
    mismatch = "ValueError: output 'a': shape mismatch: reference (64, 1, 5) vs engine (64, 5); isclose 0% < "
    assert not entry.covers("parity", mismatch, (("a", "isclose_pct"),), exception="ValueError")
    assert entry.refusal("parity", mismatch, (), exception="ValueError") == (
        "it is an exception (ValueError), not a check's failed figures: a known failure absorbs only the figures it "
        "names")
    # The pattern still has to match.
    assert entry.refusal("parity", "output 'a' (64, 5): isclose", (("a", "isclose_pct"),)) == (
        "it does not match /isclose [0-9.]+% < /")


def test_each_refusal_of_a_known_failure_says_exactly_why():
    """The refusals under mutation (tools/mutation.sh): each names what it refused, in words a report can show."""
    from suite.config.known_failures import parity_failures_in

    entry = KnownFailure("r", "required", ("accuracy", "parity"), ("a",), ("isclose_pct",))
    two = "output 'a' (64, 5): isclose 0.00% < 99.00% required; cosine 0.51 < 0.98 required"
    assert parity_failures_in(two) == (("a", "isclose_pct"), ("a", "cosine"))
    assert entry.refusal("latency", two) == "the entry covers accuracy, parity, not latency"
    ours = "output 'a' (64, 5): isclose 0.00% < 99.00% required"
    assert entry.covers("parity", ours)
    # an accuracy failure's figures are never read from a parity headline in its text
    assert entry.refusal("accuracy", ours) == ("it states no failed figure of an output, so it is not the declared "
                                               "failure")
    assert entry.refusal("parity", ours, (("a", "nonfinite"),)) == (
        "it says 'NaN/Inf', which no known failure may absorb (a broken engine or model)")
    assert entry.refusal("parity", f"{ours}\nengine output has 3 NaN/Inf values", (("a", "isclose_pct"),)) == (
        "it says 'engine output has 3 NaN/Inf', which no known failure may absorb (a broken engine or model)")
    assert entry.refusal("parity", ours, (("a", None), ("a", "isclose_pct"))) == (
        "it has a failure of output 'a' that names no figure, which no known failure may absorb")
    assert entry.refusal("parity", ours, (("a", "cosine"), ("b", "isclose_pct"))) == (
        "it has failed figures the entry does not declare (output 'a': cosine; output 'b': isclose_pct; declared: "
        "outputs ['a'], metrics ['isclose_pct'])")
    ceiling = KnownFailure("r", "x", ("parity",), ("a",), ("max_abs_error",), (("max_abs_error", 0.1, 0.05),))
    assert ceiling.beyond((("a", "max_abs_error", ceiling.bound("max_abs_error")),)) is None  # the ceiling is in


def test_every_failure_the_metrics_write_names_its_figure():
    """A failure the comparators write must name a figure (else no known failure could ever declare it, and a new
    check would silently be one no entry absorbs): every check of compare_arrays and judge_accuracy, failed."""
    from metrics import AccuracyThreshold, Tolerance
    from metrics.parity import compare_arrays
    from metrics.parity_report import NONFINITE, PARITY_METRICS, failed_metric
    from suite.config import ACCURACY_METRICS, accuracy_failed_metric

    rng = np.random.default_rng(0)
    ref = rng.normal(size=(64, 8))
    tol = Tolerance(min_isclose_pct=99.0, max_abs_error=0.1, min_cosine=0.99, min_top1_agreement_pct=99.0,
                    min_row_cosine=0.99)
    bad = -ref
    bad[0, 0] = np.nan
    report = compare_arrays("x", ref, bad, tol)
    named = [failed_metric(f) for f in report.failures]
    assert sorted(set(named)) == sorted({NONFINITE, "isclose_pct", "max_abs_error", "cosine", "top1_agreement_pct",
                                         "worst_row_cosine"}), report.failures
    embedding = compare_arrays("e", ref, rng.normal(size=ref.shape), Tolerance(min_isclose_pct=0.0,
                                                                                min_retrieval_agreement_pct=99.0))
    assert [failed_metric(f) for f in embedding.failures] == ["retrieval_agreement_pct"], embedding.failures
    scaled = ref.copy()
    scaled[3] *= 1.05
    row = compare_arrays("r", ref, scaled, Tolerance(min_isclose_pct=90.0, max_row_rel_error=1e-5))
    assert [failed_metric(f) for f in row.failures] == ["worst_row_rel_error"], row.failures
    ids = np.arange(64) + 30000
    exact = compare_arrays("ids", ids, ids + 1, Tolerance())
    assert [failed_metric(f) for f in exact.failures] == ["exact_match_pct"], exact.failures
    assert set(named) | {"retrieval_agreement_pct", "worst_row_rel_error", "exact_match_pct"} == {
        *PARITY_METRICS, NONFINITE}
    assert failed_metric("output 'x' changed") is None
    labels = np.arange(64) % 8
    logits = np.eye(8)[labels]
    wrong = np.roll(logits, 1, axis=1)
    wrong[0] = np.nan
    threshold = AccuracyThreshold(min_top1=0.9, min_top5=0.99, max_top1_drop=0.01, min_top1_ratio=0.99,
                                  max_top5_drop=0.01)
    accuracy = judge_accuracy(wrong, labels, logits, threshold)
    assert len(accuracy.failures) == 6, accuracy.failures
    assert sorted({accuracy_failed_metric(f) for f in accuracy.failures}) == sorted({*ACCURACY_METRICS, NONFINITE})
    assert accuracy_failed_metric("accuracy moved") is None


KF = rf"^{M}\.known_failures\.onnxruntime-fp32"


@pytest.mark.parametrize("entry,match", [
    ("kernel bug, cosine 0.5", KF + r" = 'kernel bug, cosine 0.5': a plain reason is the old form, which hid any "
     r"failure of the cell; write onnxruntime-fp32 = \{ reason = \"what fails, measured how, since when\", "
     r"outputs = \[\"logits\"\], metrics = \[\"top1_agreement_pct\"\], expected = \{ top1_agreement_pct = \{ "
     r"value = 64.0, margin = 4.0 \} \}, match = \"REGEX over the failure message\", checks = \[\"parity\"\] \}$"),
    ({**KNOWN, "match": "cosine (0.5"}, KF + r"\.match = 'cosine \(0.5': not a valid regular expression"),
    ({**KNOWN, "match": ".*"}, KF + r"\.match = '\.\*': matches an empty message, so it would match any failure"),
    ({**KNOWN, "match": ""}, KF + r"\.match: expected a non-empty string"),
    ({**KNOWN, "match": "."}, KF + r"\.match = '\.': matches 'EngineBuildError', what a broken engine says in any "
                                  r"cell, so it would hide such a failure"),
    ({**KNOWN, "match": "NaN"}, KF + r"\.match = 'NaN': matches 'engine output has 3 NaN/Inf values'"),
    ({**KNOWN, "match": r"shape \("},
     KF + r"\.match = 'shape \\\\\(': matches \"OutputShapeError: output 'out' has shape"),
    ({"reason": "x"}, KF + r": missing required key 'match'; the form is \{ reason ="),
    ({"reason": "x", "match": "cosine 0"}, KF + r": missing 'outputs' and 'metrics': a known failure names the outputs "
     r"and the figures that fail on them, and absorbs no other failure of the cell \(its match alone once absorbed "
     r"another output's garbage\); add outputs = \[one or more of \['logits'\]\], metrics = \[one or more of "
     r"isclose_pct, max_abs_error, cosine, top1_agreement_pct, worst_row_cosine, retrieval_agreement_pct, "
     r"exact_match_pct, worst_row_rel_error, top1, top5\]$"),
    ({"reason": "x", "match": "cosine 0", "outputs": ["logits"]}, KF + r": missing 'metrics': "),
    ({**KNOWN, "outputs": ["probs"]}, KF + r"\.outputs\[0\]: unknown 'probs'; valid: logits$"),
    ({**KNOWN, "outputs": []}, KF + r"\.outputs: must not be empty"),
    ({**KNOWN, "metrics": ["cosine_sim"]}, KF + r"\.metrics\[0\]: unknown 'cosine_sim'; valid: isclose_pct, "),
    ({**KNOWN, "metrics": []}, KF + r"\.metrics: must not be empty"),
    ({**KNOWN, "metrics": ["nonfinite"]}, KF + r"\.metrics\[0\]: unknown 'nonfinite'"),
    ({**KNOWN, "metrics": ["top1"], "checks": ["parity"]},
     KF + r"\.metrics\[0\]: 'top1' is a figure of the accuracy check, which the entry does not cover \(checks "
     r"\['parity'\]\); figures of those: isclose_pct, "),
    ({**KNOWN, "reason": " "}, KF + r"\.reason: expected a non-empty string"),
    ({**KNOWN, "checks": ["latency"]}, KF + r"\.checks\[0\]: unknown 'latency'; valid: accuracy, parity$"),
    ({**KNOWN, "checks": []}, KF + r"\.checks: must not be empty"),
    ({**KNOWN, "checks": ["accuracy"]}, KF + r"\.checks: 'accuracy' listed, but the model has no accuracy_dataset"),
    ({**KNOWN, "since": "today"}, KF + r": unknown key\(s\) since; valid: checks, expected, expected_on, match, "
     r"metrics, outputs, reason$"),
    # a depth per data set: only one the cell's checks see, holding every figure of metrics
    ({**KNOWN, "expected_on": {"generated:zeros": {"cosine": {"value": 0.5, "margin": 0.1}}}},
     KF + r"\.expected_on: unknown 'generated:zeros'; valid: generated:uniform, generated:normal, generated:extremes, "
     r"generated:sparse$"),
    ({**KNOWN, "expected_on": {"generated:sparse": {}}},
     KF + r"\.expected_on\.generated:sparse: 'cosine' is in metrics but has no value and margin"),
    ({**KNOWN, "expected_on": {"generated:sparse": {"cosine": {"value": 0.5, "margin": 1.5}}}},
     KF + r"\.expected_on\.generated:sparse\.cosine: value 0\.5 - margin 1\.5 = -1, a floor no cosine can fall"),
    # issue 43, item 1: a known failure states how far its figure may fall
    ({k: v for k, v in KNOWN.items() if k != "expected"},
     KF + r"\.expected: missing: a known failure states how far each of its figures may fall, as the value seen and a "
     r"margin \(in the results file's units: top1/top5 as fractions\); add expected = \{ cosine = \{ value = V, "
     r"margin = M \} \}$"),
    ({**KNOWN, "expected": {}}, KF + r"\.expected: 'cosine' is in metrics but has no value and margin"),
    ({**KNOWN, "expected": {"cosine": {"value": 0.5, "margin": 0.1}, "isclose_pct": {"value": 1, "margin": 1}}},
     KF + r"\.expected: unknown key\(s\) isclose_pct; valid: cosine$"),
    ({**KNOWN, "expected": {"cosine": {"value": 0.5}}}, KF + r"\.expected\.cosine: missing 'margin'"),
    ({**KNOWN, "expected": {"cosine": {"value": 0.5, "margin": -0.1}}},
     KF + r"\.expected\.cosine\.margin: expected a finite number, got -0\.1"),
    ({**KNOWN, "expected": {"cosine": {"value": "0.5", "margin": 0.1}}},
     KF + r"\.expected\.cosine\.value: expected a finite number, got '0\.5'"),
    ({**KNOWN, "expected": {"cosine": {"value": 0.5, "margin": 1.5}}},
     KF + r"\.expected\.cosine: value 0\.5 - margin 1\.5 = -1, a floor no cosine can fall below \(-1\), so the entry "
     r"would absorb it at any depth"),
    ({**KNOWN, "expected": {"cosine": {"value": -1.5, "margin": 0}}},
     KF + r"\.expected\.cosine: value -1\.5 - margin 0 = -1\.5, a floor no cosine can fall below"),
])
def test_broken_known_failure_is_a_clear_error(entry, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(_with(known_failures={"onnxruntime-fp32": entry}))


def test_a_known_failure_holds_each_data_set_to_its_own_depth():
    """``expected_on``: the same failure at another depth on one data set (efficientnet_lite0's int8, 64 % on photos,
    37.5 % on sparse inputs); every other data set is held to ``expected``."""
    entry = KnownFailure("r", "top-1", ("parity",), ("logits",), ("top1_agreement_pct",),
                         expected=(("top1_agreement_pct", 64.0, 7.0),),
                         expected_on=(("generated:sparse", (("top1_agreement_pct", 37.5, 12.5),)),
                                      ("generated:normal", (("top1_agreement_pct", 50.0, 5.0),))))
    assert entry.expected_for("generated:normal") == (("top1_agreement_pct", 50.0, 5.0),)
    assert entry.expected_for("generated:uniform") == entry.expected_for(None) == (("top1_agreement_pct", 64.0, 7.0),)
    bounds = [entry.bound("top1_agreement_pct", d) for d in (None, "generated:uniform", "generated:sparse")]
    assert bounds == [57, 57, 25]
    assert entry.beyond((("logits", "top1_agreement_pct", 30.0),), "generated:sparse") is None
    assert entry.beyond((("logits", "top1_agreement_pct", 20.0),), "generated:sparse") == (
        "it has top1_agreement_pct of output 'logits' at 20, beyond the declared 37.5 on generated:sparse - 12.5 "
        "(the entry's floor 25): it failed further than the known failure")
    for dataset in (None, "generated:uniform"):
        assert entry.beyond((("logits", "top1_agreement_pct", 30.0),), dataset) == (
            "it has top1_agreement_pct of output 'logits' at 30, beyond the declared 64 - 7 (the entry's floor 57): it "
            "failed further than the known failure")
    assert "on generated:sparse: top1_agreement_pct 37.5 +- 12.5" in entry.describe()


def test_a_known_failure_never_absorbs_nan_inf_or_a_wrong_output_shape_or_dtype():
    """Whatever its pattern matches: these say the engine or model is broken, not that a figure moved."""
    entry = KnownFailure("r", "onnxruntime-fp32 on", ("accuracy", "parity"), ("out",), ("cosine", "top1"))
    figure = "m-onnxruntime-fp32 on d[:64]: output 'out' (64, 5): cosine 0.51 < 0.98 required"
    accuracy = ("m-onnxruntime-fp32 on d: accuracy over n=64: top-1 60.00% < 70.00% required\n  rows with NaN/Inf "
                "(counted wrong): engine 0, reference 0")
    assert entry.covers("parity", figure) and entry.covers("accuracy", accuracy, (("out", "top1"),))
    for message in ("m-onnxruntime-fp32 on d[:64]: output 'out' (64, 5): engine output has 60 NaN/Inf values",
                    "m-onnxruntime-fp32 on d[:64]: output 'out' (64, 5): reference has 2 NaN/Inf values",
                    "m-onnxruntime-fp32 on d: accuracy over n=64: engine logits have 3 rows with NaN/Inf (counted "
                    "wrong)",
                    "engines.feeds.OutputShapeError: m-onnxruntime-fp32 on d: output 'out' has shape (2, 5)",
                    "engines.feeds.OutputDtypeError: m-onnxruntime-fp32 on d: output 'out' is float16"):
        assert not entry.covers("parity", message), message
        assert "no known failure may absorb" in entry.refusal("parity", message), message
    assert entry.refusal("parity", "cosine 0.5", (("out", "cosine"),)) == "it does not match /onnxruntime-fp32 on/"


def test_known_failure_must_name_a_cell_the_model_runs():
    with pytest.raises(ConfigError, match=rf"{M}\.known_failures\.onnxrt-int8 \(engine\): unknown 'onnxrt'"):
        parse_config(_with(known_failures={"onnxrt-int8": KNOWN}))
    with pytest.raises(ConfigError, match=r"the model does not run onnxruntime-int8 \(engines \['torch', "
                                          r"'onnxruntime'\], precisions \['fp32'\]\); the entry would never apply"):
        parse_config(_with(known_failures={"onnxruntime-int8": KNOWN}))


# The shipped entry's failure, as the parity tests reported it (onnxruntime 1.32.0, 2026-11-23).
_SHIPPED_FAILURES = [
    "AssertionError: efficientnet_lite0-onnxruntime-int8 on fixtures.data.photos:imagenet_eval[:32]: output "
    "'logits' (32, 1000): top-1 agreement 65.62% < 90.00% required",
    "AssertionError: efficientnet_lite0-onnxruntime-int8 on sparse inputs (batch 1, seed 282): output 'logits' "
    "(1, 1000): top-1 agreement 0.00% < 90.00% required",
]


def _parity_message(engine_logits: np.ndarray, reference: np.ndarray) -> str:
    config = load_config(ROOT / "suite.toml")
    tolerance = config.models["efficientnet_lite0"].tolerance("int8")
    report = compare_outputs({"logits": reference}, {"logits": engine_logits}, tolerance)["logits"]
    return f"efficientnet_lite0-onnxruntime-int8 on photos[:32]: {report.explain()}"


def test_shipped_known_failure_matches_only_its_own_failure():
    entry = load_config(ROOT / "suite.toml").models["efficientnet_lite0"].known_failures["onnxruntime-int8"]
    assert entry.checks == ("parity",)
    for message in _SHIPPED_FAILURES:
        assert entry.covers("parity", message), message
    rng = np.random.default_rng(0)
    reference = rng.normal(0, 3, (32, 1000))
    shuffled = reference + rng.normal(0, 0.35, reference.shape)  # cosine ~0.99, top-1 agreement well below 90%
    assert entry.covers("parity", _parity_message(shuffled, reference))
    nan = shuffled.copy()
    nan[3, :5] = np.nan
    collapsed = reference + rng.normal(0, 6, reference.shape)  # cosine ~0.45
    for other in (_parity_message(nan, reference), _parity_message(collapsed, reference),
                  "EngineBuildError: int8 calibration of 'efficientnet_lite0' (minmax, 256 rows) failed: "
                  "RuntimeError: top-1 agreement 0.00% < 90.00% required"):
        assert not entry.covers("parity", other), other


# =========================================================================== min_top5


def test_min_top5_is_enforced_with_its_figure():
    model = parse_config(_with(accuracy_dataset=DATA, min_top5=0.9, min_top1=0.1)).models["m"]
    threshold = model.accuracy_threshold("fp32")
    assert threshold.min_top5 == 0.9 and threshold.min_top1 == 0.1
    labels = np.arange(10) % 10
    logits = np.zeros((10, 10))
    logits[np.arange(10), labels] = 1.0  # every label ranked first
    logits[:2, labels[:2]] = -1.0  # two labels ranked last: top-5 80%
    verdict = judge_accuracy(logits, labels, logits, threshold)
    assert not verdict.passed and "top-5 80.00% < 90.00% required" in verdict.explain()
    assert "min top-5 90.00%" in verdict.explain()
    assert judge_accuracy(logits, labels, logits, model.accuracy_threshold("int8")).failures == (
        "top-5 80.00% < 90.00% required",)
    passing = parse_config(_with(accuracy_dataset=DATA, min_top5=0.8)).models["m"].accuracy_threshold("fp32")
    assert judge_accuracy(logits, labels, logits, passing).passed


# =========================================================================== command-line options


def _two_models():
    raw = _with(batch_sizes=[1, 32])
    raw["models"]["big"] = {**copy.deepcopy(MINIMAL["models"]["m"]), "batch_sizes": [64, 256]}
    return parse_config(raw).models


def test_latency_batch_sizes_option():
    models = _two_models()
    assert parse_batch_sizes_option("1, 8,1", models) == (1, 8)
    assert parse_batch_sizes_option("128", models.values()) == (128,)
    with pytest.raises(ConfigError, match=r"^--latency-batch-sizes: batch size 999 is outside the batch_sizes range "
                                          r"of every selected model \(m 1\.\.32, big 64\.\.256\), so no latency "
                                          r"case would run$"):
        parse_batch_sizes_option("1,999", models)
    with pytest.raises(ConfigError, match=r"batch size 48 is outside .*\(m 1\.\.32\)"):
        parse_batch_sizes_option("48", {"m": models["m"]})
    for text, match in (("x", r"'x' is not an integer batch size"), ("0", r"batch size 0 must be >= 1"),
                        ("1.5", r"'1.5' is not an integer"), (" , ", r"give at least one batch size")):
        with pytest.raises(ConfigError, match=rf"^--latency-batch-sizes: {match}"):
            parse_batch_sizes_option(text, models)


def test_latency_rounds_option():
    assert check_rounds_option(2) == 2 and check_rounds_option("30") == 30 and check_rounds_option(10_000) == 10_000
    for value, match in ((0, r"0 rounds; a latency case needs at least 2"), (1, r"1 rounds"),
                         ("1000000000", r"1000000000 rounds; at most 10000 timed rounds per case$"),
                         (10_001, r"10001 rounds; at most 10000"),
                         (True, r"expected an integer >= 2, got True"), ("many", r"'many' is not an integer"),
                         (2.5, r"expected an integer >= 2, got 2\.5")):
        with pytest.raises(ConfigError, match=rf"^--latency-rounds: {match}"):
            check_rounds_option(value)


# =========================================================================== the rest


def test_generated_distributions_per_precision():
    m = parse_config(_with(precision={"fp16": {"generated": ["uniform"]}})).models["m"]
    assert m.generated["fp16"] == ("uniform",)
    assert "extremes" not in m.generated["int8"] and "extremes" in m.generated["fp32"]
    with pytest.raises(ConfigError, match=r"generated\[0\]: unknown 'gaussian'"):
        parse_config(_with(precision={"fp16": {"generated": ["gaussian"]}}))


def test_defaults_are_blamed_where_they_are_written():
    raw = _top(defaults={"batch_sizes": [1, 8], "opt_batch": 8, "precisions": ["fp32", "fp16"]})
    m = parse_config(raw).models["m"]
    assert m.profile.as_dict() == {"min": 1, "opt": 8, "max": 8} and m.precisions == ("fp32", "fp16")
    raw["models"]["m"]["batch_sizes"] = [16, 32]
    with pytest.raises(ConfigError, match=r"^\[defaults\]\.opt_batch \(used by \[models\.m\]\): opt_batch 8"):
        parse_config(raw)


def test_readme_documents_every_key():
    """The Configuration reference names every key the parser accepts (and the removed one)."""
    from suite.config import excuses, model, overrides, parse, shapes, validate

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Configuration reference"):readme.index("## The engine cache")]
    keys = (parse._TOP_KEYS | parse._DEFAULT_KEYS | model._MODEL_KEYS | shapes._INPUT_KEYS | overrides._PARITY_KEYS
            | overrides._ACCURACY_KEYS | overrides._INT8_KEYS | parse._LATENCY_KEYS | parse._RUN_KEYS
            | excuses._KNOWN_FAILURE_KEYS | model._EXPORT_KEYS | set(validate._REMOVED_KEYS)
            | {k for keys in overrides._ENGINE_OPTION_KEYS.values() for k in keys})
    missing = sorted(k for k in keys if not re.search(rf"`[^`\n]*\b{k}\b[^`\n]*`", section))
    assert not missing, f"README 'Configuration reference' does not document {missing}"
