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

from engines.base import EngineBuildError

log = logging.getLogger(__name__)

CALIBRATION_BATCH = 16


def quantize_parts(fp32_key: str, data_digest: str, rows: int, options: Mapping[str, Any]) -> dict[str, Any]:
    from engines.artifacts import version_of

    return {"source_onnx": fp32_key, "calibration_data": data_digest, "calibration_rows": rows,
            "int8": dict(options), "format": "QDQ", "activation": "int8-symmetric",
            "weights": "int8-symmetric", "bias": "float", "onnxruntime": version_of("onnxruntime"), "revision": 1}


class _Reader:
    """ONNX Runtime's CalibrationDataReader over a feed dict, in fixed chunks."""

    def __init__(self, feeds: Mapping[str, np.ndarray]) -> None:
        n = len(next(iter(feeds.values())))
        self._chunks = iter([{k: np.ascontiguousarray(v[i:i + CALIBRATION_BATCH], dtype=np.float32)
                              for k, v in feeds.items()} for i in range(0, n, CALIBRATION_BATCH)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._chunks, None)


def quantize_qdq(src: Path, dst: Path, feeds: Mapping[str, np.ndarray], options: Mapping[str, Any],
                 model_name: str) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    method = options.get("method", "minmax")
    # Biases stay float: TensorRT's explicit quantization fuses them and rejects int32 bias DQ.
    extra: dict[str, Any] = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}
    if method == "percentile":
        extra["CalibPercentile"] = float(options.get("percentile", 99.999))
    rows = len(next(iter(feeds.values())))
    log.info("calibrating %s int8 (%s, %d rows)", model_name, method, rows)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            prepared = Path(tmp) / "prepared.onnx"
            quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
            quantize_static(
                str(prepared), str(dst), _Reader(feeds), quant_format=QuantFormat.QDQ,
                per_channel=bool(options.get("per_channel", True)), activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8, calibrate_method=methods[method], extra_options=extra,
            )
    except Exception as exc:
        raise EngineBuildError(f"int8 calibration of {model_name!r} ({method}, {rows} rows) failed: "
                               f"{type(exc).__name__}: {exc}") from exc
