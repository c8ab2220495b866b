"""ONNX Runtime backend: runs the shared ONNX artifact (fp32 export, fp16 conversion or int8 QDQ)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.base import CellUnavailable, EngineBuildError, EngineRequest, Feed, LoadedEngine, ModelArtifacts
from engines.feeds import check_feed
from engines.onnx.export import onnx_facts

if TYPE_CHECKING:
    import onnxruntime as ort

    from suite.cache import ArtifactCache

log = logging.getLogger(__name__)

CPU_PRECISIONS = ("fp32", "fp16", "int8")


class OnnxRuntimeRunner:
    """``InferenceSession.run`` behind the suite's ``infer(feed)`` surface."""

    def __init__(self, session: ort.InferenceSession, output_names: tuple[str, ...]) -> None:
        self.session = session
        self.input_names = tuple(i.name for i in session.get_inputs())
        self.output_names = output_names
        self._dtypes = {i.name: _numpy_dtype(i.type) for i in session.get_inputs()}

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        check_feed(feed, self.input_names)
        ort_feed = {n: np.ascontiguousarray(feed[n], dtype=self._dtypes[n]) for n in self.input_names}
        values = self.session.run(list(self.output_names), ort_feed)
        return dict(zip(self.output_names, (np.asarray(v) for v in values), strict=True))


def _numpy_dtype(ort_type: str) -> np.dtype[Any]:
    table = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(uint8)": np.uint8,
             "tensor(int8)": np.int8, "tensor(bool)": np.bool_}
    if ort_type not in table:
        raise TypeError(f"unsupported ONNX Runtime input type {ort_type}")
    return np.dtype(table[ort_type])


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def providers(self, request: EngineRequest) -> list[str]:
        if request.device == "cpu":
            return ["CPUExecutionProvider"]
        raise CellUnavailable(f"onnxruntime on device {request.device!r} arrives with the GPU tier")

    def skip_reason(self, request: EngineRequest) -> str | None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            return f"onnxruntime is not importable ({exc}); pip install onnxruntime (or onnxruntime-gpu)"
        try:
            providers = self.providers(request)
        except CellUnavailable as exc:
            return str(exc)
        missing = [p for p in providers if p not in ort.get_available_providers()]
        if missing:
            return (f"onnxruntime {ort.__version__} lacks {', '.join(missing)} "
                    f"(available: {', '.join(ort.get_available_providers())})")
        if providers == ["CPUExecutionProvider"] and request.precision not in CPU_PRECISIONS:
            why = "TF32 is a CUDA math mode" if request.precision == "tf32" else "no bf16 kernels for conv/gemm"
            return f"onnxruntime CPU execution provider has no {request.precision} path ({why})"
        return None

    def load(self, request: EngineRequest, artifacts: ModelArtifacts, cache: ArtifactCache) -> LoadedEngine:
        import onnxruntime as ort

        path = artifacts.onnx_path(request.precision)
        options = ort.SessionOptions()
        threads = request.options.get("intra_op_threads")
        if threads:
            options.intra_op_num_threads = int(threads)
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(path), options, providers=self.providers(request))
        except Exception as exc:
            text = str(exc)
            if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
                raise CellUnavailable(f"onnxruntime {ort.__version__} {self.providers(request)[0]} cannot run "
                                      f"{request.cell_id}: {text.splitlines()[0]}") from exc
            raise EngineBuildError(f"onnxruntime session for {request.cell_id} from {path} failed: {text}") from exc
        expected = [i.name for i in request.inputs]
        got = [i.name for i in session.get_inputs()]
        if got != expected:
            raise EngineBuildError(f"{request.cell_id}: ONNX inputs {got} differ from the config's {expected}")
        runner = OnnxRuntimeRunner(session, request.outputs)
        return LoadedEngine(runner=runner, facts=onnx_facts(path), artifact=path)
