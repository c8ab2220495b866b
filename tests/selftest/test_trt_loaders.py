"""The TensorRT build steps (engines/trt: logger, timing_cache, network, builder), each driven on CPU by small fakes
standing in for trt.Builder, IBuilderConfig, OnnxParser, INetworkDefinition, ITimingCache and the tensorrt module
itself (passed in as ``api``). No TensorRT is needed, nor imported; the real build runs only on the GPU tier
(test_trt_settings.py::test_tensorrt_engine_builds_and_runs)."""

from __future__ import annotations

import ast
import collections
import logging
import sys
import types
from pathlib import Path

import pytest

from core.inputs import AxisRange, InputSpec
from engines.base import EngineBuildError, EngineRequest, ShapeProfile
from engines.trt import builder as trt_builder
from engines.trt import logger as trt_logging
from engines.trt import network as trt_network
from engines.trt import timing_cache
from engines.trt.settings import BuildPlan

pytestmark = pytest.mark.selftest

TRT_DIR = Path(trt_builder.__file__).parent
SEQ = AxisRange(4, 8, 16)
REQUEST = EngineRequest(model="tiny", engine="tensorrt", precision="fp16", device="cuda:0",
                        inputs=(InputSpec("x", (4,)),), outputs=("y",), profile=ShapeProfile(1, 4, 8))
SEQ_REQUEST = EngineRequest(model="bert", engine="tensorrt", precision="fp16", device="cuda:0",
                            inputs=(InputSpec("ids", ("seq",), dtype="int64", axes=(("seq", SEQ),)),),
                            outputs=("logits",), profile=ShapeProfile(1, 2, 4, axes=(("seq", SEQ),)))


# --- fakes ------------------------------------------------------------------------------------------------


class FakeTimingCache:
    """An ITimingCache: a set of entries, serialized as their sorted, comma-joined names. Bytes starting with
    b"corrupt" do not deserialize; those starting with b"other-gpu:" are another TensorRT/GPU's."""

    def __init__(self, data: bytes) -> None:
        if data.startswith(b"corrupt"):
            raise RuntimeError("invalid timing cache blob")
        self.foreign = data.startswith(b"other-gpu:")
        self.entries = set(data.decode().split(",")) - {""}

    def combine(self, other, ignore_mismatch):
        assert ignore_mismatch is False
        if other.foreign:
            return False
        self.entries |= other.entries
        return True

    def serialize(self):
        return memoryview(",".join(sorted(self.entries)).encode())  # a buffer, as IHostMemory is


class FakeConfig:
    """An IBuilderConfig: records what the build steps set on it."""

    def __init__(self, accept_profile=True):
        self.cache = None
        self.flags, self.cleared, self.pool_limits, self.profiles = [], [], {}, []
        self.accept_profile = accept_profile
        self.builder_optimization_level = None
        self.profiling_verbosity = None
        self.progress_monitor = None

    def create_timing_cache(self, data):
        return FakeTimingCache(bytes(data))

    def set_timing_cache(self, cache, ignore_mismatch):
        assert ignore_mismatch is False
        if cache.foreign:
            return False
        self.cache = cache
        return True

    def get_timing_cache(self):
        return self.cache

    def set_flag(self, flag):
        self.flags.append(flag)

    def clear_flag(self, flag):
        self.cleared.append(flag)

    def set_memory_pool_limit(self, pool, size):
        self.pool_limits[pool] = size

    def add_optimization_profile(self, profile):
        self.profiles.append(profile)
        return len(self.profiles) - 1 if self.accept_profile else -1


class FakeProfile:
    def __init__(self):
        self.shapes = {}

    def set_shape(self, name, low, opt, high):
        self.shapes[name] = (low, opt, high)


class FakeTensor:
    def __init__(self, name, shape):
        self.name, self.shape = name, shape


class FakeNetwork:
    """An INetworkDefinition: its inputs and outputs, shapes with -1 for a dynamic axis."""

    def __init__(self, inputs=(("x", (-1, 4)),), outputs=(("y", (-1, 3)),)):
        self._inputs = [FakeTensor(n, s) for n, s in inputs]
        self._outputs = [FakeTensor(n, s) for n, s in outputs]
        self.num_inputs, self.num_outputs = len(self._inputs), len(self._outputs)

    def get_input(self, i):
        return self._inputs[i]

    def get_output(self, i):
        return self._outputs[i]


def parser_error(code, node, node_name, operator, desc):
    """A trt.ParserError: every field a method."""
    return types.SimpleNamespace(code=lambda: types.SimpleNamespace(name=code), desc=lambda: desc,
                                 node=lambda: node, node_name=lambda: node_name, node_operator=lambda: operator)


class FakeParser:
    def __init__(self, ok=True, errors=()):
        self.ok, self.errors, self.parsed = ok, list(errors), []

    def parse_from_file(self, path):
        self.parsed.append(path)
        return self.ok

    @property
    def num_errors(self):
        return len(self.errors)

    def get_error(self, i):
        return self.errors[i]


class FakeBuilder:
    """A trt.Builder. ``build_serialized_network`` adds a tactic to the config's timing cache, may log an error
    through ``errors`` (as the logger bridge would), and returns ``result`` (None: the build failed)."""

    def __init__(self, network=None, config=None, result=b"ENGINE", log_error=None, errors=None):
        self.network = network if network is not None else FakeNetwork()
        self.config = config if config is not None else FakeConfig()
        self.result, self.log_error, self.errors = result, log_error, errors
        self.network_flags = None
        self.built = []

    def create_network(self, flags):
        self.network_flags = flags
        return self.network

    def create_builder_config(self):
        return self.config

    def create_optimization_profile(self):
        return FakeProfile()

    def build_serialized_network(self, network, config):
        self.built.append((network, config))
        if config.cache is not None:
            config.cache.entries.add("tactic-new")
        if self.log_error:
            self.errors.append(self.log_error)
        return None if self.result is None else bytearray(self.result)


class FakeILogger:
    def __init__(self):
        self.base_initialized = True


class FakeIProgressMonitor:
    def __init__(self):
        self.base_initialized = True


def fake_api(version="10.13.0.35", builder=None, parser=None, strongly_typed=True, **extra):
    """A stand-in for the tensorrt module: the enums and classes the build steps look up on it."""
    flags = types.SimpleNamespace(FP16="flag:FP16", TF32="flag:TF32", INT8="flag:INT8")
    creation = types.SimpleNamespace(**({"STRONGLY_TYPED": 1} if strongly_typed else {}))
    api = types.SimpleNamespace(
        __version__=version, BuilderFlag=flags, NetworkDefinitionCreationFlag=creation,
        MemoryPoolType=types.SimpleNamespace(WORKSPACE="pool:WORKSPACE"),
        ProfilingVerbosity=types.SimpleNamespace(DETAILED="verbosity:DETAILED"),
        Dims=lambda values: ("dims", tuple(values)), ILogger=FakeILogger, IProgressMonitor=FakeIProgressMonitor,
        LayerInformationFormat=types.SimpleNamespace(JSON="format:JSON"), **extra)
    api.loggers = []
    if builder is not None:
        def make_builder(logger):
            api.loggers.append(logger)
            return builder
        api.Builder = make_builder
    if parser is not None:
        api.OnnxParser = lambda network, logger: parser
    return api


# --- no tensorrt at import ----------------------------------------------------------------------------------


@pytest.mark.parametrize("module", sorted(p.name for p in TRT_DIR.glob("*.py")))
def test_no_module_of_engines_trt_imports_tensorrt_or_cuda_at_import(module):
    """Importing the package must work where TensorRT (or cuda-python) is missing: their imports live under
    TYPE_CHECKING or inside functions, never at a module's top level."""
    def imports_run_at_import(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue  # runs when called
            if isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                yield from (n for c in child.orelse for n in imports_run_at_import(ast.Module([c], [])))
                continue
            if isinstance(child, ast.Import):
                yield from ((child.lineno, a.name) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                yield child.lineno, child.module or ""
            yield from imports_run_at_import(child)

    imports = list(imports_run_at_import(ast.parse((TRT_DIR / module).read_text())))
    assert imports, "no imports found: the check reads nothing"
    bad = [(line, name) for line, name in imports if name.split(".")[0] in ("tensorrt", "cuda")]
    assert not bad, f"engines/trt/{module} imports {bad} at module import"


# --- timing cache ------------------------------------------------------------------------------------------


def test_timing_cache_is_loaded_from_an_existing_file(tmp_path, caplog):
    path = tmp_path / "timing.cache"
    path.write_bytes(b"conv1,gemm")
    config = FakeConfig()
    with caplog.at_level(logging.INFO, logger="engines.trt.timing_cache"):
        loaded = timing_cache.load_timing_cache(config, path)
    assert loaded == b"conv1,gemm" and config.cache.entries == {"conv1", "gemm"}
    assert f"loaded 10 bytes from {path}" in caplog.text


@pytest.mark.parametrize("content,warning", [(None, None), (b"corrupt!", "is corrupt"),
                                             (b"other-gpu:conv1", "written by another TensorRT/GPU")])
def test_a_missing_corrupt_or_foreign_timing_cache_starts_empty_and_never_fails(tmp_path, caplog, content, warning):
    path = tmp_path / "timing.cache"
    if content is not None:
        path.write_bytes(content)
    config = FakeConfig()
    with caplog.at_level(logging.WARNING, logger="engines.trt.timing_cache"):
        loaded = timing_cache.load_timing_cache(config, path)
    assert loaded == b"" and config.cache is not None and config.cache.entries == set()
    assert (warning in caplog.text) if warning else not caplog.text


def test_timing_cache_is_saved_back_atomically_when_the_build_added_entries(tmp_path):
    path = tmp_path / "timing" / "trt.cache"
    path.parent.mkdir()
    path.write_bytes(b"conv1")
    config = FakeConfig()
    loaded = timing_cache.load_timing_cache(config, path)
    config.cache.entries.add("gemm")  # what a build learns
    timing_cache.save_timing_cache(config, path, loaded)
    assert path.read_bytes() == b"conv1,gemm"
    assert [p.name for p in path.parent.iterdir()] == ["trt.cache"]  # no temporary file left behind


def test_timing_cache_is_not_rewritten_when_nothing_changed(tmp_path, monkeypatch):
    path = tmp_path / "trt.cache"
    path.write_bytes(b"conv1,gemm")
    config = FakeConfig()
    loaded = timing_cache.load_timing_cache(config, path)
    writes = []
    monkeypatch.setattr(timing_cache, "atomic_write_bytes", lambda p, data: writes.append((p, data)))
    timing_cache.save_timing_cache(config, path, loaded)
    assert writes == [] and path.read_bytes() == b"conv1,gemm"


def test_timing_cache_save_merges_what_another_process_wrote_meanwhile(tmp_path):
    path = tmp_path / "trt.cache"
    path.write_bytes(b"conv1")
    config = FakeConfig()
    loaded = timing_cache.load_timing_cache(config, path)
    path.write_bytes(b"conv1,other-process")  # another build of the same GPU saved first
    config.cache.entries.add("mine")
    timing_cache.save_timing_cache(config, path, loaded)
    assert path.read_bytes() == b"conv1,mine,other-process"


def test_timing_cache_save_failures_are_logged_never_raised(tmp_path, caplog):
    config = FakeConfig()
    timing_cache.load_timing_cache(config, tmp_path / "none.cache")
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="engines.trt.timing_cache"):
        timing_cache.save_timing_cache(config, blocked / "trt.cache", b"")
    assert "could not save timing cache" in caplog.text


def test_atomic_write_keeps_the_old_file_whole_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "trt.cache"
    path.write_bytes(b"old")

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(timing_cache.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        timing_cache.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["trt.cache"]


# --- network ----------------------------------------------------------------------------------------------


def test_a_parser_error_names_the_cell_the_file_the_node_and_the_message():
    parser = FakeParser(ok=False, errors=[parser_error("UNSUPPORTED_NODE", 7, "/attn/Einsum", "Einsum",
                                                      "unsupported equation")])
    with pytest.raises(EngineBuildError) as caught:
        trt_network.parse_onnx(parser, Path("/cache/model.onnx"), "tiny-tensorrt-fp16")
    text = str(caught.value)
    assert "tiny-tensorrt-fp16" in text and "/cache/model.onnx" in text
    assert "UNSUPPORTED_NODE at node 7 '/attn/Einsum' (op Einsum): unsupported equation" in text
    assert parser.parsed == ["/cache/model.onnx"]  # a str: parse_from_file takes a path string


def test_a_parse_that_reports_success_but_leaves_errors_still_fails():
    parser = FakeParser(ok=True, errors=[parser_error("INVALID_NODE", 3, "/head/Gemm", "Gemm", "bad transB")])
    with pytest.raises(EngineBuildError, match="'/head/Gemm' \\(op Gemm\\): bad transB"):
        trt_network.parse_onnx(parser, Path("m.onnx"), "c")
    trt_network.parse_onnx(FakeParser(ok=True), Path("m.onnx"), "c")  # a clean parse raises nothing


def test_network_inputs_other_than_the_requests_fail_clearly():
    network = FakeNetwork(inputs=(("input", (-1, 4)),))
    with pytest.raises(EngineBuildError) as caught:
        trt_network.check_network_io(REQUEST, network, Path("m.onnx"))
    assert str(caught.value) == ("tiny-tensorrt-fp16: m.onnx has inputs ['input']; the config's inputs are ['x']")


def test_a_requested_output_the_network_lacks_fails_clearly():
    network = FakeNetwork(outputs=(("logits", (-1, 3)),))
    with pytest.raises(EngineBuildError, match=r"outputs \['y'\] are not outputs of m.onnx \(its outputs: \['logits"):
        trt_network.check_network_io(REQUEST, network, Path("m.onnx"))


@pytest.mark.parametrize("request_,inputs,match", [
    (REQUEST, (("x", (-1, 4, 4)),), r"input 'x' of m.onnx has shape \(-1, 4, 4\); the config says \(batch, 4\)"),
    (REQUEST, (("x", (2, 4)),), r"has a static batch 2; the profile .* needs a dynamic batch axis"),
    (SEQ_REQUEST, (("ids", (-1, 8)),), r"has a static axis 1 \('seq'\) of 8; the profile .* needs it dynamic"),
])
def test_static_axes_the_profile_varies_fail_clearly(request_, inputs, match):
    outputs = ((request_.outputs[0], (-1, 3)),)
    with pytest.raises(EngineBuildError, match=match):
        trt_network.check_network_io(request_, FakeNetwork(inputs=inputs, outputs=outputs), Path("m.onnx"))


def test_matching_network_io_passes():
    trt_network.check_network_io(REQUEST, FakeNetwork(), Path("m.onnx"))
    network = FakeNetwork(inputs=(("ids", (-1, -1)),), outputs=(("logits", (-1, 2)), ("extra", (-1,))))
    trt_network.check_network_io(SEQ_REQUEST, network, Path("m.onnx"))


@pytest.mark.parametrize("strongly_typed,flags", [(True, 1 << 1), (False, 0)])
def test_create_network_sets_the_strongly_typed_flag_as_the_plan_says(strongly_typed, flags):
    builder = FakeBuilder()
    network = trt_network.create_network(builder, BuildPlan("fp16", strongly_typed), "label", fake_api())
    assert network is builder.network and builder.network_flags == flags


def test_create_network_without_the_strongly_typed_flag():
    plan = BuildPlan("fp16", True)
    builder = FakeBuilder()
    trt_network.create_network(builder, plan, "label", fake_api("11.0.0", strongly_typed=False))
    assert builder.network_flags == 0  # TensorRT 11 dropped the flag: every network is strongly typed
    with pytest.raises(EngineBuildError, match="tensorrt 10.9.0 has no STRONGLY_TYPED network flag"):
        trt_network.create_network(builder, plan, "label", fake_api("10.9.0", strongly_typed=False))


def test_create_network_failure_names_the_label():
    builder = FakeBuilder()
    builder.create_network = lambda flags: None
    with pytest.raises(EngineBuildError, match="tensorrt c: Builder.create_network failed"):
        trt_network.create_network(builder, BuildPlan("fp32", False), "tensorrt c", fake_api())


# --- logger bridge and progress monitor --------------------------------------------------------------------


@pytest.mark.parametrize("severity,level", [("INTERNAL_ERROR", logging.CRITICAL), ("ERROR", logging.ERROR),
                                            ("WARNING", logging.WARNING), ("INFO", logging.INFO),
                                            ("VERBOSE", logging.DEBUG)])
def test_the_logger_bridge_forwards_to_logging_at_the_mapped_level(caplog, severity, level):
    errors = collections.deque(maxlen=20)
    bridge = trt_logging.make_logging_bridge(fake_api(), errors)
    assert isinstance(bridge, FakeILogger) and bridge.base_initialized  # a real ILogger subclass, base set up
    with caplog.at_level(logging.DEBUG, logger="tensorrt"):
        bridge.log(types.SimpleNamespace(name=severity), f"{severity} message")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [("tensorrt", level, f"{severity} message")]
    assert list(errors) == ([f"{severity} message"] if level >= logging.ERROR else [])


def test_the_logger_bridge_never_raises_into_tensorrt(caplog):
    class Broken:
        @property
        def name(self):
            raise RuntimeError("boom")

    bridge = trt_logging.make_logging_bridge(fake_api(), collections.deque())
    bridge.log(Broken(), "lost, but no exception crosses into C++")


def test_trt_logger_is_one_bridge_per_process(monkeypatch):
    module = types.ModuleType("tensorrt")
    module.ILogger = FakeILogger
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    monkeypatch.setattr(trt_logging, "_trt_logger", None)  # restored after the test: nothing leaks
    first = trt_logging.trt_logger()
    assert isinstance(first, FakeILogger) and trt_logging.trt_logger() is first


def test_progress_monitor_logs_phases_and_throttles_steps(caplog):
    now = [100.0]
    monitor = trt_logging.make_progress_monitor("tensorrt c", fake_api(), clock=lambda: now[0], interval_s=10.0)
    assert isinstance(monitor, FakeIProgressMonitor) and monitor.base_initialized
    with caplog.at_level(logging.DEBUG, logger="engines.trt.logger"):
        monitor.phase_start("Building engine", None, 3)
        monitor.phase_start("Tactic search", "Building engine", 40)
        now[0] = 105.0
        assert monitor.step_complete("Building engine", 0) is True  # too soon: no line
        assert monitor.step_complete("Tactic search", 5) is True  # nested: never a step line
        now[0] = 111.0
        assert monitor.step_complete("Building engine", 1) is True
        monitor.phase_finish("Tactic search")
        now[0] = 112.5
        monitor.phase_finish("Building engine")
        assert monitor.step_complete("unknown phase", 0) is True and monitor.phase_finish("unknown phase") is None
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "tensorrt c: Building engine started, 3 step(s)"),
        (logging.DEBUG, "tensorrt c: Tactic search started, 40 step(s) (in Building engine)"),
        (logging.INFO, "tensorrt c: Building engine step 2/3 (11 s)"),
        (logging.DEBUG, "tensorrt c: Tactic search finished in 11.0 s"),
        (logging.INFO, "tensorrt c: Building engine finished in 12.5 s"),
    ]


def test_no_progress_monitor_where_tensorrt_has_none():
    api = fake_api()
    del api.IProgressMonitor
    assert trt_logging.make_progress_monitor("c", api) is None


# --- builder steps -----------------------------------------------------------------------------------------


def test_the_build_plan_sets_and_clears_flags_workspace_level_and_verbosity():
    config = FakeConfig()
    plan = BuildPlan("fp32", False, ("FP16", "INT8"), ("TF32", "NOT_IN_THIS_VERSION"))
    trt_builder.apply_build_plan(config, plan, {"workspace_mb": 64, "builder_optimization_level": 5}, "c",
                                 fake_api())
    assert config.flags == ["flag:FP16", "flag:INT8"] and config.cleared == ["flag:TF32"]
    assert config.pool_limits == {"pool:WORKSPACE": 64 << 20} and config.builder_optimization_level == 5
    assert config.profiling_verbosity == "verbosity:DETAILED"


def test_a_builder_flag_this_tensorrt_lacks_fails_naming_it():
    with pytest.raises(EngineBuildError, match=r"tensorrt c: tensorrt 10.0.1 has no BuilderFlag.BF16 \(build plan"):
        trt_builder.apply_build_plan(FakeConfig(), BuildPlan("fp32", False, ("BF16",)), {}, "tensorrt c",
                                     fake_api("10.0.1"))


def test_a_bad_builder_option_fails_naming_the_cell():
    with pytest.raises(EngineBuildError, match="tensorrt c: builder_optimization_level must be in 0..5"):
        trt_builder.apply_build_plan(FakeConfig(), BuildPlan("fp32", False), {"builder_optimization_level": 9},
                                     "tensorrt c", fake_api())


def test_the_optimization_profile_covers_the_batch_and_every_named_axis():
    builder, config = FakeBuilder(), FakeConfig()
    trt_builder.add_optimization_profile(builder, config, SEQ_REQUEST, "c", fake_api())
    [profile] = config.profiles
    assert profile.shapes == {"ids": (("dims", (1, 4)), ("dims", (2, 8)), ("dims", (4, 16)))}
    with pytest.raises(EngineBuildError, match=r"tensorrt c: TensorRT rejected the optimization profile \{'min': 1"):
        trt_builder.add_optimization_profile(builder, FakeConfig(accept_profile=False), REQUEST, "tensorrt c",
                                             fake_api())


def test_serialize_network_returns_bytes():
    builder, config = FakeBuilder(result=b"PLAN"), FakeConfig()
    blob, seconds = trt_builder.serialize_network(builder, builder.network, config, "c", Path("m.onnx"), "10.13",
                                                  collections.deque())
    assert blob == b"PLAN" and type(blob) is bytes and seconds >= 0
    assert builder.built == [(builder.network, config)]


def test_a_failed_build_names_the_cell_and_quotes_only_this_builds_errors():
    errors = collections.deque(["stale error of an earlier build"])
    builder = FakeBuilder(result=None, log_error="Error Code 4: no implementation for /attn/Einsum", errors=errors)
    with pytest.raises(EngineBuildError) as caught:
        trt_builder.serialize_network(builder, builder.network, FakeConfig(), "tensorrt tiny-tensorrt-fp16",
                                      Path("/cache/m.onnx"), "10.13.0.35", errors)
    assert str(caught.value) == ("tensorrt tiny-tensorrt-fp16: tensorrt 10.13.0.35 failed to build an engine from "
                                 "/cache/m.onnx:\n  Error Code 4: no implementation for /attn/Einsum")


def test_a_failed_build_without_a_logged_error_says_where_to_look():
    builder = FakeBuilder(result=None)
    with pytest.raises(EngineBuildError, match="no error message; see the 'tensorrt' log records"):
        trt_builder.serialize_network(builder, builder.network, FakeConfig(), "c", Path("m.onnx"), "10",
                                      collections.deque())


# --- the whole build, composed -----------------------------------------------------------------------------


def test_build_serialized_engine_composes_the_steps(tmp_path):
    parser, builder = FakeParser(), FakeBuilder(result=b"ENGINE")
    api, logger = fake_api(builder=builder, parser=parser), object()
    timing_file = tmp_path / "timing" / "trt.cache"
    plan = BuildPlan("fp16", True)
    blob, info = trt_builder.build_serialized_engine(REQUEST, plan, Path("/cache/m.onnx"), timing_file,
                                                     api=api, logger=logger)
    assert blob == b"ENGINE" and api.loggers == [logger] and parser.parsed == ["/cache/m.onnx"]
    assert builder.network_flags == 1 << 1 and builder.config.profiling_verbosity == "verbosity:DETAILED"
    assert isinstance(builder.config.progress_monitor, FakeIProgressMonitor)
    assert timing_file.read_bytes() == b"tactic-new"  # the build's timing cache, saved
    assert info == {"build_seconds": info["build_seconds"], "tensorrt": "10.13.0.35", "plan": plan.as_dict(),
                    "onnx": "/cache/m.onnx", "engine_bytes": 6, "timing_cache": str(timing_file)}


def test_build_serialized_engine_raises_naming_the_cell_when_the_builder_returns_none(tmp_path):
    builder = FakeBuilder(result=None, log_error="out of memory", errors=trt_logging.RECENT_ERRORS)
    api = fake_api(builder=builder, parser=FakeParser())
    timing_file = tmp_path / "trt.cache"
    with pytest.raises(EngineBuildError, match=r"^tensorrt tiny-tensorrt-fp16: tensorrt 10.13.0.35 failed to build "
                                               r"an engine from m.onnx:\n  out of memory$"):
        trt_builder.build_serialized_engine(REQUEST, BuildPlan("fp16", True), Path("m.onnx"), timing_file,
                                            api=api, logger=object())
    assert not timing_file.exists()  # nothing saved from a failed build


def test_build_serialized_engine_stops_at_a_parse_error_before_building(tmp_path):
    builder = FakeBuilder()
    parser = FakeParser(ok=False, errors=[parser_error("UNSUPPORTED_NODE", 2, "/n", "Foo", "no importer")])
    with pytest.raises(EngineBuildError, match="(?s)tiny-tensorrt-fp16.*UNSUPPORTED_NODE at node 2 '/n' \\(op Foo\\)"):
        trt_builder.build_serialized_engine(REQUEST, BuildPlan("fp16", True), Path("m.onnx"), tmp_path / "t.cache",
                                            api=fake_api(builder=builder, parser=parser), logger=object())
    assert builder.built == []


def test_engine_layer_summary_reads_the_inspector_and_tolerates_its_failure():
    inspector = types.SimpleNamespace(get_engine_information=lambda fmt: (
        '{"Layers": [{"LayerType": "Convolution"}, {"LayerType": "Convolution"}]}' if fmt == "format:JSON" else ""))
    engine = types.SimpleNamespace(create_engine_inspector=lambda: inspector)
    assert trt_builder.engine_layer_summary(engine, fake_api()) == {"engine_layers": 2,
                                                                    "layer_types": {"Convolution": 2}}

    def broken():
        raise RuntimeError("no inspector")

    assert trt_builder.engine_layer_summary(types.SimpleNamespace(create_engine_inspector=broken), fake_api()) == {}
