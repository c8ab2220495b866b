"""INT8 post-training quantization to a QDQ ONNX model that ONNX Runtime runs and TensorRT consumes
with explicit quantization: per-channel symmetric int8 weights, symmetric int8 activations.

Why keyed on the calibration data and not the batch size: the calibration result depends on which
rows were seen and how ranges were computed, never on how they were batched. So a changed batch size
reuses the cache, and a changed data set, size, method or option recalibrates exactly once.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from engines import versions
from engines.base import EngineBuildError
from engines.feeds import as_input_dtype

log = logging.getLogger(__name__)

#: The largest calibration chunk. Chunks are all one size (see calibration_chunk).
CALIBRATION_BATCH = 16


def quantize_parts(fp32_key: str, data_digest: str, rows: int, options: Mapping[str, Any]) -> dict[str, Any]:
    return {"source_onnx": fp32_key, "calibration_data": data_digest, "calibration_rows": rows,
            "int8": dict(options), "format": "QDQ", "activation": "int8-symmetric",
            "weights": "int8-symmetric", "bias": "float", "onnxruntime": versions.version_of("onnxruntime"),
            "revision": 1}


def calibration_chunk(rows: int, largest: int = CALIBRATION_BATCH) -> int:
    """The chunk size that splits ``rows`` into equal chunks: the largest divisor of ``rows`` not above
    ``largest`` (1 for a prime count above it).

    Why equal: ONNX Runtime's entropy and percentile calibrators stack every chunk's activations with
    ``np.asarray`` before building histograms, which fails on a short last chunk ("inhomogeneous shape").
    Dropping the remainder would calibrate on other rows than the cache key says. All three methods reduce
    over every row seen (min/max, or one histogram of all values), so the chunk size changes only speed.
    """
    if rows < 1:
        raise ValueError(f"calibration needs at least one row, got {rows}")
    return next(c for c in range(min(rows, largest), 0, -1) if rows % c == 0)


class _Reader:
    """ONNX Runtime's CalibrationDataReader over a feed dict: every row once, in equal chunks, each input in
    the ONNX graph's own dtype (float32 images, int64 token ids, bool masks)."""

    def __init__(self, feeds: Mapping[str, np.ndarray], dtypes: Mapping[str, np.dtype[Any]], where: str) -> None:
        missing = [n for n in dtypes if n not in feeds]
        if missing:
            raise ValueError(f"{where}: calibration data has inputs {sorted(feeds)}, the model needs {list(dtypes)}")
        arrays = {n: as_input_dtype(feeds[n], dtype, n, f"{where} calibration data") for n, dtype in dtypes.items()}
        rows = {n: len(a) for n, a in arrays.items()}
        if len(set(rows.values())) != 1:
            raise ValueError(f"{where}: calibration inputs disagree on their number of rows: {rows}")
        self.rows = next(iter(rows.values()))
        self.chunk = calibration_chunk(self.rows)
        self._chunks = iter([{n: a[i:i + self.chunk] for n, a in arrays.items()}
                             for i in range(0, self.rows, self.chunk)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._chunks, None)


def _input_dtypes(path: Path) -> dict[str, np.dtype[Any]]:
    """numpy dtype of each graph input (initializers listed as inputs excluded)."""
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    return {i.name: np.dtype(tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
            for i in model.graph.input if i.name not in initializers}


def quantize_qdq(src: Path, dst: Path, feeds: Mapping[str, np.ndarray], options: Mapping[str, Any],
                 model_name: str, calibration_cache: Path | None = None) -> None:
    """Calibrate on every row of ``feeds`` (any count) and write the QDQ model; only float tensors are
    quantized, so integer and bool inputs (token ids, masks) pass through unchanged. ``keep_fp32`` in ``options``:
    nodes left unquantized. ``calibration_cache``: the ranges kept in (and read back from) that file, so that a
    search over ``keep_fp32`` sets (tools/attribution_corpus.py) calibrates once."""
    from engines.ort_import import import_onnxruntime

    import_onnxruntime()  # telemetry off before the quantizer's calibration sessions
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    method = options.get("method", "minmax")
    if method not in methods:
        raise EngineBuildError(f"int8 calibration of {model_name!r}: unknown method {method!r}; "
                               f"valid: {', '.join(methods)}")
    # Biases stay float: TensorRT's explicit quantization fuses them and rejects int32 bias DQ.
    extra: dict[str, Any] = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}
    if method == "percentile":
        extra["CalibPercentile"] = float(options.get("percentile", 99.999))
    rows = len(next(iter(feeds.values())))
    try:
        reader = _Reader(feeds, _input_dtypes(src), repr(model_name))
        log.info("calibrating %s int8 (%s, %d rows in %d chunks of %d)", model_name, method, reader.rows,
                 reader.rows // reader.chunk, reader.chunk)
        with tempfile.TemporaryDirectory() as tmp:
            prepared = Path(tmp) / "prepared.onnx"
            quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
            quantize_static(
                str(prepared), str(dst), reader, quant_format=QuantFormat.QDQ,
                per_channel=bool(options.get("per_channel", True)), activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8, calibrate_method=methods[method], extra_options=extra,
                nodes_to_exclude=list(options.get("keep_fp32", ())),
                **({"calibration_cache_path": str(calibration_cache)} if calibration_cache is not None else {}),
            )
    except Exception as exc:
        raise EngineBuildError(f"int8 calibration of {model_name!r} ({method}, {rows} rows) failed: "
                               f"{type(exc).__name__}: {exc}") from exc
