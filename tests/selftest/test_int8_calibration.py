"""int8 calibration with any number of rows and every documented method (suite.toml's [int8]).

Why: ONNX Runtime's entropy and percentile calibrators stack all chunks' activations into one array, so
a short last chunk (179 digits rows = 11 x 16 + 3) crashed them with "inhomogeneous shape"; dropping the
remainder instead would calibrate on other rows than the cache key names.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from core.cache import ArtifactCache
from core.inputs import InputSpec, synthetic_feed
from engines import get_backend
from engines.artifacts import ModelBuild
from engines.base import EngineRequest, ShapeProfile
from engines.onnx import quantize
from engines.onnx.quantize import CALIBRATION_BATCH, _Reader, calibration_chunk, quantize_qdq
from suite.config import CALIBRATION_METHODS
from tests.selftest.tiny_models import Data, two_input_net

pytestmark = pytest.mark.selftest

INPUTS = (InputSpec("image", (1, 8, 8)), InputSpec("extra", (3,), low=-1.0, high=1.0))
AWKWARD_ROWS = (1, 17, 179)  # one row; one past a chunk; the digits set that crashed (prime)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("cache"))


def _build(cache, rows, method):
    return ModelBuild("tiny", two_input_net, INPUTS, ("out",), cache, calibration=lambda: Data(rows),
                      int8_options={"method": method, "samples": rows, "per_channel": True, "percentile": 99.99})


def _scales(path):
    model = onnx.load(str(path))
    return {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer if i.name.endswith("_scale")}


@pytest.mark.parametrize("rows,chunk", [(1, 1), (16, 16), (17, 1), (32, 16), (179, 1), (180, 15), (256, 16),
                                        (10, 10)])
def test_chunks_divide_the_rows_and_are_as_large_as_allowed(rows, chunk):
    assert calibration_chunk(rows) == chunk
    assert rows % chunk == 0 and chunk <= CALIBRATION_BATCH


def test_no_rows_no_calibration():
    with pytest.raises(ValueError, match="at least one row, got 0"):
        calibration_chunk(0)


@pytest.mark.parametrize("rows", AWKWARD_ROWS)
def test_reader_yields_every_row_once_in_equal_chunks_of_the_graphs_dtypes(rows):
    data = Data(rows)
    feeds = {**data.feeds, "image": data.feeds["image"].astype(np.float64)}  # float64 rows: cast, not refused
    reader = _Reader(feeds, {"image": np.dtype(np.float32), "extra": np.dtype(np.float32)}, "'tiny'")
    chunks = list(iter(reader.get_next, None))
    assert len({len(c["image"]) for c in chunks}) == 1, "every chunk the same size"
    for name in ("image", "extra"):
        joined = np.concatenate([c[name] for c in chunks])
        assert joined.dtype == np.float32
        np.testing.assert_array_equal(joined, data.feeds[name].astype(np.float32))


def test_reader_refuses_a_float_feed_for_an_integer_input():
    feeds = {"ids": np.zeros((4, 6), np.float32)}
    with pytest.raises(TypeError, match=r"input 'ids' is float32 .* the engine's input is int64"):
        _Reader(feeds, {"ids": np.dtype(np.int64)}, "'tokens'")


@pytest.mark.parametrize("method", CALIBRATION_METHODS)
@pytest.mark.parametrize("rows", AWKWARD_ROWS)
def test_every_method_calibrates_any_row_count_and_runs(cache, method, rows):
    build = _build(cache, rows, method)
    feed = synthetic_feed(INPUTS, 4, "uniform", seed=rows)
    request = EngineRequest("tiny", "onnxruntime", "int8", "cpu", INPUTS, ("out",), ShapeProfile(1, 4, 8))
    out = get_backend("onnxruntime").load(request, build, cache).runner.infer(feed)["out"]
    ref = get_backend("torch").load(EngineRequest("tiny", "torch", "fp32", "cpu", INPUTS, ("out",),
                                                  ShapeProfile(1, 4, 8)), build, cache).runner.infer(feed)["out"]
    scales = _scales(build.onnx_path("int8"))
    assert {"image_scale", "extra_scale"} <= set(scales), f"inputs not quantized: {sorted(scales)}"
    assert out.shape == ref.shape and np.isfinite(out).all()
    assert np.abs(out - ref).max() < 0.2, f"{method}, {rows} rows: int8 far from fp32"


def test_the_last_row_is_calibrated_on(cache, tmp_path):
    """17 rows, the 17th an outlier: minmax's input range must reach it (a dropped short chunk would not)."""
    data = Data(17)
    feeds = {k: v.copy() for k, v in data.feeds.items()}
    feeds["extra"][-1] = 50.0
    source = _build(cache, 17, "minmax").onnx_path("fp32")
    quantize_qdq(source, tmp_path / "int8.onnx", feeds, {"method": "minmax", "per_channel": True}, "tiny")
    scale = float(_scales(tmp_path / "int8.onnx")["extra_scale"])
    assert scale == pytest.approx(50.0 / 127, rel=1e-3), f"extra's scale {scale} does not cover the last row"


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_chunk_size_does_not_change_the_calibration(cache, tmp_path, monkeypatch, caplog, method):
    """Why equal chunks of any size are sound: the histogram methods build one histogram of every value
    seen, so 2 chunks of 16 rows and 32 chunks of 1 row calibrate identically."""
    data = Data(32)
    source = _build(cache, 32, method).onnx_path("fp32")
    options = {"method": method, "per_channel": True, "percentile": 99.99}
    caplog.set_level("INFO", logger=quantize.__name__)
    quantize_qdq(source, tmp_path / "by16.onnx", data.feeds, options, "tiny")
    monkeypatch.setattr(quantize, "calibration_chunk", lambda rows: 1)
    quantize_qdq(source, tmp_path / "by1.onnx", data.feeds, options, "tiny")
    assert "32 rows in 2 chunks of 16" in caplog.text and "32 rows in 32 chunks of 1" in caplog.text
    by16, by1 = _scales(tmp_path / "by16.onnx"), _scales(tmp_path / "by1.onnx")
    assert by16.keys() == by1.keys()
    for name in by16:
        np.testing.assert_array_equal(by1[name], by16[name], err_msg=name)
