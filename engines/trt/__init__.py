"""TensorRT backend: ONNX -> serialized engine (cached) -> TensorRTRunner, on the TensorRT 10/11 Python API.

Importing this package never imports tensorrt or cuda-python; ``TensorRTBackend.skip_reason`` says why a
cell cannot run here (tensorrt missing, no CUDA device, precision unsupported by the GPU).
"""

from engines.trt.backend import TensorRTBackend
from engines.trt.runner import TensorRTRunner
from engines.trt.settings import BuildPlan, engine_cache_parts, plan_build

__all__ = ["BuildPlan", "TensorRTBackend", "TensorRTRunner", "engine_cache_parts", "plan_build"]
