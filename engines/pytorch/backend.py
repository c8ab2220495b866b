"""PyTorch eager backend: the reference (fp32, eval mode, no autograd, TF32 off)."""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from engines.base import (
    UNSUPPORTED,
    WARM_UP_BATCHES,
    WARM_UP_IMAGE,
    WARM_UP_LAYERS,
    WARM_UP_STEM,
    CellUnavailable,
    EngineFacts,
    EngineRequest,
    LoadedEngine,
    ModelArtifacts,
)
from engines.feeds import Feed, check_feed, pick_outputs
from engines.launch_cover import LaunchCover, cycles_per_us

if TYPE_CHECKING:
    from core.cache import ArtifactCache


def _digest(module: torch.nn.Module, values: bool) -> str:
    """sha256 of the module's structure, the source of its own (non-torch) classes, each weight's name, dtype and
    shape, and (``values``) each weight's bytes."""
    h = hashlib.sha256()
    h.update(repr(module).encode())
    classes = {type(sub) for sub in module.modules()}
    sources = {_class_source(cls) for cls in classes if not cls.__module__.startswith("torch.")}
    for src in sorted(sources):
        h.update(src.encode())
    for name, tensor in module.state_dict().items():
        h.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        if values:  # the architecture digest needs no copy of the weights
            t = tensor.detach().cpu().contiguous()
            # reshape first: 0-dim tensors (BatchNorm's num_batches_tracked) cannot be viewed as bytes
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


@functools.cache
def _class_source(cls: type) -> str:
    """A module class's source, read once per class and process: inspect parses the class's whole file each time it
    is asked (a ResNet-50's 16 Bottlenecks cost 16 parses of torchvision's resnet.py), which made the start-up
    check of the GPU tier's 8 models take 14-20 s on the H100 host."""
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return f"{cls.__module__}.{cls.__qualname__}"


def model_digest(module: torch.nn.Module) -> str:
    """Hash of what determines the model's outputs: architecture source and every weight and buffer.

    Source of non-torch module classes is included so an edited ``forward`` changes the key even
    when the weights do not.
    """
    return _digest(module, values=True)


def architecture_digest(module: torch.nn.Module) -> str:
    """The same without the weights' values: equal between two runs while model_digest differs means only the
    weights changed (an unseeded factory)."""
    return _digest(module, values=False)


def layer_shapes(module: torch.nn.Module) -> frozenset[tuple[Any, ...]]:
    """The shapes of a module's convolution and linear layers (kind, channels or features, kernel, stride, groups):
    two models that share many run the same kernels, and share a process's kernel caches (suite/fleet/scheduling.py)."""
    shapes: set[tuple[Any, ...]] = set()
    for layer in module.modules():
        if isinstance(layer, torch.nn.modules.conv._ConvNd):
            shapes.add((type(layer).__name__, layer.in_channels, layer.out_channels, tuple(layer.kernel_size),
                        tuple(layer.stride), layer.groups))
        elif isinstance(layer, torch.nn.Linear):
            shapes.add(("Linear", layer.in_features, layer.out_features))
    return frozenset(shapes)


def torch_facts(module: torch.nn.Module) -> EngineFacts:
    params = sum(p.numel() for p in module.parameters())
    state_bytes = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    leaves = sum(1 for m in module.modules() if not list(m.children()))
    return EngineFacts(artifact_bytes=state_bytes, layers=leaves, parameters=params,
                       detail={"layer_kind": "leaf modules"})


_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class TorchRunner:
    """Runs a module on host arrays; outputs are mapped to the configured output names.

    The precision sets the floating weights' and inputs' dtype (fp16, bf16; integer and bool inputs
    and buffers, such as token ids, keep theirs) or the math mode (tf32: fp32 storage, TF32
    tensor-core matmuls/convolutions). TF32 flags are process-global in PyTorch, so they are set for
    each call and restored, keeping the fp32 reference's TF32 off. fp16 and bf16 leave the flags at
    PyTorch's defaults, as a deployment would: forcing cuDNN's TF32 off there
    changed nothing numerically but let it pick other kernels (see docs/gpu.md).
    """

    def __init__(self, module: torch.nn.Module, input_names: tuple[str, ...], output_names: tuple[str, ...],
                 device: str = "cpu", precision: str = "fp32", channels_last: bool = False,
                 label: str = "torch") -> None:
        self.label = label  # names the cell in output-binding errors
        self.dtype = _DTYPES[precision]
        self.tf32: bool | None = {"fp32": False, "tf32": True}.get(precision)  # None: library defaults
        self.channels_last = channels_last
        self.module = module.eval().to(device=device, dtype=self.dtype)
        if channels_last:
            self.module = self.module.to(memory_format=torch.channels_last)
        self.input_names = input_names
        self.output_names = output_names
        self.device = torch.device(device)
        #: path -> its LaunchCover (the graph path's), read by suite.timing.TimedCall for the case's record
        self.launch_covers: dict[str, LaunchCover] = {}

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        check_feed(feed, self.input_names)
        args = [self._tensor(feed[n]) for n in self.input_names]
        with self._math_mode(), torch.inference_mode():
            out = self.module(*args)
        return name_outputs(out, self.output_names, self.label)

    # ---- device-resident latency paths (GPU tier) ------------------------------------------------
    def prepare_path(self, path: str, feed: Feed) -> str:
        """Stage inputs on the device once; for ``graph``, capture one forward into a CUDA graph."""
        if self.device.type != "cuda":
            raise CellUnavailable(f"latency-{path} needs a CUDA device; torch runs on {self.device}", UNSUPPORTED)
        check_feed(feed, self.input_names)
        self._static = [self._tensor(feed[n]) for n in self.input_names]
        self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        if path == "graph":
            with self._math_mode(), torch.inference_mode():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):  # warm up allocator and cuDNN autotuning outside the capture
                        self.module(*self._static)
                torch.cuda.current_stream().wait_stream(side)
                self._graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self._graph):
                    self._graph_out = self.module(*self._static)
            torch.cuda.synchronize()
            self.launch_covers["graph"] = LaunchCover(_spin_cycles_per_us(self.device))
            return ("cuda events (torch) around a CUDA graph replay queued behind a spin: the replay's device time, "
                    "its launch hidden (engines/launch_cover.py)")
        return "cuda events (torch), inputs and outputs resident on the device"

    def restage_path(self, path: str, feed: Feed) -> None:
        """Another feed of the same shapes into the staged inputs, in place (a CUDA graph reads them at the
        addresses it was captured with), between two timed calls (suite.timing.TimedCall varies its feeds)."""
        check_feed(feed, self.input_names)
        with torch.inference_mode():
            for static, name in zip(self._static, self.input_names, strict=True):
                static.copy_(self._tensor(feed[name]))
        if self.device.type == "cuda":  # the copy done before the next timed call starts, not inside its time
            torch.cuda.synchronize(self.device)

    def run_path(self, path: str) -> float:
        """One timed call. ``graph``: a spin first (engines/launch_cover.py), so that the start event fires once the
        host has queued the replay and the end event; the eager ``model`` path keeps its launches in the time (they
        are what makes a small batch host-bound, suite/gate/bound.py)."""
        start, end = self._events
        with self._math_mode(), torch.inference_mode():
            if path == "graph":
                cover = self.launch_covers["graph"]
                queued = time.perf_counter()
                torch.cuda._sleep(cover.cycles())
                start.record()
                self._graph.replay()
                end.record()
                cover.observe(time.perf_counter() - queued)
            else:
                start.record()
                self._path_out = self.module(*self._static)
                end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3

    def path_outputs(self, path: str) -> dict[str, np.ndarray]:
        """What the last ``run_path(path)`` returned, as host arrays: the CUDA graph's static output tensors after
        its replay, or the eager call's outputs (a stale buffer must show, suite.timing.TimedCall)."""
        return name_outputs(self._graph_out if path == "graph" else self._path_out, self.output_names, self.label)

    def raw_call(self, path: str) -> Callable[[], object]:
        """The bare engine call that ``run_path`` times, for the harness-overhead self-check."""
        if path == "graph":
            return self._graph.replay
        return lambda: self.module(*self._static)

    def _math_mode(self) -> contextlib.AbstractContextManager[None]:
        return _tf32(self.tf32)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        array = np.ascontiguousarray(array)
        if not array.flags.writeable:  # a Dataset's feeds are read-only: torch.from_numpy would warn on every run
            array = np.array(array, copy=True)
        t = torch.from_numpy(array).to(self.device)
        if t.is_floating_point():
            t = t.to(self.dtype)
        if getattr(self, "channels_last", False) and t.dim() == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        return t


@functools.cache
def _spin_cycles_per_us(device: torch.device) -> float:
    """``torch.cuda._sleep``'s cycles per microsecond on ``device``, measured once per process (a spin of about a
    millisecond, timed with CUDA events)."""

    def elapsed_ms(spin: Callable[[int], None], cycles: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        spin(cycles)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    with torch.cuda.device(device):
        return cycles_per_us(torch.cuda._sleep, elapsed_ms, cycles=2_000_000)


@contextlib.contextmanager
def _tf32(enabled: bool | None) -> Iterator[None]:
    """TF32 flags are process-global in PyTorch: set them for one call, then restore (None: leave them)."""
    if enabled is None:
        yield
        return
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def name_outputs(out: Any, names: tuple[str, ...], where: str = "torch") -> dict[str, np.ndarray]:
    """A module's return value as host arrays under the configured output names, bound by
    ``engines.feeds.pick_outputs``: by key for a dict or named tuple, by position otherwise.

    Floating outputs come back as float32 (numpy has no bf16, and every engine's outputs are compared
    in fp32); integer and bool outputs keep their dtype, as ONNX Runtime and TensorRT return them.
    """
    return {n: _host_array(t, n, where) for n, t in zip(names, pick_outputs(out, names, where), strict=True)}


def _host_array(value: Any, name: str, where: str) -> np.ndarray:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where}: output {name!r} is a {type(value).__name__}, not a tensor")
    t = value.detach()
    if t.is_floating_point():
        t = t.float()
    return t.cpu().numpy()


def warm_up_pass(device: torch.device, dtype: torch.dtype, memory_format: torch.memory_format,
                 generator: torch.Generator, batch: int) -> torch.Tensor:
    """One pass of the warm-up's convolutions (engines.base WARM_UP_*) on ``batch`` random images: [batch, batch],
    the product of the stack's and the 7x7 stem's pooled features (so cuBLAS is reached too)."""
    x = torch.randn(batch, *WARM_UP_IMAGE, generator=generator).to(device, dtype, memory_format=memory_format)

    def conv(h: torch.Tensor, layer: tuple[int, int, int, int, int]) -> torch.Tensor:
        cin, cout, k, stride, groups = layer
        w = (torch.randn(cout, cin // groups, k, k, generator=generator) * 0.1).to(device, dtype)
        return torch.relu(torch.nn.functional.conv2d(h, w, stride=stride, padding=k // 2, groups=groups))

    h = x
    for layer in WARM_UP_LAYERS:
        h = conv(h, layer)
    return h.mean((2, 3)) @ conv(x, WARM_UP_STEM).mean((2, 3)).T


class TorchBackend:
    """PyTorch eager. fp32 (TF32 off) is the reference; fp16/bf16 cast weights and inputs; tf32 is
    CUDA-only (a tensor-core math mode); int8 has no eager engine and is judged on the others."""

    name = "torch"

    def unsupported_reason(self, request: EngineRequest) -> str | None:
        if request.precision == "int8":
            return "torch eager has no int8 engine; int8 is judged on onnxruntime and tensorrt (QDQ model)"
        if request.device == "cpu" and request.precision == "tf32":
            return "TF32 is a CUDA tensor-core math mode; there is no CPU path"
        return None

    def skip_reason(self, request: EngineRequest) -> str | None:
        if request.device == "cpu":
            return None
        if not torch.cuda.is_available():
            return f"torch {torch.__version__} sees no CUDA device for {request.device}"
        major, minor = torch.cuda.get_device_capability(torch.device(request.device))
        if request.precision in ("tf32", "bf16") and major < 8:
            return f"{request.precision} needs compute capability >= 8.0; {request.device} has {major}.{minor}"
        return None

    def warm_up(self, device: str) -> None:
        """What a process pays once before its first CUDA modules run, paid ahead: the CUDA context, cuDNN's and
        cuBLAS's libraries and handles, and the kernels of the convolution kinds the vision models run
        (engines.base WARM_UP_*, as ONNX Runtime's warm-up), in fp32 (TF32 off, as the fp32 cells) and fp16, in
        both memory formats (``channels_last`` is an engine option), at each of WARM_UP_BATCHES, on real values.
        Nothing is kept; nothing is timed."""
        if not device.startswith("cuda"):
            return
        dev = torch.device(device)
        generator = torch.Generator().manual_seed(0)
        with torch.inference_mode(), _tf32(False):
            for dtype in (torch.float32, torch.float16):
                for memory_format in (torch.contiguous_format, torch.channels_last):
                    for batch in WARM_UP_BATCHES:
                        warm_up_pass(dev, dtype, memory_format, generator, batch).sum().item()
        torch.cuda.synchronize(dev)

    def load(self, request: EngineRequest, artifacts: ModelArtifacts, cache: ArtifactCache) -> LoadedEngine:
        module = artifacts.torch_module()
        if request.precision != "fp32" or request.device != "cpu":
            module = copy.deepcopy(module)  # the fp32 CPU module stays the reference for exports
        runner = TorchRunner(module, tuple(i.name for i in request.inputs), request.outputs, request.device,
                             request.precision, channels_last=bool(request.options.get("channels_last", False)),
                             label=request.cell_id)
        return LoadedEngine(runner=runner, facts=torch_facts(runner.module))
