"""The TensorRT backend's pure-Python half (build plans, cache keys, skip reasons, feed checks, messages),
and one real build-and-run test that only runs where tensorrt and a CUDA GPU are present."""

from __future__ import annotations

import json
import logging
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core.cache import ArtifactCache
from core.hashing import digest
from core.inputs import InputSpec
from engines.base import PRECISIONS, EngineRequest, ShapeProfile
from engines.cuda import runtime as cuda_rt
from engines.trt import backend as trt_backend
from engines.trt import network as trt_network
from engines.trt.settings import (
    BuildPlan,
    ParserErrorInfo,
    TensorSpec,
    check_feed_shapes,
    cuda_device_index,
    engine_cache_parts,
    format_parser_errors,
    layer_summary,
    logging_level,
    parse_version,
    plan_build,
    precision_skip_reason,
    timing_cache_filename,
)
from suite import verdict

pytestmark = pytest.mark.selftest

# --- build plans ------------------------------------------------------------------------------------------

WEAK = {  # TensorRT 10.0 - 10.11: fp32 file + precision flags; QDQ file + INT8/FP16 for int8
    "fp32": BuildPlan("fp32", False, (), ("TF32",)),
    "tf32": BuildPlan("fp32", False, ("TF32",), ()),
    "fp16": BuildPlan("fp32", False, ("FP16",), ()),
    "bf16": BuildPlan("fp32", False, ("BF16",), ()),
    "int8": BuildPlan("int8", False, ("INT8", "FP16"), ()),
}
STRONG = {  # TensorRT >= 10.12 and 11.x: the converted file, strongly typed, no precision flags
    "fp32": BuildPlan("fp32", True, (), ("TF32",)),
    "tf32": BuildPlan("fp32", True, ("TF32",), ()),
    "fp16": BuildPlan("fp16", True, (), ()),
    "bf16": BuildPlan("bf16", True, (), ()),
    "int8": BuildPlan("int8", True, (), ()),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("version,expected", [
    ("10.0.1.6", WEAK), ("10.11.0.33", WEAK), ("10.12.0.36", STRONG), ("10.13.0.35", STRONG),
    ("11.0.0.114", STRONG), ("11.4.1", STRONG),
])
def test_plan_build_for_every_version_and_precision(version, expected, precision):
    assert plan_build(version, precision) == expected[precision]


def test_plans_never_use_removed_precision_flags_on_11():
    removed = {"FP16", "BF16", "INT8", "FP8", "INT4", "FP4", "OBEY_PRECISION_CONSTRAINTS"}
    for precision in PRECISIONS:
        plan = plan_build("11.0", precision)
        assert plan.strongly_typed and not removed & set(plan.flags)


def test_fp32_clears_tf32_and_tf32_sets_it_on_every_version():
    for version in ("10.0", "10.12", "11.0"):
        assert "TF32" in plan_build(version, "fp32").clear_flags and "TF32" not in plan_build(version, "fp32").flags
        assert "TF32" in plan_build(version, "tf32").flags


@pytest.mark.parametrize("version,precision", [("8.6.1", "fp32"), ("10.13", "fp8"), ("10.13", "int4")])
def test_plan_build_rejects_old_tensorrt_and_unknown_precisions(version, precision):
    with pytest.raises(ValueError):
        plan_build(version, precision)


@pytest.mark.parametrize("text,expected", [
    ("10.12.0.36", (10, 12, 0, 36)), ("11.0", (11, 0)), ("10.13.0.35.post1", (10, 13, 0, 35)), ("10", (10, 0)),
    ("10.8.0.43+cuda12.8", (10, 8, 0, 43)),
])
def test_parse_version(text, expected):
    assert parse_version(text) == expected


# --- cache keys -------------------------------------------------------------------------------------------

REQUEST = EngineRequest(
    model="tiny", engine="tensorrt", precision="fp16", device="cuda:0",
    inputs=(InputSpec("x", (3, 32, 32)),), outputs=("logits",), profile=ShapeProfile(1, 8, 32),
    options={"workspace_mb": 1024},
)
KEY_ARGS = {"onnx_key": "onnx-abc", "plan": plan_build("10.13.0.35", "fp16"), "trt_version": "10.13.0.35",
            "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
            "cuda_versions": {"driver": "12.8", "runtime": "12.9", "cuda_python": "12.9.0"}}


def _key(request=REQUEST, **changes):
    return digest({"kind": "tensorrt-engine", **engine_cache_parts(request, **{**KEY_ARGS, **changes})})


def test_equal_inputs_give_equal_keys():
    assert _key() == _key()
    assert _key(cuda_versions=dict(reversed(list(KEY_ARGS["cuda_versions"].items())))) == _key()
    json.dumps(engine_cache_parts(REQUEST, **KEY_ARGS))  # every part is JSON, as the cache requires


@pytest.mark.parametrize("change", [
    {"trt_version": "10.14.1.48"},
    {"trt_version": "11.0.0.114", "plan": plan_build("11.0.0.114", "fp16")},
    {"compute_capability": "8.9"},
    {"gpu_name": "NVIDIA H200"},
    {"onnx_key": "onnx-abd"},
    {"plan": plan_build("10.11", "fp16")},
    {"cuda_versions": {"driver": "13.0", "runtime": "12.9", "cuda_python": "12.9.0"}},
    {"cuda_versions": {"driver": "12.8", "runtime": "12.9", "cuda_python": "13.0.0"}},
], ids=lambda c: ",".join(c))
def test_every_keyed_build_input_changes_the_key(change):
    assert _key(**change) != _key()


@pytest.mark.parametrize("request_change", [
    {"precision": "bf16"},
    {"profile": ShapeProfile(1, 16, 32)},
    {"profile": ShapeProfile(1, 8, 64)},
    {"options": {"workspace_mb": 2048}},
    {"options": {"workspace_mb": 1024, "builder_optimization_level": 5}},
    {"inputs": (InputSpec("x", (3, 64, 64)),)},
    {"outputs": ("probs",)},
    {"model": "other"},
], ids=lambda c: ",".join(c))
def test_every_keyed_request_field_changes_the_key(request_change):
    assert _key(replace(REQUEST, **request_change)) != _key()


def test_device_index_is_not_keyed_but_the_gpu_is():
    """Two identical GPUs share engines; the GPU's name and compute capability are keyed instead."""
    assert _key(replace(REQUEST, device="cuda:1")) == _key()


def test_timing_cache_file_per_version_capability_and_gpu():
    base = timing_cache_filename("10.13.0.35", "9.0", "NVIDIA H100 80GB HBM3")
    assert base == timing_cache_filename("10.13.0.35", "9.0", "NVIDIA H100 80GB HBM3")
    others = {timing_cache_filename("10.14.1.48", "9.0", "NVIDIA H100 80GB HBM3"),
              timing_cache_filename("10.13.0.35", "8.9", "NVIDIA H100 80GB HBM3"),
              timing_cache_filename("10.13.0.35", "9.0", "NVIDIA H200")}
    assert base not in others and len(others) == 3
    assert "/" not in base and " " not in base


# --- skip reasons -----------------------------------------------------------------------------------------

def _fake_tensorrt(version="10.13.0.35"):
    """A stand-in module for the *import check only*: skip_reason never builds anything with it."""
    module = types.ModuleType("tensorrt")
    module.__version__ = version
    module.Builder = object
    return module


def test_skip_reason_when_tensorrt_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # makes `import tensorrt` raise ImportError
    reason = trt_backend.TensorRTBackend().skip_reason(REQUEST)
    assert reason is not None and reason.startswith("tensorrt is not installed")
    assert "pip install --extra-index-url https://pypi.nvidia.com tensorrt" in reason


def test_skip_reason_when_only_the_type_stubs_are_installed(monkeypatch):
    """tensorrt-stubs installs a tensorrt/ folder of .pyi files: `import tensorrt` then succeeds, empty."""
    monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
    reason = trt_backend.TensorRTBackend().skip_reason(REQUEST)
    assert reason is not None and reason.startswith("tensorrt is not installed") and "stubs" in reason


def test_skip_reason_for_old_tensorrt(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt("8.6.1"))
    assert "older than 10.0" in trt_backend.TensorRTBackend().skip_reason(REQUEST)


def test_skip_reason_on_cpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt())
    reason = trt_backend.TensorRTBackend().skip_reason(replace(REQUEST, device="cpu"))
    assert reason is not None and "needs a CUDA device" in reason and "--device cuda:0" in reason


def test_skip_reason_when_cuda_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt())
    monkeypatch.setattr(trt_backend, "cuda_available", lambda index: f"CUDA is unavailable: no device {index}")
    assert trt_backend.TensorRTBackend().skip_reason(REQUEST) == "CUDA is unavailable: no device 0"


@pytest.mark.parametrize("precision,capability,skipped", [
    ("bf16", (7, 5), True), ("bf16", (8, 0), False), ("tf32", (7, 5), True), ("tf32", (9, 0), False),
    ("int8", (6, 0), True), ("int8", (6, 1), False), ("fp16", (7, 5), False), ("fp32", (6, 0), False),
])
def test_skip_reason_for_precisions_the_gpu_lacks(monkeypatch, precision, capability, skipped):
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt())
    monkeypatch.setattr(trt_backend, "cuda_available", lambda index: None)
    monkeypatch.setattr(trt_backend, "device_properties", lambda index: {
        "name": "Some GPU", "compute_capability": f"{capability[0]}.{capability[1]}",
        "compute_capability_tuple": capability})
    reason = trt_backend.TensorRTBackend().skip_reason(replace(REQUEST, precision=precision))
    assert (reason is not None) == skipped
    if skipped:
        need = {"bf16": "8.0", "tf32": "8.0", "int8": "6.1"}[precision]
        assert f">= {need}" in reason and "Some GPU" in reason


def test_precision_skip_reason_rejects_out_of_scope_precisions():
    assert "not supported" in precision_skip_reason("fp8", (9, 0))


@pytest.mark.parametrize("device,index", [("cuda:0", 0), ("cuda:3", 3), ("cuda", 0), ("cpu", None), ("mps", None)])
def test_cuda_device_index(device, index):
    assert cuda_device_index(device) == index


# --- feed validation (the runner calls this before touching the GPU) ----------------------------------------

SPECS = (TensorSpec("x", (-1, 3, 8, 8), np.dtype(np.float32)), TensorSpec("mask", (-1, 8), np.dtype(np.int32)))


def _feed(batch=4, **overrides):
    feed = {"x": np.zeros((batch, 3, 8, 8), np.float32), "mask": np.zeros((batch, 8), np.int32)}
    feed.update(overrides)
    return feed


def test_valid_feed_passes():
    check_feed_shapes(_feed(), SPECS, 1, 32)
    check_feed_shapes(_feed(batch=1), SPECS, 1, 32)
    check_feed_shapes(_feed(batch=32), SPECS, 1, 32)


@pytest.mark.parametrize("feed,expected", [
    ({"x": np.zeros((4, 3, 8, 8), np.float32)}, ["missing ['mask']", "engine expects ['x', 'mask']"]),
    (_feed(extra=np.zeros(1)), ["unexpected ['extra']"]),
    (_feed(x=np.zeros((4, 3, 8, 8), np.float64)), ["x: dtype float64, engine expects float32"]),
    (_feed(x=np.zeros((4, 3, 8, 9), np.float32)), ["x: shape (4, 3, 8, 9), engine expects (batch, 3, 8, 8)"]),
    (_feed(x=np.zeros((4, 3, 8), np.float32)), ["engine expects rank 4"]),
    (_feed(batch=33), ["batch 33 is outside the engine's optimization profile [1, 32]"]),
    (_feed(mask=np.zeros((5, 8), np.int32)), ["disagree on batch size"]),
], ids=["missing", "unexpected", "dtype", "static-dim", "rank", "batch-range", "batch-mismatch"])
def test_bad_feeds_say_what_was_expected_and_what_came(feed, expected):
    with pytest.raises(ValueError) as info:
        check_feed_shapes(feed, SPECS, 1, 32)
    for text in expected:
        assert text in str(info.value)


# --- messages and facts -----------------------------------------------------------------------------------

class _FakeParserError:
    """Duck-typed like trt.ParserError, to test how errors are copied out and reported."""

    def __init__(self, code, node, name, op, desc):
        self._v = {"code": types.SimpleNamespace(name=code), "node": node, "node_name": name,
                   "node_operator": op, "desc": desc, "file": "ModelImporter.cpp", "line": 42, "func": "parseNode"}

    def __getattr__(self, item):
        if item in self._v:
            return lambda: self._v[item]
        raise AttributeError(item)


def test_parser_errors_are_reported_per_node():
    parser = types.SimpleNamespace(num_errors=2, get_error=lambda i: [
        _FakeParserError("UNSUPPORTED_NODE", 7, "/blocks/attn/Einsum", "Einsum", "unsupported equation"),
        _FakeParserError("INVALID_NODE", 12, "/head/Gemm", "Gemm", "bad transB"),
    ][i])
    errors = trt_network.parser_errors(parser)
    assert errors[0] == ParserErrorInfo("UNSUPPORTED_NODE", "unsupported equation", 7, "/blocks/attn/Einsum",
                                        "Einsum", "ModelImporter.cpp", 42, "parseNode")
    text = format_parser_errors("resnet-tensorrt-fp16", Path("/cache/onnx/model.onnx"), errors)
    assert "resnet-tensorrt-fp16" in text and "/cache/onnx/model.onnx" in text and "2 parser error(s)" in text
    assert "UNSUPPORTED_NODE at node 7 '/blocks/attn/Einsum' (op Einsum): unsupported equation" in text
    assert "INVALID_NODE at node 12 '/head/Gemm' (op Gemm): bad transB" in text


def test_parser_error_fields_missing_in_older_tensorrt_are_tolerated():
    old = types.SimpleNamespace(code=lambda: "INVALID_GRAPH", desc=lambda: "broken", node=lambda: -1)
    errors = trt_network.parser_errors(types.SimpleNamespace(num_errors=1, get_error=lambda i: old))
    assert "INVALID_GRAPH at no node: broken" in format_parser_errors("c", "m.onnx", errors)


def test_failed_parse_without_errors_still_explains():
    assert "valid ONNX model" in format_parser_errors("c", "m.onnx", [])


@pytest.mark.parametrize("name,level", [("INTERNAL_ERROR", logging.CRITICAL), ("ERROR", logging.ERROR),
                                        ("WARNING", logging.WARNING), ("INFO", logging.INFO),
                                        ("VERBOSE", logging.DEBUG)])
def test_tensorrt_severities_map_to_logging_levels(name, level):
    assert logging_level(name) == level


def test_layer_summary_from_engine_inspector_json():
    detailed = json.dumps({"Layers": [{"Name": "a", "LayerType": "CaskConvolution"},
                                      {"Name": "b", "LayerType": "CaskConvolution"},
                                      {"Name": "c", "LayerType": "Reformat"}], "Bindings": ["x", "y"]})
    assert layer_summary(detailed) == {"engine_layers": 3, "layer_types": {"CaskConvolution": 2, "Reformat": 1}}
    assert layer_summary(json.dumps({"Layers": ["a", "b"]})) == {"engine_layers": 2}  # LAYER_NAMES_ONLY
    assert layer_summary("not json") == {} and layer_summary("[]") == {}


def _tiny_onnx(path: Path, weight: np.ndarray, bias: np.ndarray) -> Path:
    """y = relu(x @ W + b) with a dynamic batch axis."""
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["pre"]),
         helper.make_node("Relu", ["pre"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", weight.shape[1]])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    save(model, str(path))
    return path


# --- the CUDA layer's error handling (no GPU needed) ---------------------------------------------------------

def test_check_returns_values_and_raises_named_errors():
    import enum

    class Status(enum.IntEnum):
        cudaSuccess = 0
        cudaErrorMemoryAllocation = 2

    assert cuda_rt.check((Status.cudaSuccess,)) is None
    assert cuda_rt.check((Status.cudaSuccess, 7)) == 7
    assert cuda_rt.check((Status.cudaSuccess, 1, 2)) == (1, 2)
    with pytest.raises(cuda_rt.CudaError) as info:
        cuda_rt.check((Status.cudaErrorMemoryAllocation, None), "cudaMalloc(1024)")
    assert info.value.name == "cudaErrorMemoryAllocation" and info.value.code == 2
    assert "cudaMalloc(1024) failed: cudaErrorMemoryAllocation (2)" in str(info.value)


def test_cuda_available_explains_a_driver_error(monkeypatch):
    def no_driver():
        raise cuda_rt.CudaError("cudaGetDeviceCount", 35, "cudaErrorInsufficientDriver", "driver too old")
    monkeypatch.setattr(cuda_rt, "device_count", no_driver)
    reason = cuda_rt.cuda_available()
    assert reason is not None and "CUDA is unavailable" in reason and "driver" in reason


def test_cuda_available_checks_the_device_index(monkeypatch):
    monkeypatch.setattr(cuda_rt, "device_count", lambda: 1)
    assert cuda_rt.cuda_available(0) is None
    assert "does not exist" in cuda_rt.cuda_available(1)


@pytest.mark.parametrize("encoded,text", [(12080, "12.8"), (13000, "13.0"), (11040, "11.4"), (0, "none")])
def test_format_cuda_version(encoded, text):
    assert cuda_rt.format_cuda_version(encoded) == text


# --- the real thing: only where tensorrt and a CUDA GPU are present -----------------------------------------

class _OnnxFile:
    """ModelArtifacts for one ONNX file that serves every precision (this test builds fp32 only)."""

    name = "tiny"

    def __init__(self, path: Path) -> None:
        self.path = path

    def torch_module(self):
        raise NotImplementedError

    def model_digest(self) -> str:
        return "tiny-matmul-add-relu"

    def onnx_path(self, precision: str) -> Path:
        return self.path

    def onnx_key(self, precision: str) -> str:
        from core.hashing import file_sha256

        return file_sha256(self.path)


def test_tensorrt_engine_builds_and_runs(tmp_path):
    try:
        import tensorrt as trt
    except ImportError:
        verdict.skip("unavailable", "tensorrt is not installed (GPU tier only)")
    if not hasattr(trt, "Builder"):
        verdict.skip("unavailable", "only tensorrt's type stubs are installed, not the library")
    if (reason := cuda_rt.cuda_available(0)) is not None:
        verdict.skip("unavailable", reason)

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    artifacts = _OnnxFile(_tiny_onnx(tmp_path / "tiny.onnx", weight, bias))
    request = EngineRequest(model="tiny", engine="tensorrt", precision="fp32", device="cuda:0",
                            inputs=(InputSpec("x", (4,)),), outputs=("y",), profile=ShapeProfile(1, 4, 8))
    backend = trt_backend.TensorRTBackend()
    assert backend.skip_reason(request) is None
    cache = ArtifactCache(tmp_path / "cache")

    loaded = backend.load(request, artifacts, cache)
    runner = loaded.runner
    assert runner.input_names == ("x",) and runner.output_names == ("y",)
    for batch in (1, 3, 8):  # min, between, max of the profile (opt is 4)
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        out = runner.infer({"x": x})
        assert out["y"].shape == (batch, 3) and out["y"].dtype == np.float32
        np.testing.assert_allclose(out["y"], np.maximum(x @ weight + bias, 0.0), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="outside the engine's optimization profile"):
        runner.infer({"x": np.zeros((9, 4), np.float32)})

    x = rng.standard_normal((5, 4)).astype(np.float32)
    runner.stage({"x": x})
    runner.run_staged()
    np.testing.assert_allclose(runner.staged_outputs()["y"], np.maximum(x @ weight + bias, 0.0), atol=1e-5, rtol=0)

    assert loaded.facts.parameters == 15 and loaded.facts.artifact_bytes and loaded.facts.layers
    assert loaded.artifact is not None and loaded.artifact.stat().st_size == loaded.facts.artifact_bytes
    assert cache.stats.builds == 1 and any((cache.root / "tensorrt-timing").iterdir())

    again = backend.load(request, artifacts, cache)  # served from the engine cache, same results
    assert cache.stats.hits == 1 and cache.stats.builds == 1
    np.testing.assert_array_equal(again.runner.infer({"x": x})["y"], runner.infer({"x": x})["y"])
