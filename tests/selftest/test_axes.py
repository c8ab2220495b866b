"""Named dynamic axes (a sequence length) from the config to the engines: the keys are checked like every other
key, synthetic feeds make concrete shapes and valid masks, the profile gives every input its min/opt/max, and
TensorRT's feed check knows each axis's range."""

import copy
import re

import numpy as np
import pytest

from core.inputs import DISTRIBUTIONS, AxisRange, InputSpec, synthetic_feed, tile_to_batch
from engines.base import ShapeProfile
from engines.trt.settings import TensorSpec, check_feed_shapes
from suite.config import ConfigError, LatencyShape, parse_config

pytestmark = pytest.mark.selftest

M = r"\[models\.t\]"
SEQ = (("seq", AxisRange(16, 128, 256)),)
TOKENS = (InputSpec("input_ids", ("seq",), "int64", 0, 30521, SEQ),
          InputSpec("attention_mask", ("seq",), "int64", 0, 1, SEQ, "attention_mask"))
BASE = {"models": {"t": {
    "factory": "fixtures.models.minilm:minilm_l6", "outputs": ["sentence_embedding"],
    "inputs": [{"name": "input_ids", "shape": ["seq"], "dtype": "int64", "low": 0, "high": 30521},
               {"name": "attention_mask", "shape": ["seq"], "dtype": "int64", "low": 0, "high": 1,
                "role": "attention_mask"}],
    "axes": {"seq": {"min": 16, "opt": 128, "max": 256}},
    "batch_sizes": [1, 8, 32],
}}}


def _with(**changes):
    raw = copy.deepcopy(BASE)
    raw["models"]["t"].update(changes)
    return raw


def _mask(**changes):
    raw = copy.deepcopy(BASE)
    raw["models"]["t"]["inputs"][1].update(changes)
    return raw


def test_axes_and_latency_shapes_parse():
    m = parse_config(_with(latency_shapes=[{"batch": 1, "seq": 128}, {"batch": 32, "seq": 128},
                                           {"batch": 8, "seq": 256}])).models["t"]
    assert m.inputs == TOKENS and m.attention_mask == TOKENS[1]
    assert m.profile == ShapeProfile(1, 32, 32, SEQ)
    assert m.profile.as_dict() == {"min": 1, "opt": 32, "max": 32, "axes": {"seq": {"min": 16, "opt": 128, "max": 256}}}
    assert [s.id for s in m.latency_shapes] == ["bs1-seq128", "bs32-seq128", "bs8-seq256"]
    assert m.latency_shapes[2].dims_dict() == {"seq": 256} and m.latency_batch_sizes == (1, 32, 8)


def test_latency_shapes_default_to_each_batch_at_the_axes_opt():
    m = parse_config(_with(latency_batch_sizes=[1, 8])).models["t"]
    assert m.latency_shapes == (LatencyShape(1, (("seq", 128),)), LatencyShape(8, (("seq", 128),)))
    plain = parse_config({"models": {"p": {"factory": "a:b", "outputs": ["y"],
                                           "inputs": [{"name": "x", "shape": [3]}]}}}).models["p"]
    assert [s.id for s in plain.latency_shapes] == ["bs1", "bs8", "bs32"]  # batch-only models keep their ids
    assert plain.profile.as_dict() == {"min": 1, "opt": 32, "max": 32} and plain.inputs[0].as_key() == {
        "name": "x", "shape": [3], "dtype": "float32", "low": 0.0, "high": 1.0}  # cache keys as they were


def test_opt_defaults_to_max():
    m = parse_config(_with(axes={"seq": {"min": 16, "max": 64}})).models["t"]
    assert m.inputs[0].axis("seq") == AxisRange(16, 64, 64)


BROKEN = [
    (_with(axes={"seq": {"min": 16, "opt": 300, "max": 256}}), rf"^{M}\.axes\.seq: min 16, opt 300, max 256; "),
    (_with(axes={"seq": {"min": 0, "max": 256}}),
     rf"^{M}\.axes\.seq\.min: expected a length \(an integer\) >= 1, got 0"),
    (_with(axes={"seq": {"max": 256}}), rf"^{M}\.axes\.seq: missing required key 'min'"),
    (_with(axes={"seq": {"min": 16, "max": 256, "step": 8}}), rf"^{M}\.axes\.seq: unknown key\(s\) step"),
    (_with(axes={"seq": {"min": 16.0, "max": 256}}), rf"^{M}\.axes\.seq\.min: expected a length"),
    (_with(axes={"batch": {"min": 1, "max": 8}}), rf"^{M}\.axes\.batch: 'batch' is not an axis name"),
    (_with(axes={"seq": {"min": 16, "max": 256}, "heads": {"min": 1, "max": 2}}),
     rf"^{M}\.axes: \['heads'\] named by no input's shape"),
    (_with(axes={}), rf"^{M}\.inputs\[0\]\.shape\[0\]: axis 'seq' is not declared in {M}\.axes \(declared: none\)"),
    (_with(latency_shapes=[{"batch": 64, "seq": 128}]), rf"^{M}\.latency_shapes\[0\]\.batch: 64 is outside"),
    (_with(latency_shapes=[{"batch": 1, "seq": 512}]),
     rf"^{M}\.latency_shapes\[0\]\.seq: 512 is outside axis 'seq''s range 16\.\.256"),
    (_with(latency_shapes=[{"batch": 1}]), rf"^{M}\.latency_shapes\[0\]: missing seq"),
    (_with(latency_shapes=[{"batch": 1, "seq": 128, "len": 3}]), rf"^{M}\.latency_shapes\[0\]: unknown key\(s\) len"),
    (_with(latency_shapes=[[1, 128]]),
     rf"^{M}\.latency_shapes\[0\]: expected a table like \{{ batch = 1, seq = 128 \}}"),
    (_with(latency_shapes=[{"batch": 1, "seq": 128}] * 2), rf"^{M}\.latency_shapes: \['bs1-seq128'\] listed more"),
    (_with(latency_shapes=[{"batch": 1, "seq": 128}], latency_batch_sizes=[1]), rf"^{M}: set latency_shapes or"),
    (_mask(role="mask"), rf"^{M}\.inputs\[1\]\.role: unknown 'mask'; valid: values, attention_mask"),
    (_mask(high=2), rf"^{M}\.inputs\[1\]: role attention_mask needs an integer dtype and low = 0, high = 1"),
    (_mask(dtype="float32"), rf"^{M}\.inputs\[1\]: role attention_mask needs an integer dtype"),
    (_mask(shape=[8]), rf"^{M}\.inputs\[1\]\.shape: role attention_mask needs its last axis named"),
    ({**copy.deepcopy(BASE), "engine_options": {"onnxruntime": {"transformer_fusion": "gpt2"}}},
     r"^\[engine_options\.onnxruntime\]\.transformer_fusion: unknown 'gpt2'; valid: bert"),
    (_with(precision={"fp16": {"parity": {"min_row_cosine": 1.5}}}),
     rf"^{M}\.precision\.fp16\.parity\.min_row_cosine: min_row_cosine must be in \[-1, 1\]"),
    (_with(precision={"fp16": {"parity": {"min_retrieval_agreement_pct": 101}}}),
     rf"^{M}\.precision\.fp16\.parity\.min_retrieval_agreement_pct: .* must be in \[0, 100\]"),
]


@pytest.mark.parametrize("raw,match", BROKEN, ids=[re.sub(r"\W+", "_", m[6:40]) for _, m in BROKEN])
def test_broken_axis_keys_are_clear_errors(raw, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(raw)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("batch", [1, 2, 32])
def test_synthetic_tokens_are_valid_ids_and_masks_are_ones_then_zeros(distribution, batch):
    feed = synthetic_feed(TOKENS, batch, distribution, seed=batch)
    ids, mask = feed["input_ids"], feed["attention_mask"]
    assert ids.shape == mask.shape == (batch, 128) and ids.dtype == mask.dtype == np.int64
    assert ids.min() >= 0 and ids.max() <= 30521
    lengths = mask.sum(axis=1)
    assert lengths.min() >= 1  # never an all-zero row
    assert np.array_equal(mask, (np.arange(128) < lengths[:, None]).astype(np.int64))
    if batch >= 2:  # padded and full rows in the same batch
        assert lengths.min() < 128 and lengths.max() == 128


def test_dims_choose_lengths_and_are_checked():
    assert synthetic_feed(TOKENS, 2, dims={"seq": 16})["input_ids"].shape == (2, 16)
    # no dims: each axis at its opt, so a caller that knows only the batch (harness overhead) still works
    assert synthetic_feed(TOKENS, 4, "uniform", seed=4)["attention_mask"].shape == (4, 128)
    with pytest.raises(ValueError, match=r"seq=300: outside axis 'seq''s range 16\.\.256"):
        synthetic_feed(TOKENS, 2, dims={"seq": 300})
    with pytest.raises(ValueError, match=r"\['len'\] name no axis of the inputs \(axes: \['seq'\]\)"):
        synthetic_feed(TOKENS, 2, dims={"len": 16})


def test_batch_only_feeds_are_unchanged():
    """Models without named axes draw exactly what they drew before (their generated-input baselines hold)."""
    spec = (InputSpec("x", (3, 4), low=-1.0, high=1.0), InputSpec("ids", (5,), "int64", 0, 9))
    rng = np.random.default_rng(7)
    expected_x = rng.uniform(-1.0, 1.0, size=(2, 3, 4)).astype(np.float32)
    feed = synthetic_feed(spec, 2, "uniform", seed=7)
    np.testing.assert_array_equal(feed["x"], expected_x)


def test_tile_to_batch_cuts_and_pads_named_axes():
    ids = np.array([[101, 7, 8, 102, 0, 0], [101, 9, 102, 0, 0, 0]])
    mask = (ids > 0).astype(np.int64)
    short = TOKENS
    out = tile_to_batch({"input_ids": ids, "attention_mask": mask}, 3, short, {"seq": 16})
    assert out["input_ids"].shape == (3, 16) and out["attention_mask"][:, 6:].sum() == 0
    np.testing.assert_array_equal(out["input_ids"][2, :6], ids[0])
    long = {"input_ids": np.tile(ids, (1, 4)), "attention_mask": np.ones((2, 24), np.int64)}
    cut = tile_to_batch(long, 2, short, {"seq": 16})
    assert cut["attention_mask"].shape == (2, 16) and cut["attention_mask"].all()


def test_profile_shapes_cover_batch_and_sequence():
    assert ShapeProfile(1, 32, 64, SEQ).shapes(TOKENS[0]) == ((1, 16), (32, 128), (64, 256))
    assert TOKENS[0].batch_shape(8, {"seq": 40}) == (8, 40) and TOKENS[0].batch_shape(8) == (8, 128)
    with pytest.raises(ValueError, match=r"names axes \['seq'\] without a range"):
        InputSpec("ids", ("seq",), "int64", 0, 9)


def test_tensorrt_feed_check_knows_the_sequence_range():
    specs = [TensorSpec("input_ids", (-1, -1), np.dtype(np.int64), (1, 16), (64, 256)),
             TensorSpec("attention_mask", (-1, -1), np.dtype(np.int64), (1, 16), (64, 256))]
    ok = {n: np.ones((4, 128), np.int64) for n in ("input_ids", "attention_mask")}
    check_feed_shapes(ok, specs, 1, 64)
    long = {n: np.ones((4, 300), np.int64) for n in ("input_ids", "attention_mask")}
    with pytest.raises(ValueError, match=r"input_ids: axis 1 is 300, outside the engine's optimization profile "
                                         r"\[16, 256\]"):
        check_feed_shapes(long, specs, 1, 64)


_ODD = [None, True, 0, -1, 1.5, float("nan"), "", "x", [], [0], ["x"], [[1]], {}, {"x": 1}, {"min": "a"},
        [{"batch": 1}], [{"batch": 1, "seq": None}]]


@pytest.mark.parametrize("path", [("axes",), ("axes", "seq"), ("axes", "seq", "opt"), ("latency_shapes",),
                                  ("inputs", 1, "role"), ("inputs", 0, "shape", 0)], ids=str)
def test_any_value_at_an_axis_key_is_parsed_or_a_config_error_never_a_traceback(path):
    for value in _ODD:
        raw = copy.deepcopy(BASE)
        node = raw["models"]["t"]
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        try:
            parse_config(raw)
        except ConfigError as exc:
            assert str(path[-1]) in str(exc) or str(path[-2]) in str(exc) or "axes" in str(exc), (path, value, exc)
