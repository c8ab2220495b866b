"""The engine pipeline on a tiny two-input model: export, convert, quantize, cache, run, compare."""

import numpy as np
import onnx
import pytest
import torch

from core.cache import ArtifactCache
from core.inputs import InputSpec, synthetic_feed
from engines import get_backend
from engines.artifacts import ModelBuild
from engines.base import EngineBuildError, EngineRequest, ShapeProfile
from metrics import Tolerance, compare_outputs
from suite import verdict
from tests.selftest.tiny_models import Data, exports_wrong, not_exportable, two_input_net

pytestmark = pytest.mark.selftest

INPUTS = (InputSpec("image", (1, 8, 8)), InputSpec("extra", (3,), low=-1.0, high=1.0))
FP32 = Tolerance(rtol=1e-3, atol=1e-5, min_isclose_pct=99.0)


def _build(cache, factory=two_input_net, rows=64, method="minmax"):
    return ModelBuild("tiny", factory, INPUTS, ("out",), cache, calibration=lambda: Data(rows),
                      int8_options={"method": method, "samples": rows, "per_channel": True, "percentile": 99.99})


PROFILE = ShapeProfile(1, 4, 8)


def _run(build, cache, engine, precision, feed, profile=PROFILE):
    request = EngineRequest("tiny", engine, precision, "cpu", INPUTS, ("out",), profile)
    backend = get_backend(engine)
    assert backend.skip_reason(request) is None
    return backend.load(request, build, cache).runner.infer(feed)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def feed():
    return synthetic_feed(INPUTS, 4, "normal", seed=3)


def test_onnxruntime_fp32_matches_torch_like_the_manual_check(cache, feed):
    """The users' old manual check: allclose(rtol=1e-3, atol=1e-5) between PyTorch and ONNX Runtime."""
    build = _build(cache)
    ref = _run(build, cache, "torch", "fp32", feed)
    out = _run(build, cache, "onnxruntime", "fp32", feed)
    np.testing.assert_allclose(out["out"], ref["out"], rtol=1e-3, atol=1e-5)
    assert all(r.passed for r in compare_outputs(ref, out, FP32).values())


def test_exported_graph_has_dynamic_batch_and_passes_checker(cache):
    model = onnx.load(str(_build(cache).onnx_path("fp32")))
    onnx.checker.check_model(model, full_check=True)
    assert [i.type.tensor_type.shape.dim[0].dim_param for i in model.graph.input] == ["batch", "batch"]


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_dynamic_batch_runs(cache, batch):
    feed = synthetic_feed(INPUTS, batch, "uniform", seed=batch)
    out = _run(_build(cache), cache, "onnxruntime", "fp32", feed)
    assert out["out"].shape == (batch, 5)


def test_broken_export_is_caught_by_the_comparator(tmp_path, feed):
    cache = ArtifactCache(tmp_path)
    build = _build(cache, factory=exports_wrong)
    ref = _run(build, cache, "torch", "fp32", feed)
    out = _run(build, cache, "onnxruntime", "fp32", feed)
    report = compare_outputs(ref, out, FP32)["out"]
    assert not report.passed and "isclose" in report.explain()


def test_export_failure_names_the_model_and_carries_the_exporter_message(tmp_path):
    build = ModelBuild("numpy_model", not_exportable, (InputSpec("image", (1, 8, 8)),), ("out",),
                       ArtifactCache(tmp_path))
    with pytest.raises(EngineBuildError, match=r"ONNX export of model 'numpy_model' failed .*Error"):
        build.onnx_path("fp32")


def test_second_session_does_no_builds(cache, feed):
    _run(_build(cache), cache, "onnxruntime", "int8", feed)
    fresh = ArtifactCache(cache.root)
    for precision in ("fp32", "fp16", "int8"):
        _run(_build(fresh), fresh, "onnxruntime", precision, feed)
    assert fresh.stats.builds == 1 and fresh.stats.hits >= 3  # only fp16 was new here


def test_calibration_reruns_exactly_once_when_the_set_size_changes(tmp_path, feed):
    cache = ArtifactCache(tmp_path)
    _run(_build(cache, rows=64), cache, "onnxruntime", "int8", feed)
    calibrations = lambda: sum(e.label.startswith("calibrate") and e.action == "build"
                               for e in cache.stats.events)
    assert calibrations() == 1
    _run(_build(cache, rows=64), cache, "onnxruntime", "int8", feed, profile=ShapeProfile(1, 2, 16))
    assert calibrations() == 1, "a changed batch profile must not recalibrate"
    _run(_build(cache, rows=32), cache, "onnxruntime", "int8", feed)
    assert calibrations() == 2, "a changed calibration set size must recalibrate"
    _run(_build(cache, rows=32), cache, "onnxruntime", "int8", feed)
    _run(_build(cache, rows=32, method="entropy"), cache, "onnxruntime", "int8", feed)
    assert calibrations() == 3


def test_int8_model_is_qdq_with_symmetric_int8(cache):
    model = onnx.load(str(_build(cache).onnx_path("int8")))
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    zero_points = [onnx.numpy_helper.to_array(i) for i in model.graph.initializer if i.name.endswith("zero_point")]
    assert zero_points and all(z.dtype == np.int8 and not z.any() for z in zero_points)


def test_int8_is_close_but_not_identical(cache, feed):
    build = _build(cache)
    ref = _run(build, cache, "torch", "fp32", feed)["out"]
    out = _run(build, cache, "onnxruntime", "int8", feed)["out"]
    assert not np.array_equal(ref, out), "an int8 engine identical to fp32 did not quantize"
    assert np.abs(out - ref).max() < 0.2


@pytest.mark.parametrize("precision,elem", [("fp16", onnx.TensorProto.FLOAT16), ("bf16", onnx.TensorProto.BFLOAT16)])
def test_reduced_precision_keeps_fp32_io(cache, precision, elem):
    model = onnx.load(str(_build(cache).onnx_path(precision)))
    assert {i.type.tensor_type.elem_type for i in [*model.graph.input, *model.graph.output]} == {
        onnx.TensorProto.FLOAT}
    assert any(i.data_type == elem for i in model.graph.initializer)


def test_feed_errors_are_clear(cache, feed):
    with pytest.raises(ValueError, match=r"missing \['extra'\]"):
        _run(_build(cache), cache, "onnxruntime", "fp32", {"image": feed["image"]})


def test_onnxruntime_cpu_has_no_bf16_by_design():
    request = EngineRequest("tiny", "onnxruntime", "bf16", "cpu", INPUTS, ("out",), ShapeProfile(1, 1, 1))
    assert "no bf16" in get_backend("onnxruntime").unsupported_reason(request)
    assert get_backend("onnxruntime").skip_reason(request) is None


@pytest.mark.parametrize("device,precision,options,reason,kind", [
    ("cpu", "fp16", {"execution_provider": "tensorrt"}, "needs a CUDA device", "unsupported"),
    ("cpu", "fp32", {"execution_provider": "cuda"}, "needs a CUDA device", "unsupported"),
    ("cuda:0", "fp16", {"execution_provider": "tensorrt"}, "lacks TensorrtExecutionProvider", "unavailable"),
    ("cpu", "fp32", {"execution_provider": "directml"}, "valid: cpu, cuda, tensorrt", "unsupported"),
])
def test_onnxruntime_execution_provider_skips_name_the_reason(device, precision, options, reason, kind):
    from engines.ort_import import import_onnxruntime

    ort = import_onnxruntime()
    if reason.startswith("lacks") and "TensorrtExecutionProvider" in ort.get_available_providers():
        verdict.skip("unsupported", "this onnxruntime has the TensorRT EP; the skip path cannot be exercised here")
    request = EngineRequest("tiny", "onnxruntime", precision, device, INPUTS, ("out",), PROFILE, options)
    backend = get_backend("onnxruntime")
    said = backend.unsupported_reason(request) if kind == "unsupported" else backend.skip_reason(request)
    assert reason in (said or "")


class _SessionOn:
    """Just enough of an InferenceSession to reach the runner's path checks."""

    def __init__(self, providers):
        self._providers = providers

    def get_providers(self):
        return self._providers

    def get_inputs(self):
        from types import SimpleNamespace

        return [SimpleNamespace(name="image", type="tensor(float)")]


@pytest.mark.parametrize("providers,path,reason", [
    (["CPUExecutionProvider"], "model", "needs a CUDA execution provider"),
    (["CPUExecutionProvider"], "graph", "needs a CUDA execution provider"),
    (["TensorrtExecutionProvider", "CUDAExecutionProvider"], "graph", "with the CUDA EP only"),
    (["CUDAExecutionProvider"], "stream", "no such path"),
])
def test_onnxruntime_device_paths_say_why_they_cannot_run(providers, path, reason):
    from engines.base import CellUnavailable
    from engines.onnxrt.backend import OnnxRuntimeRunner

    runner = OnnxRuntimeRunner(_SessionOn(providers), ("out",))  # no graph session: as for the TensorRT EP
    with pytest.raises(CellUnavailable, match=reason):
        runner.prepare_path(path, {"image": np.ones((1, 1, 8, 8), np.float32)})


class _Value:
    """A stand-in OrtValue on the 'device': a host array."""

    def __init__(self, array):
        self.array = np.array(array)

    def shape(self):
        return list(self.array.shape)

    def data_type(self):
        return "tensor(float)"

    def numpy(self):
        return self.array


class _FakeOrt:
    """Just enough of onnxruntime's module for the runner's device paths: OrtValues that live on the host."""

    __version__ = "stand-in"

    class OrtValue:
        @staticmethod
        def ortvalue_from_numpy(array, device, device_id):
            return _Value(array)

        @staticmethod
        def ortvalue_from_shape_and_type(shape, dtype, device, device_id):
            return _Value(np.zeros(shape, dtype))


class _Binding:
    def __init__(self):
        self.inputs, self.outputs, self.allocate = {}, {}, []

    def bind_ortvalue_input(self, name, value):
        self.inputs[name] = value

    def bind_output(self, name, device, device_id):
        self.allocate.append(name)

    def bind_ortvalue_output(self, name, value):
        self.outputs[name] = value

    def get_outputs(self):
        return list(self.outputs.values())

    def clear_binding_outputs(self):
        self.outputs, self.allocate = {}, []


class _DeviceSession(_SessionOn):
    """A CUDA EP session whose IO-bound run writes ``scale * image`` into its bound outputs; counts its runs."""

    def __init__(self, scale=2.0):
        super().__init__(["CUDAExecutionProvider"])
        self.scale, self.runs = scale, 0

    def get_provider_options(self):
        return {"CUDAExecutionProvider": {"device_id": "0"}}

    def io_binding(self):
        return _Binding()

    def run_with_iobinding(self, binding):
        self.runs += 1
        out = binding.inputs["image"].array * self.scale
        for name in binding.allocate:
            binding.outputs[name] = _Value(out)
        for value in binding.outputs.values():
            value.array[...] = out


@pytest.mark.parametrize("path", ["model", "graph"])
def test_onnxruntime_device_paths_say_where_their_set_up_went(monkeypatch, path):
    """prepare_path's seconds by part (issue 22: the graph cases' set-up was most of the latency tests' time
    outside their rounds), and the graph session's three runs before its replays are timed."""
    from engines.onnxrt import backend

    monkeypatch.setattr(backend, "import_onnxruntime", lambda: _FakeOrt)
    graph = _DeviceSession()
    runner = backend.OnnxRuntimeRunner(_DeviceSession(), ("out",), graph_session=lambda: graph)
    clock = runner.prepare_path(path, {"image": np.ones((2, 1, 8, 8), np.float32)})
    parts = {"bind and run the plain session"} | (
        {"make the graph session", "its first runs and the capture"} if path == "graph" else set())
    assert set(runner.prepare_parts) == parts and all(v >= 0 for v in runner.prepare_parts.values())
    assert ("CUDA graph replay" in clock) == (path == "graph")
    assert graph.runs == (3 if path == "graph" else 0)
    np.testing.assert_array_equal(runner.path_outputs(path)["out"], np.full((2, 1, 8, 8), 2.0))


def test_onnxruntime_graph_replay_that_differs_from_the_plain_session_fails(monkeypatch):
    from engines.onnxrt import backend

    monkeypatch.setattr(backend, "import_onnxruntime", lambda: _FakeOrt)
    runner = backend.OnnxRuntimeRunner(_DeviceSession(), ("out",), graph_session=lambda: _DeviceSession(scale=3.0))
    with pytest.raises(RuntimeError, match="replay's 'out' differs from the plain session's"):
        runner.prepare_path("graph", {"image": np.ones((2, 1, 8, 8), np.float32)})


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_torch_reduced_precision_on_cpu_is_close_not_identical(cache, feed, precision):
    build = _build(cache)
    ref = _run(build, cache, "torch", "fp32", feed)["out"]
    out = _run(build, cache, "torch", precision, feed)["out"]
    assert out.dtype == np.float32 and not np.array_equal(ref, out)
    np.testing.assert_allclose(out, ref, rtol=5e-2, atol=5e-2)


def test_torch_reference_keeps_fp32_after_reduced_precision_cells(cache, feed):
    build = _build(cache)
    before = _run(build, cache, "torch", "fp32", feed)["out"]
    _run(build, cache, "torch", "bf16", feed)
    assert build.torch_module().conv.weight.dtype == torch.float32
    np.testing.assert_array_equal(_run(build, cache, "torch", "fp32", feed)["out"], before)


def test_inductor_package_is_built_once_and_matches_torch(tmp_path, feed):
    """Also: inductor's own cache is in the engine cache, and the process environment is as it was."""
    import os

    variables = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR")
    before = {v: os.environ.get(v) for v in variables}
    cache = ArtifactCache(tmp_path)
    build = _build(cache)
    ref = _run(build, cache, "torch", "fp32", feed)
    out = _run(build, cache, "inductor", "fp32", feed)
    np.testing.assert_allclose(out["out"], ref["out"], rtol=1e-4, atol=1e-5)
    fresh = ArtifactCache(tmp_path)
    _run(_build(fresh), fresh, "inductor", "fp32", synthetic_feed(INPUTS, 8, "uniform", seed=8))
    assert (fresh.stats.builds, fresh.stats.hits) == (0, 1)
    assert {v: os.environ.get(v) for v in variables} == before
    assert any((tmp_path / "torchinductor").rglob("*.so")), "inductor compiled nothing into the engine cache"


def test_inductor_compiles_with_the_configured_compiler(tmp_path):
    """engine_options.inductor.cxx is the compiler torch uses: a missing one fails the build, named."""
    cache = ArtifactCache(tmp_path)
    request = EngineRequest("tiny", "inductor", "fp32", "cpu", INPUTS, ("out",), PROFILE,
                            options={"cxx": str(tmp_path / "no-such-g++")})
    with pytest.raises(EngineBuildError, match="no-such-g"):
        get_backend("inductor").load(request, _build(cache), cache)


@pytest.mark.parametrize("static", [True, False], ids=["static-libstdcxx", "shared-libstdcxx"])
def test_inductor_load_failure_names_a_statically_linked_libstdcxx(tmp_path, static):
    """The H100/H200 image's $CXX linked libstdc++ into wrapper.so; loading then segfaulted in std::regex.
    The cell's error must say so, and say nothing of it for a normally linked wrapper."""
    import shutil
    import subprocess
    import zipfile

    from engines.inductor.backend import _load_failure_hint

    if shutil.which("g++") is None or shutil.which("readelf") is None:
        verdict.skip("unavailable", "needs g++ and readelf (binutils), as AOTInductor itself does")
    source = tmp_path / "w.cpp"
    source.write_text("#include <regex>\n"
                      'bool ok(const std::string& s) { return std::regex_match(s, std::regex("cpu|cuda")); }\n')
    so = tmp_path / "x.wrapper.so"
    flags = ["-static-libstdc++"] if static else []
    subprocess.run(["g++", "-shared", "-fPIC", *flags, str(source), "-o", str(so)], check=True)
    package = tmp_path / "model.pt2"
    with zipfile.ZipFile(package, "w") as archive:
        archive.write(so, "model/data/aotinductor/model/x.wrapper.so")
    hint = _load_failure_hint(package, "/opt/gcc/bin/g++")
    if static:
        assert "linked libstdc++ statically" in hint and "/opt/gcc/bin/g++" in hint and "cxx" in hint
    else:
        assert hint == ""


def test_engine_facts_count_the_models_parameters(cache):
    from engines.onnx.export import onnx_facts

    build = _build(cache)
    facts = onnx_facts(build.onnx_path("fp32"))
    assert facts.parameters == sum(p.numel() for p in build.torch_module().parameters())
    assert facts.layers and facts.size_mb and facts.size_mb > 0


def test_a_gpu_ep_session_does_not_spin_on_the_cpu() -> None:
    """Issue 42: ONNX Runtime's idle pool threads spin after every run by default, taking CPU time from the thread
    a host-bound GPU case times; a GPU EP's sessions sleep instead, and the cell's session options say so."""
    import onnxruntime as ort

    from engines.onnxrt.backend import no_spinning

    options = ort.SessionOptions()
    no_spinning(options)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"
