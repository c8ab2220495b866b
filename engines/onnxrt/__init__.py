"""ONNX Runtime: CPU execution provider now; CUDA and TensorRT execution providers plug in here."""

from engines.onnxrt.backend import OnnxRuntimeBackend, OnnxRuntimeRunner

__all__ = ["OnnxRuntimeBackend", "OnnxRuntimeRunner"]
