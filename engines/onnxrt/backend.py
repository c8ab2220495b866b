"""ONNX Runtime backend: runs the shared ONNX artifact (fp32 export, fp16 conversion or int8 QDQ), or, with
``transformer_fusion``, the same chain started from ONNX Runtime's transformer fusions (Attention,
SkipLayerNormalization, BiasGelu...: how BERT-class models are deployed on ONNX Runtime)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.base import (
    UNSUPPORTED,
    WARM_UP_BATCHES,
    WARM_UP_IMAGE,
    WARM_UP_LAYERS,
    WARM_UP_STEM,
    CellUnavailable,
    EngineBuildError,
    EngineRequest,
    LoadedEngine,
    ModelArtifacts,
    static_batch_engine,
)
from engines.feeds import Feed, as_input_dtype, check_feed
from engines.onnx.export import onnx_facts
from engines.onnxrt.kernel_registry import no_compute_kernels
from engines.ort_import import import_onnxruntime
from metrics.node_profile import node_times_us

if TYPE_CHECKING:
    import onnxruntime as ort

    from core.cache import ArtifactCache

log = logging.getLogger(__name__)

class OnnxRuntimeRunner:
    """``InferenceSession.run`` behind the suite's ``infer(feed)`` surface.

    ``graph_session`` (CUDA EP only) makes a second session with ``enable_cuda_graph``, whose IO-bound
    runs replay one captured CUDA graph: the ``latency-graph`` path.
    """

    def __init__(self, session: ort.InferenceSession, output_names: tuple[str, ...],
                 graph_session: Callable[[], ort.InferenceSession] | None = None, label: str = "onnxruntime",
                 profiling_session: Callable[[str], ort.InferenceSession] | None = None) -> None:
        self.label = label  # names the cell in feed errors
        self.session = session
        self._profiling_session = profiling_session
        self.input_names = tuple(i.name for i in session.get_inputs())
        self.output_names = output_names
        self._dtypes = {i.name: _numpy_dtype(i.type) for i in session.get_inputs()}
        self._graph_session = graph_session
        #: where the last ``prepare_path`` spent its seconds (suite.timing.TimedCall keeps them with the case): a
        #: graph case makes a session of its own, and its first runs search cuDNN's algorithms again
        self.prepare_parts: dict[str, float] = {}
        # path -> (session, binding, the bound device values: kept alive, at fixed addresses, while timed)
        self._bound: dict[str, tuple[ort.InferenceSession, ort.IOBinding, list[ort.OrtValue]]] = {}

    def _ort_feed(self, feed: Feed) -> dict[str, np.ndarray]:
        """The feed checked against the session's inputs, each in the dtype the session declares."""
        check_feed(feed, self.input_names)
        return {n: as_input_dtype(feed[n], self._dtypes[n], n, self.label) for n in self.input_names}

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        values = self.session.run(list(self.output_names), self._ort_feed(feed))
        return dict(zip(self.output_names, (np.asarray(v) for v in values), strict=True))

    def node_profile(self, feed: Feed, runs: int, warmup: int = 2) -> dict[str, float]:
        """Each node's median kernel time (us) over ``runs`` runs of ``feed`` after ``warmup``, from ONNX Runtime's
        profiler (metrics/node_profile.py), in a session of its own made like the timed one: profiling adds its own
        cost, so it never runs inside a timed case. The session and its file are gone when this returns."""
        if self._profiling_session is None:
            raise RuntimeError(f"{self.label}: made without a profiling session")
        ort_feed = self._ort_feed(feed)
        with tempfile.TemporaryDirectory(prefix="ort-profile-") as tmp:
            session = self._profiling_session(os.path.join(tmp, "profile"))
            for _ in range(warmup + runs):
                session.run(list(self.output_names), ort_feed)
            with open(session.end_profiling(), encoding="utf-8") as f:
                events = json.load(f)
            del session
        return node_times_us(events, skip_runs=warmup)

    # ---- device-resident latency paths (GPU tier): IO binding, and a CUDA graph replay ------------
    def prepare_path(self, path: str, feed: Feed) -> str:
        """Bind inputs and outputs as device OrtValues once; each run then moves no data to or from host.

        ``graph``: the same on a session built with ``enable_cuda_graph``; ONNX Runtime captures the graph
        in its first runs, and its replay must give the plain session's outputs, or the case fails.
        """
        if path not in ("model", "graph"):
            raise CellUnavailable(f"latency-{path}: onnxruntime has no such path", UNSUPPORTED)
        providers = self.session.get_providers()
        if "CUDAExecutionProvider" not in providers and "TensorrtExecutionProvider" not in providers:
            raise CellUnavailable(f"latency-{path} needs a CUDA execution provider; the session runs on {providers}",
                                  UNSUPPORTED)
        if path == "graph" and self._graph_session is None:
            raise CellUnavailable(f"latency-graph: the suite captures ONNX Runtime CUDA graphs with the CUDA EP only; "
                                  f"this session runs on {providers}", UNSUPPORTED)
        check_feed(feed, self.input_names)
        device_id = int(self.session.get_provider_options().get("CUDAExecutionProvider", {}).get("device_id", 0))
        started = time.perf_counter()
        binding, values, outputs = self._bind(self.session, feed, device_id, None)
        bound = time.perf_counter()
        self.prepare_parts = {"bind and run the plain session": bound - started}
        clock = "host perf_counter around run_with_iobinding (returns after the CUDA stream synchronizes)"
        if path == "model":
            self._bound[path] = (self.session, binding, values)
            return clock
        ort = import_onnxruntime()

        assert self._graph_session is not None
        try:
            session = self._graph_session()
        except Exception as exc:  # a failure, never "unsupported": out of memory looked the same (issue 22)
            raise EngineBuildError(f"latency-graph: onnxruntime {ort.__version__} could not make the CUDA-graph "
                                   f"session of {self.label}: {str(exc).splitlines()[0]}") from exc
        made = time.perf_counter()
        graph_outputs = [ort.OrtValue.ortvalue_from_shape_and_type(v.shape(), _numpy_dtype(v.data_type()), "cuda",
                                                                    device_id) for v in outputs]
        graph_binding, graph_values, _ = self._bind(session, feed, device_id, graph_outputs)
        for _ in range(3):  # ONNX Runtime runs a few times before it captures; then every run is a replay
            session.run_with_iobinding(graph_binding)
        self.prepare_parts.update({"make the graph session": made - bound,
                                   "its first runs and the capture": time.perf_counter() - made})
        for name, plain, replayed in zip(self.output_names, outputs, graph_outputs, strict=True):
            want, got = plain.numpy(), replayed.numpy()
            if not np.allclose(got, want, rtol=1e-3, atol=1e-3, equal_nan=False):
                diff = float(np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                raise RuntimeError(f"latency-graph: the CUDA graph replay's {name!r} differs from the plain "
                                   f"session's (max abs difference {diff:.3g}); its timing would mean nothing")
        self._bound[path] = (session, graph_binding, graph_values)
        return clock + ", CUDA graph replay (enable_cuda_graph)"

    def _bind(self, session: ort.InferenceSession, feed: Feed, device_id: int,
              outputs: list[ort.OrtValue] | None,
              ) -> tuple[ort.IOBinding, list[ort.OrtValue], list[ort.OrtValue]]:
        """Inputs copied to the device once; outputs bound to the given device OrtValues, or to ones that
        one run allocates. Returns the binding, every bound value, and the output values."""
        ort = import_onnxruntime()

        binding = session.io_binding()
        inputs = [ort.OrtValue.ortvalue_from_numpy(as_input_dtype(feed[n], self._dtypes[n], n, self.label),
                                                   "cuda", device_id) for n in self.input_names]
        for name, value in zip(self.input_names, inputs, strict=True):
            binding.bind_ortvalue_input(name, value)
        fill = outputs is None
        if outputs is None:
            for name in self.output_names:
                binding.bind_output(name, "cuda", device_id)
            session.run_with_iobinding(binding)  # one run gives each output's shape and type
            # Device values this runner owns, sized while the binding still holds its own: onnxruntime-gpu 1.28
            # crashed (SIGSEGV in OrtValue.data_type, H100, 2026-11-26) on a value kept past clear_binding_outputs.
            outputs = [ort.OrtValue.ortvalue_from_shape_and_type(v.shape(), _numpy_dtype(v.data_type()), "cuda",
                                                                 device_id) for v in binding.get_outputs()]
            binding.clear_binding_outputs()
        for name, value in zip(self.output_names, outputs, strict=True):
            binding.bind_ortvalue_output(name, value)
        if fill:
            session.run_with_iobinding(binding)  # the owned outputs hold this feed's results, as before
        return binding, inputs + outputs, outputs

    def restage_path(self, path: str, feed: Feed) -> None:
        """Another feed of the same shapes copied into the bound input values in place (a CUDA graph replays at the
        addresses it captured: ``OrtValue.update_inplace`` exists for it), between two timed runs."""
        check_feed(feed, self.input_names)
        _, _, values = self._bound[path]  # the inputs, then the outputs (_bind)
        for name, value in zip(self.input_names, values[:len(self.input_names)], strict=True):
            value.update_inplace(np.ascontiguousarray(as_input_dtype(feed[name], self._dtypes[name], name,
                                                                     self.label)))

    def run_path(self, path: str) -> float:
        session, binding, _ = self._bound[path]
        start = time.perf_counter()
        session.run_with_iobinding(binding)
        return time.perf_counter() - start

    def path_outputs(self, path: str) -> dict[str, np.ndarray]:
        """The bound output OrtValues after the last ``run_path(path)``, copied to host arrays: what the timed IO-bound
        run (or CUDA graph replay) left there, stale or not (suite.timing.TimedCall)."""
        _, _, values = self._bound[path]
        outputs = values[len(self.input_names):]
        return {name: np.asarray(value.numpy()) for name, value in zip(self.output_names, outputs, strict=True)}

    def raw_call(self, path: str) -> Callable[[], object]:
        """The bare engine call that ``run_path`` times, for the harness-overhead self-check."""
        session, binding, _ = self._bound[path]
        return lambda: session.run_with_iobinding(binding)


def _numpy_dtype(ort_type: str) -> np.dtype[Any]:
    table = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
             "tensor(int8)": np.int8, "tensor(uint64)": np.uint64, "tensor(uint32)": np.uint32,
             "tensor(uint16)": np.uint16, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
    if ort_type not in table:
        raise TypeError(f"unsupported ONNX Runtime input type {ort_type}")
    return np.dtype(table[ort_type])


EXECUTION_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                       "tensorrt": "TensorrtExecutionProvider"}
PRECISIONS_BY_EP = {"cpu": ("fp32", "fp16", "int8"), "cuda": ("fp32", "tf32", "fp16", "bf16", "int8"),
                    "tensorrt": ("fp32", "fp16", "int8")}
_WHY_NOT = {("cpu", "tf32"): "TF32 is a CUDA math mode", ("cpu", "bf16"): "no bf16 kernels for conv/gemm",
            ("tensorrt", "tf32"): "the TensorRT EP exposes no TF32 switch",
            ("tensorrt", "bf16"): "the TensorRT EP exposes no bf16 switch"}


def transformer_fusion(request: EngineRequest) -> str | None:
    """``engine_options.onnxruntime.transformer_fusion``: the optimizer's model type (``"bert"``), or None."""
    fusion = request.options.get("transformer_fusion")
    return None if fusion is None else str(fusion)


def onnx_file(request: EngineRequest, artifacts: ModelArtifacts) -> Any:
    """The ONNX file an onnxruntime cell runs: the precision's graph (the fp32 one for the TensorRT EP's fp16,
    which it takes as a flag), from the fused chain when the cell asks for transformer fusion, exported with its
    batch fixed for a static-batch profile (a static cell's request: its engine at the opt batch). The one rule,
    for the session and for whatever inspects what the session runs."""
    on_trt_fp16 = execution_provider(request) == "tensorrt" and request.precision == "fp16"
    precision = "fp32" if on_trt_fp16 else request.precision
    batch = request.profile.onnx_batch
    if batch is None:  # the dynamic graph, asked for as it always was (ModelArtifacts without a batch argument)
        return artifacts.onnx_path(precision, transformer_fusion(request))
    return artifacts.onnx_path(precision, transformer_fusion(request), batch)


def trt_profile_options(request: EngineRequest) -> dict[str, str]:
    """The TensorRT EP's explicit optimization profile (min/opt/max shape of every input, batch and named axes),
    so that it builds one engine for the configured ranges instead of one per new shape it meets; for a
    static-batch profile, that of its engine (min = opt = max = the batch)."""
    profile = request.profile.engine_profile()
    shapes = {spec.name: profile.shapes(spec) for spec in request.inputs}

    def option(which: int) -> str:
        return ",".join(f"{name}:{'x'.join(map(str, s[which]))}" for name, s in shapes.items())

    return {"trt_profile_min_shapes": option(0), "trt_profile_opt_shapes": option(1),
            "trt_profile_max_shapes": option(2)}


def no_spinning(options: Any) -> None:
    """A GPU execution provider's session: its CPU thread pools sleep when idle instead of spinning. ONNX Runtime's
    pool threads spin for work after every run by default; on a GPU EP they have almost none, and the spin takes CPU
    time from the thread that launches the next run, which is what a host-bound case times (issue 42). The CPU EP
    keeps spinning: there the pool is the engine."""
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")


def execution_provider(request: EngineRequest) -> str:
    """``engine_options.onnxruntime.execution_provider``: cpu | cuda | tensorrt (default: by device)."""
    ep = str(request.options.get("execution_provider", "cpu" if request.device == "cpu" else "cuda"))
    if ep not in EXECUTION_PROVIDERS:
        raise ValueError(f"{request.cell_id}: execution_provider {ep!r}; valid: {', '.join(EXECUTION_PROVIDERS)}")
    return ep


def _warm_up_model(precision: str = "fp32") -> bytes:
    """The warm-up's graph (engines.base WARM_UP_*), x [batch,3,64,64] -> y [batch,64] (the stack's pooled features)
    and s [batch,64] (the 7x7 stem's), in fp32 or fp16 (the element types the cells run their convolutions in). The toy
    graph before it (one 3-channel convolution on 16x16) cost 0.1 s, and a worker's first real session still paid
    about 7 s more than a later one (docs/gpu.md, the eighth sitting): ONNX Runtime's exhaustive algorithm search
    on these convolutions pays 2-3.5 s of that ahead (the ninth sitting)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    dtype, elem = (np.float16, TensorProto.FLOAT16) if precision == "fp16" else (np.float32, TensorProto.FLOAT)
    rng = np.random.default_rng(0)
    weights: list[Any] = []
    nodes: list[Any] = []

    def conv(x: str, out: str, layer: tuple[int, int, int, int, int]) -> str:
        cin, cout, k, stride, group = layer
        w = (rng.standard_normal((cout, cin // group, k, k)) * 0.1).astype(dtype)
        weights.append(numpy_helper.from_array(w, f"{out}_w"))
        nodes.append(helper.make_node("Conv", [x, f"{out}_w"], [f"{out}_c"], pads=[k // 2] * 4,
                                      strides=[stride, stride], group=group))
        nodes.append(helper.make_node("Relu", [f"{out}_c"], [out]))
        return out

    def pooled(x: str, out: str) -> None:
        nodes.append(helper.make_node("GlobalAveragePool", [x], [f"{out}_p"]))
        nodes.append(helper.make_node("Flatten", [f"{out}_p"], [out]))

    h = "x"
    for i, layer in enumerate(WARM_UP_LAYERS):
        h = conv(h, f"l{i}", layer)
    pooled(h, "y")
    pooled(conv("x", "stem", WARM_UP_STEM), "s")
    batch, channels = "batch", WARM_UP_LAYERS[-1][1]
    graph = helper.make_graph(
        nodes, "warm_up", [helper.make_tensor_value_info("x", elem, [batch, *WARM_UP_IMAGE])],
        [helper.make_tensor_value_info("y", elem, [batch, channels]),
         helper.make_tensor_value_info("s", elem, [batch, WARM_UP_STEM[1]])], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _device_id(device: str) -> int:
    return int(device.partition(":")[2] or 0)


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def providers(self, request: EngineRequest, cache: ArtifactCache | None = None,
                  onnx_key: str | None = None) -> list[Any]:
        """TF32 is off for the fp32 reference only; other precisions keep the CUDA EP's default (on), as
        deployed: with it off, fp16 ResNet-50 ran 5.6 % slower on an H200 (28.3 vs 26.7 ms at batch 256). ``cache`` and
        ``onnx_key`` (the cache key of the file the session runs): where the TensorRT EP keeps its engines."""
        ep = execution_provider(request)
        if ep == "cpu":
            return ["CPUExecutionProvider"]
        if request.device == "cpu":
            raise CellUnavailable(f"the {EXECUTION_PROVIDERS[ep]} needs a CUDA device: run with --device cuda:0")
        cuda = ("CUDAExecutionProvider", {"device_id": _device_id(request.device),
                                          "use_tf32": int(request.precision != "fp32")})
        if ep == "cuda":
            return [cuda]
        trt_options: dict[str, Any] = {"device_id": _device_id(request.device),
                                       "trt_fp16_enable": request.precision == "fp16",
                                       "trt_int8_enable": request.precision == "int8",
                                       **trt_profile_options(request)}
        if cache is not None:
            if onnx_key is None:
                raise ValueError(f"{request.cell_id}: the TensorRT EP's engine cache needs the ONNX file's key")
            trt_options.update(trt_engine_cache_enable=True, trt_timing_cache_enable=True,
                               trt_engine_cache_path=str(self.trt_cache_dir(request, cache, onnx_key)))
        return [("TensorrtExecutionProvider", trt_options), cuda]

    def trt_cache_dir(self, request: EngineRequest, cache: ArtifactCache, onnx_key: str) -> Any:
        """The TensorRT EP writes its own engines; give each configuration and each ONNX file (by its cache key) its
        own directory. ONNX Runtime's documentation asks for the engine cache to be cleaned when the model changes:
        the EP's engine names do not promise to tell two files apart (each is model.onnx here), so a directory per
        configuration alone could hand a model whose weights or export changed the old file's engine (issue 43)."""
        ort = import_onnxruntime()

        from core.hashing import digest

        parts = {"ort": ort.__version__, "precision": request.precision, "device": request.device,
                 "profile": request.profile.as_dict(), "model": request.model,
                 "profile_shapes": trt_profile_options(request), "onnx": onnx_key}
        path = cache.root / "ort-tensorrt" / digest(parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def unsupported_reason(self, request: EngineRequest) -> str | None:
        try:
            ep = execution_provider(request)
        except ValueError as exc:
            return str(exc)
        if ep != "cpu" and request.device == "cpu":
            return f"the {EXECUTION_PROVIDERS[ep]} needs a CUDA device: run with --device cuda:0"
        if request.precision not in PRECISIONS_BY_EP[ep]:
            why = _WHY_NOT.get((ep, request.precision), "not supported")
            return f"onnxruntime {EXECUTION_PROVIDERS[ep]} has no {request.precision} path ({why})"
        if ep == "tensorrt" and transformer_fusion(request):
            return ("transformer_fusion makes ONNX Runtime contrib operators (Attention, SkipLayerNormalization) that "
                    "the TensorrtExecutionProvider does not take: fused graphs run on the CPU and CUDA EPs")
        return None

    def predicted_precision_not_run(self, request: EngineRequest) -> str | None:
        """Before anything is built: why a plainly exported cell would compute nothing in its precision here (the
        execution provider's kernel registry, engines/onnxrt/kernel_registry.py), or None. A fused graph's contrib
        ops are not predicted; the precision census of the built engine decides those."""
        try:
            ep = execution_provider(request)
        except ValueError:
            return None
        return None if transformer_fusion(request) else no_compute_kernels(ep, request.precision)

    def skip_reason(self, request: EngineRequest) -> str | None:
        try:
            ort = import_onnxruntime()
        except ImportError as exc:
            return f"onnxruntime is not importable ({exc}); pip install onnxruntime (or onnxruntime-gpu)"
        try:
            providers = self.providers(request)
        except (CellUnavailable, ValueError) as exc:
            return str(exc)
        names = [p if isinstance(p, str) else p[0] for p in providers]
        missing = [p for p in names if p not in ort.get_available_providers()]
        if missing:
            return (f"onnxruntime {ort.__version__} lacks {', '.join(missing)} "
                    f"(available: {', '.join(ort.get_available_providers())})")
        return None

    def warm_up(self, device: str) -> None:
        """What a process pays once before its first CUDA EP sessions (the provider's library, cuDNN and cuBLAS
        loaded and their handles made, the exhaustive search's kernels loaded and built), paid ahead on the
        warm-up graph in fp32 (TF32 off, as the fp32 cells) and in fp16, with the CUDA EP's options as a cell
        gets them, at each of WARM_UP_BATCHES. The sessions are dropped; nothing is timed."""
        if not device.startswith("cuda"):
            return
        ort = import_onnxruntime()
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return  # the cells say why (skip_reason); a warm-up has nothing to pay ahead
        options = ort.SessionOptions()
        options.log_severity_level = 3
        for precision in ("fp32", "fp16"):
            providers = [("CUDAExecutionProvider", {"device_id": _device_id(device),
                                                    "use_tf32": int(precision != "fp32")})]
            session = ort.InferenceSession(_warm_up_model(precision), options, providers=providers)
            if "CUDAExecutionProvider" not in session.get_providers():  # ONNX Runtime fell back to the CPU quietly
                raise EngineBuildError(f"the CUDA EP did not start for the warm-up (session runs on "
                                       f"{session.get_providers()})")
            rng, dtype = np.random.default_rng(0), np.float16 if precision == "fp16" else np.float32
            for batch in WARM_UP_BATCHES:  # ONNX Runtime searches the algorithms again at each new shape
                session.run(None, {"x": rng.standard_normal((batch, *WARM_UP_IMAGE)).astype(dtype)})

    def load(self, request: EngineRequest, artifacts: ModelArtifacts, cache: ArtifactCache) -> LoadedEngine:
        if request.profile.per_batch:  # static_batch: one session per batch, each on its fixed-batch graph
            return static_batch_engine(
                request.profile, lambda profile: self.load(replace(request, profile=profile), artifacts, cache),
                request.cell_id)
        ort = import_onnxruntime()

        ep = execution_provider(request)
        # The TensorRT EP takes precision as a flag on the fp32 graph (int8: the QDQ graph).
        path = onnx_file(request, artifacts)
        threads = request.options.get("intra_op_threads")

        def session_options(profile_prefix: str | None = None) -> ort.SessionOptions:
            options = ort.SessionOptions()
            if threads:
                options.intra_op_num_threads = int(threads)
            if ep != "cpu":
                no_spinning(options)
            options.log_severity_level = 3
            if profile_prefix is not None:
                options.enable_profiling = True
                options.profile_file_prefix = profile_prefix
            return options

        options = session_options()
        providers = self.providers(request, cache, path.parent.name)  # the file's entry: its key
        try:
            session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:  # a missing kernel fails too: what an engine lacks by design is declared
            # (PRECISIONS_BY_EP, unsupported_reason), never read from an exception, which out of memory also is
            raise EngineBuildError(f"onnxruntime {ort.__version__} {EXECUTION_PROVIDERS[ep]} session for "
                                   f"{request.cell_id} from {path} failed: {exc}") from exc
        active = session.get_providers()
        if EXECUTION_PROVIDERS[ep] not in active:
            raise EngineBuildError(f"{request.cell_id}: asked for {EXECUTION_PROVIDERS[ep]}, session runs on {active}")
        expected = [i.name for i in request.inputs]
        got = [i.name for i in session.get_inputs()]
        if got != expected:
            raise EngineBuildError(f"{request.cell_id}: ONNX inputs {got} differ from the config's {expected}")
        graph_session = None
        if ep == "cuda":
            cuda_name, cuda_options = providers[0]
            graph_providers = [(cuda_name, {**cuda_options, "enable_cuda_graph": "1"})]
            graph_session = lambda: ort.InferenceSession(str(path), options, providers=graph_providers)
        runner = OnnxRuntimeRunner(session, request.outputs, graph_session, label=request.cell_id,
                                   profiling_session=lambda prefix: ort.InferenceSession(
                                       str(path), session_options(prefix), providers=providers))
        facts = onnx_facts(path)
        return LoadedEngine(runner=runner, facts=replace(facts, detail={**facts.detail, "providers": active}),
                            artifact=path)
