"""Engines: export / build / cache / load / run, one folder per backend behind engines.base's protocol."""

from __future__ import annotations

from engines.base import Backend


def get_backend(name: str) -> Backend:
    """Backends import lazily so a machine without tensorrt can still run everything else."""
    if name == "torch":
        from engines.pytorch import TorchBackend

        return TorchBackend()
    if name == "onnxruntime":
        from engines.onnxrt import OnnxRuntimeBackend

        return OnnxRuntimeBackend()
    if name == "inductor":
        from engines.inductor import InductorBackend

        return InductorBackend()
    if name == "tensorrt":
        from engines.trt import TensorRTBackend

        return TensorRTBackend()
    raise ValueError(f"unknown engine {name!r}; valid: torch, onnxruntime, inductor, tensorrt")
