"""static_batch: a model's ONNX Runtime (and TensorRT) engines with the batch fixed, one per batch met, built lazily
and cached, beside the same network's dynamic-profile engine in one run; and opt_batch reaching the profiles."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from core.cache import ArtifactCache
from core.cache_manifest import MANIFEST
from engines.base import (
    UNSUPPORTED,
    CellUnavailable,
    EngineFacts,
    LoadedEngine,
    ShapeProfile,
    StaticBatchRunner,
)
from engines.onnxrt.backend import trt_profile_options
from engines.trt.settings import optimization_profile_shapes
from metrics import compare_outputs
from suite.config import load_config, parse_config
from suite.session import Cell, SuiteSession
from tests.selftest.tiny_models import Data

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
TINY = {"factory": "tests.selftest.tiny_models:two_input_net", "outputs": ["out"],
        "inputs": [{"name": "image", "shape": [1, 8, 8]}, {"name": "extra", "shape": [3], "low": -1.0, "high": 1.0}],
        "batch_sizes": [1, 4, 8], "engines": ["torch", "onnxruntime"]}
DYNAMIC, STATIC = Cell("tiny", "onnxruntime", "fp32"), Cell("tiny_static", "onnxruntime", "fp32")


def _session(root, **static):
    config = parse_config({"models": {"tiny": TINY, "tiny_static": {**TINY, "static_batch": True, **static}}})
    return SuiteSession(config, ArtifactCache(root), "cpu")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return _session(tmp_path_factory.mktemp("cache"))


def _batch_dims(path):
    """Axis 0 of every graph input and output: an int where fixed, the dim_param where symbolic."""
    graph = onnx.load(str(path)).graph
    return [d.dim_value or d.dim_param for v in (*graph.input, *graph.output)
            for d in v.type.tensor_type.shape.dim[:1]]


def test_static_model_runs_one_fixed_batch_graph_per_batch_and_matches_the_dynamic_model(session):
    """Both entries of one network in one run: the static one's graphs are fixed per batch, its outputs the same."""
    loaded = session.engine(STATIC)
    runner = loaded.runner
    assert isinstance(runner, StaticBatchRunner) and runner.built == [8]  # the opt batch's engine, at load
    feeds = Data(20).feeds  # chunks of the profile's max batch: 8, 8, 4
    static, dynamic = session.run_batched(STATIC, feeds), session.run_batched(DYNAMIC, feeds)
    assert runner.built == [8, 4]
    report = compare_outputs(dynamic, static, session.model("tiny_static").tolerance("fp32"))["out"]
    assert report.passed, report.explain()
    np.testing.assert_allclose(static["out"], dynamic["out"], rtol=1e-5, atol=1e-6)
    for batch, engine in runner.engines.items():
        assert _batch_dims(engine.artifact) == [batch] * 3
        key = json.loads((engine.artifact.parent / MANIFEST).read_text())["key"]["export"]
        assert key["static_batch"] == key["sample_batch"] == batch
    assert _batch_dims(session.engine(DYNAMIC).artifact) == ["batch"] * 3
    facts = session.engine_facts()[STATIC.id]
    assert facts["static_batch"] == {"facts_batch": 8, "batches_built": [8, 4]}
    assert "precision_census" in facts  # the census reads the graph the static engine runs, at its opt batch


def test_a_feed_of_another_batch_builds_that_batchs_engine(session):
    """Lazy: a batch never met before gets its own engine; one outside the profile is refused, not guessed."""
    runner = session.engine(STATIC).runner
    feed = {k: v[:3] for k, v in Data(20).feeds.items()}
    out = runner.infer(feed)
    assert 3 in runner.built and _batch_dims(runner.engines[3].artifact) == [3] * 3
    np.testing.assert_allclose(out["out"], session.run_batched(session.reference_cell("tiny"), feed)["out"],
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"^tiny_static-onnxruntime-fp32: batch 9 is outside the profile's batch "
                                         r"range 1\.\.8"):
        runner.infer(Data(9).feeds)


def test_static_engines_are_cached_with_the_batch_in_each_key(tmp_path):
    """A second run rebuilds nothing; each batch is its own entry, so one batch's graph never serves another."""
    def run(feed_rows):
        session = _session(tmp_path)
        session.engine(STATIC).runner.infer(Data(feed_rows).feeds)
        return session.cache

    first = run(4)
    assert first.stats.builds == 2  # the exports at batch 8 (load) and 4 (the feed)
    entries = sorted((tmp_path / "onnx").glob("*/" + MANIFEST))
    assert sorted(json.loads(p.read_text())["key"]["export"]["static_batch"] for p in entries) == [4, 8]
    again = run(4)
    assert again.stats.builds == 0 and again.stats.hits == 2


def test_profile_of_a_static_model():
    """The flag rides on the profile every backend already gets; dynamic profiles keep their cache keys."""
    dynamic = ShapeProfile(1, 4, 8)
    static = ShapeProfile(1, 4, 8, static_batch=True)
    assert dynamic.as_dict() == {"min": 1, "opt": 4, "max": 8}  # dynamic keys stay what they were
    assert not dynamic.per_batch and dynamic.onnx_batch is None and dynamic.engine_profile() is dynamic
    assert static.as_dict() == {"min": 1, "opt": 4, "max": 8, "static_batch": True} and static.per_batch
    assert static.fixed(2).as_dict() == {"min": 2, "opt": 2, "max": 2, "static_batch": True}
    assert static.engine_profile() == static.fixed(4) and static.onnx_batch == 4
    assert not static.fixed(2).per_batch and static.fixed(2).onnx_batch == 2
    with pytest.raises(ValueError, match=r"has a dynamic batch axis"):
        dynamic.fixed(2)
    model = parse_config({"models": {"m": {**TINY, "static_batch": True, "opt_batch": 4}}}).models["m"]
    assert model.profile == static


def test_opt_batch_reaches_both_tensorrt_profiles_and_a_static_one_fixes_the_batch(tmp_path):
    """opt_batch is TensorRT's opt shape (engines/trt/builder.py sets optimization_profile_shapes) and the TensorRT
    EP's trt_profile_opt_shapes; a static-batch engine's profile is its batch thrice in both."""
    models = {"tiny": {**TINY, "opt_batch": 4}, "tiny_static": {**TINY, "opt_batch": 4, "static_batch": True}}
    session = SuiteSession(parse_config({"models": models}), ArtifactCache(tmp_path), "cpu")
    request = session.request(DYNAMIC)
    spec = request.inputs[0]
    assert optimization_profile_shapes(request)[spec.name] == ((1, 1, 8, 8), (4, 1, 8, 8), (8, 1, 8, 8))
    assert trt_profile_options(request) == {"trt_profile_min_shapes": "image:1x1x8x8,extra:1x3",
                                            "trt_profile_opt_shapes": "image:4x1x8x8,extra:4x3",
                                            "trt_profile_max_shapes": "image:8x1x8x8,extra:8x3"}
    static = session.request(STATIC)
    assert set(trt_profile_options(static).values()) == {"image:4x1x8x8,extra:4x3"}  # its engine at opt_batch
    one = dataclasses.replace(static, profile=static.profile.fixed(1))
    assert set(trt_profile_options(one).values()) == {"image:1x1x8x8,extra:1x3"}
    assert optimization_profile_shapes(one) == {"image": ((1, 1, 8, 8),) * 3, "extra": ((1, 3),) * 3}


class _FakeRunner:
    """Records what a StaticBatchRunner hands it."""

    input_names = ("x",)
    output_names = ("y",)

    def __init__(self, batch):
        self.batch = batch
        self.calls = []

    def infer(self, feed):
        return {"y": np.full((len(feed["x"]), 1), self.batch)}

    def prepare_path(self, path, feed):
        self.calls.append(("prepare", path, len(feed["x"])))
        self.prepare_parts = {"staging": float(self.batch)}
        return f"clock of {self.batch}"

    def run_path(self, path):
        self.calls.append(("run", path))
        return 0.5

    def raw_call(self, path):
        return lambda: self.batch


def test_static_runner_sends_each_feed_and_latency_path_to_its_batchs_engine():
    """The latency paths must time the engine of the case's batch, not the one built first."""
    made = {}

    def load(profile):
        made[profile.min_batch] = _FakeRunner(profile.min_batch)
        assert profile.as_dict() == {"min": profile.min_batch, "opt": profile.min_batch, "max": profile.min_batch,
                                     "static_batch": True}
        return LoadedEngine(made[profile.min_batch], EngineFacts())

    runner = StaticBatchRunner(ShapeProfile(1, 8, 32, static_batch=True), load, "m-x-fp32")
    assert list(made) == [8]
    assert runner.infer({"x": np.zeros((3, 2))})["y"].tolist() == [[3]] * 3
    assert runner.prepare_parts == {}
    assert runner.prepare_path("model", {"x": np.zeros((32, 2))}) == "clock of 32"
    assert runner.prepare_parts == {"staging": 32.0}  # the split of the batch's own engine, for the record
    assert runner.run_path("model") == 0.5 and runner.raw_call("model")() == 32
    assert made[32].calls == [("prepare", "model", 32), ("run", "model")] and made[3].calls == []
    assert runner.built == [8, 3, 32]

    class NoDevicePath(_FakeRunner):
        prepare_path = None

    runner = StaticBatchRunner(ShapeProfile(1, 1, 2, static_batch=True),
                               lambda p: LoadedEngine(NoDevicePath(p.min_batch), EngineFacts()), "m-x-fp32")
    with pytest.raises(CellUnavailable, match=r"latency-model needs a device-resident runner") as caught:
        runner.prepare_path("model", {"x": np.zeros((2, 2))})
    assert caught.value.code == UNSUPPORTED


def test_tensorrt_static_cell_builds_an_engine_per_batch_from_the_fixed_batch_graph(tmp_path):
    """The TensorRT backend's dispatch (which needs no TensorRT): one load per batch, each min = opt = max, parsing
    the graph exported at that batch, keyed by it."""
    from engines.trt.backend import TensorRTBackend, onnx_source
    from engines.trt.settings import BuildPlan, engine_cache_parts

    class Recording(TensorRTBackend):
        def __init__(self):
            self.profiles = []

        def load(self, request, artifacts, cache):
            if request.profile.per_batch:
                return super().load(request, artifacts, cache)
            self.profiles.append(request.profile)
            return LoadedEngine(_FakeRunner(request.profile.min_batch), EngineFacts())

    config = parse_config({"models": {"tiny_static": {**TINY, "static_batch": True, "engines": ["tensorrt"]}}})
    request = SuiteSession(config, ArtifactCache(tmp_path), "cuda:0").request(Cell("tiny_static", "tensorrt", "fp32"))
    backend = Recording()
    loaded = backend.load(request, None, None)
    loaded.runner.infer({"x": np.zeros((2, 1))})
    assert [p.as_dict() for p in backend.profiles] == [{"min": b, "opt": b, "max": b, "static_batch": True}
                                                       for b in (8, 2)]

    class Artifacts:
        def onnx_path(self, *args):
            return Path(f"/x/{args}.onnx")

        def onnx_key(self, *args):
            return f"key{args}"

    artifacts = Artifacts()
    assert onnx_source(artifacts, "fp16", 2) == (Path("/x/('fp16', None, 2).onnx"), "key('fp16', None, 2)")
    assert onnx_source(artifacts, "fp16", None) == (Path("/x/('fp16',).onnx"), "key('fp16',)")
    plan = BuildPlan("fp16", True)
    parts = [engine_cache_parts(dataclasses.replace(request, profile=request.profile.fixed(b)), onnx_key=f"k{b}",
                                plan=plan, trt_version="10.12", gpu_name="g", compute_capability="9.0",
                                cuda_versions={})["profile"] for b in (1, 4)]
    assert parts == [{"min": 1, "opt": 1, "max": 1, "static_batch": True},
                     {"min": 4, "opt": 4, "max": 4, "static_batch": True}]


def test_static_batch_keeps_named_axes_dynamic(tmp_path):
    """Only the batch is fixed: a sequence length stays symbolic in the static graph."""
    from engines.artifacts import ModelBuild
    from tests.selftest import tiny_transformer as tt

    build = ModelBuild("tiny_bert", tt.tiny_bert, tt.INPUTS, tt.OUTPUTS, ArtifactCache(tmp_path))
    graph = onnx.load(str(build.onnx_path("fp32", None, 2))).graph
    assert [[d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in graph.input] == [[2, "seq"]] * 2


def test_the_gpu_latency_command_collects_both_resnet50_models_on_a_cpu_variant(tmp_path):
    """The lead's GPU command, static against dynamic: parsing, preflight and collection need no GPU. suite-gpu.toml
    requires cuda, so a copy without that requirement stands in for it on this CPU."""
    text = (ROOT / "suite-gpu.toml").read_text()
    assert 'requires = ["cuda", ' in text
    variant = tmp_path / "suite-gpu-on-cpu.toml"
    variant.write_text(text.replace('requires = ["cuda", ', 'requires = ['))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--device", "cpu", "--suite-config", str(variant), "--models",
         "resnet50,resnet50_static", "--engines", "onnxruntime", "--precisions", "fp16",
         str(ROOT / "tests" / "latency" / "test_latency.py"), "--latency-paths", "model", "--collect-only", "-q",
         "-p", "no:cacheprovider", "--engine-cache", str(tmp_path / "cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = [line.split("::")[-1] for line in done.stdout.splitlines() if "::test_latency[" in line]
    assert collected == [f"test_latency[{m}-onnxruntime-fp16-bs{b}-model]" for m in ("resnet50", "resnet50_static")
                         for b in (1, 32, 256)]
    config = load_config(variant).models
    assert config["resnet50_static"].profile.as_dict() == {**config["resnet50"].profile.as_dict(), "static_batch": True}
