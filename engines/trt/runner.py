"""TensorRT runner: host arrays in, host arrays out, through the TensorRT 10 tensor-name API.

Per call: validate the feed, ``set_input_shape`` for every input, (re)allocate device buffers only when a
tensor outgrows its buffer, ``set_tensor_address`` for every I/O tensor, copy inputs host->device on the
runner's stream, ``execute_async_v3``, copy outputs device->host, synchronize.

For device-resident latency work: ``stage(feed)`` uploads once; ``launch_staged()`` only enqueues the
execution on ``runner.stream`` (wrap it in an ``engines.cuda.runtime.EventTimer``); ``run_staged()`` is
launch + synchronize; ``staged_outputs()`` copies the last staged results to the host.

Not thread-safe: one runner per thread. The CUDA device is the one current when the runner was made.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from engines.base import UNSUPPORTED, CellUnavailable, ShapeProfile
from engines.cuda.runtime import DeviceBuffer, EventTimer, Releasable, Stream
from engines.feeds import Feed, as_input_dtype, check_feed
from engines.trt.settings import TensorSpec, check_feed_shapes

if TYPE_CHECKING:
    import tensorrt as trt

log = logging.getLogger(__name__)


def dims_tuple(dims: Any) -> tuple[int, ...]:
    """A TensorRT ``Dims`` (or any sized, indexable shape) as a tuple of ints."""
    return tuple(int(dims[i]) for i in range(len(dims)))


def numpy_dtype(engine: trt.ICudaEngine, name: str) -> np.dtype[Any]:
    """numpy dtype of an engine I/O tensor (``trt.nptype``); TypeError for types numpy lacks (bf16, fp8)."""
    import tensorrt as trt

    trt_dtype = engine.get_tensor_dtype(name)
    nptype = cast("Callable[[trt.DataType], Any]", trt.nptype)  # untyped in tensorrt-stubs
    try:
        dtype: np.dtype[Any] = np.dtype(nptype(trt_dtype))
    except TypeError as exc:
        raise TypeError(f"engine tensor {name!r} has TensorRT type {trt_dtype}, which numpy cannot hold; "
                        "export the model with fp32 (or fp16) inputs and outputs") from exc
    return dtype


def _profile_range(engine: trt.ICudaEngine, name: str,
                   is_input: bool) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(min, max) shape of an input in optimization profile 0: the range every axis (batch, sequence length)
    was built for; (None, None) for an output."""
    if not is_input:
        return None, None
    low, _opt, high = engine.get_tensor_profile_shape(name, 0)
    return dims_tuple(low), dims_tuple(high)


class TensorRTRunner(Releasable):
    """Runs one deserialized ``trt.ICudaEngine`` (optimization profile 0) on its own CUDA stream."""

    def __init__(
        self,
        engine: trt.ICudaEngine,
        *,
        profile: ShapeProfile,
        runtime: trt.Runtime | None = None,
        output_names: Sequence[str] | None = None,
        label: str = "tensorrt",
    ) -> None:
        import tensorrt as trt

        self.engine = engine
        self._runtime = runtime  # TensorRT wants the runtime to outlive the engines it deserialized
        self.profile = profile
        self.label = label
        context = engine.create_execution_context()
        if context is None:
            raise RuntimeError(f"{label}: TensorRT could not create an execution context (out of device memory?)")
        self.context: trt.IExecutionContext = context

        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        shape_inputs = [n for n in inputs if getattr(engine, "is_shape_inference_io", lambda _n: False)(n)]
        if shape_inputs:
            raise NotImplementedError(f"{label}: shape-tensor inputs {shape_inputs} are not supported by this runner")
        if output_names:
            unknown = [n for n in output_names if n not in outputs]
            if unknown:
                raise ValueError(f"{label}: outputs {unknown} are not engine outputs; engine outputs are {outputs}")
        self.input_names: tuple[str, ...] = tuple(inputs)
        self.output_names: tuple[str, ...] = tuple(output_names) if output_names else tuple(outputs)
        self._engine_outputs = tuple(outputs)  # every output needs an address, returned or not
        self._specs = {n: TensorSpec(n, dims_tuple(engine.get_tensor_shape(n)), numpy_dtype(engine, n),
                                     *_profile_range(engine, n, n in inputs)) for n in names}
        self.stream = Stream()
        self._buffers: dict[str, DeviceBuffer] = {}
        self._staged: dict[str, tuple[int, ...]] | None = None
        self._closed = False

    # -- binding ----------------------------------------------------------------------------------------

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(self._specs[n] for n in self.input_names)

    def _buffer(self, name: str, nbytes: int) -> DeviceBuffer:
        """The device buffer of ``name``, reused when large enough, else replaced by a larger one."""
        buf = self._buffers.get(name)
        if buf is not None and buf.nbytes >= nbytes:
            return buf
        if buf is not None:
            buf.free()
        buf = DeviceBuffer(nbytes)
        self._buffers[name] = buf
        return buf

    def _bind(self, feed: Feed) -> tuple[dict[str, np.ndarray], dict[str, tuple[int, ...]]]:
        """Validate the feed, set input shapes and every I/O address; returns contiguous inputs, output shapes.

        Inputs are converted to the engine tensor's own dtype (engines.feeds.as_input_dtype): int64 token
        ids into an int32 engine input when every id fits, never a float into an integer or bool input.
        Host arrays, device buffers and output arrays are all sized and typed from the engine's dtypes.
        """
        check_feed(feed, self.input_names)
        typed = {n: as_input_dtype(feed[n], self._specs[n].dtype, n, self.label) for n in self.input_names}
        check_feed_shapes(typed, self.input_specs, self.profile.min_batch, self.profile.max_batch)
        arrays = {n: np.ascontiguousarray(typed[n]) for n in self.input_names}
        for name, array in arrays.items():
            if not self.context.set_input_shape(name, tuple(int(d) for d in array.shape)):
                raise ValueError(f"{self.label}: TensorRT rejected shape {array.shape} for input {name!r} "
                                 f"(engine shape {self._specs[name].shape}, profile {self.profile.as_dict()})")
        out_shapes: dict[str, tuple[int, ...]] = {}
        for name in self._engine_outputs:
            shape = dims_tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise NotImplementedError(f"{self.label}: output {name!r} has a data-dependent shape {shape}; "
                                          "this runner needs output shapes known from the input shapes")
            out_shapes[name] = shape
        for name in (*self.input_names, *self._engine_outputs):
            if name in arrays:
                nbytes = arrays[name].nbytes
            else:
                nbytes = math.prod(out_shapes[name]) * self._specs[name].dtype.itemsize
            buf = self._buffer(name, nbytes)
            if not self.context.set_tensor_address(name, buf.ptr):
                raise RuntimeError(f"{self.label}: set_tensor_address failed for {name!r}")
        return arrays, out_shapes

    def _launch(self) -> None:
        if not self.context.execute_async_v3(self.stream.handle):
            raise RuntimeError(f"{self.label}: execute_async_v3 failed; see the 'tensorrt' log records above")

    def _download(self, out_shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        outputs = {n: np.empty(out_shapes[n], dtype=self._specs[n].dtype) for n in self.output_names}
        for name, array in outputs.items():
            self._buffers[name].copy_to_host_async(array, self.stream)
        return outputs

    # -- the Runner protocol ------------------------------------------------------------------------------

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        """Host arrays in, host arrays out (copies included: the practitioners' "latency-all" path)."""
        self._staged = None
        arrays, out_shapes = self._bind(feed)
        for name, array in arrays.items():
            self._buffers[name].copy_from_host_async(array, self.stream)
        self._launch()
        outputs = self._download(out_shapes)
        self.stream.synchronize()  # also keeps `arrays` alive until their copies are done
        return outputs

    # -- device-resident pieces for latency work ------------------------------------------------------------

    def stage(self, feed: Feed) -> None:
        """Bind and upload ``feed`` once; later ``launch_staged`` / ``run_staged`` calls reuse it on the device."""
        self._staged = None
        arrays, out_shapes = self._bind(feed)
        for name, array in arrays.items():
            self._buffers[name].copy_from_host_async(array, self.stream)
        self.stream.synchronize()
        self._staged = out_shapes

    def launch_staged(self) -> None:
        """Enqueue one execution of the staged feed on ``self.stream``; no copies, no synchronize."""
        if self._staged is None:
            raise RuntimeError(f"{self.label}: call stage(feed) before launch_staged()/run_staged()")
        self._launch()

    def run_staged(self) -> None:
        """One execution of the staged feed, waited for (no host<->device copies)."""
        self.launch_staged()
        self.stream.synchronize()

    def staged_outputs(self) -> dict[str, np.ndarray]:
        """Copy the outputs of the last staged execution to the host."""
        if self._staged is None:
            raise RuntimeError(f"{self.label}: nothing is staged")
        outputs = self._download(self._staged)
        self.stream.synchronize()
        return outputs

    def prepare_path(self, path: str, feed: Feed) -> str:
        """The suite's latency-model path: stage once, then time launches with CUDA events on our stream."""
        if path != "model":
            raise CellUnavailable(f"latency-{path}: CUDA-graph capture of execute_async_v3 is not built yet "
                                  "for the tensorrt runner", UNSUPPORTED)
        self.stage(feed)
        self._timer = EventTimer()
        return "cuda events (cuda.bindings) on the runner's stream around execute_async_v3"

    def restage_path(self, path: str, feed: Feed) -> None:
        """Another feed uploaded into the bound input buffers, between two timed launches."""
        self.stage(feed)

    def run_path(self, path: str) -> float:
        self._timer.start(self.stream)
        self.launch_staged()
        self._timer.stop(self.stream)
        return self._timer.elapsed_ms() / 1e3

    # -- lifetime -------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Free device buffers and the stream (after waiting for pending work); idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._staged = None
        try:
            self.stream.synchronize()
        finally:
            for buf in self._buffers.values():
                buf.free()
            self._buffers = {}
            self.stream.destroy()

    _release = close
