"""PyTorch eager: the fp32 reference every other engine is judged against."""

from engines.pytorch.backend import TorchBackend, TorchRunner, architecture_digest, model_digest

__all__ = ["TorchBackend", "TorchRunner", "architecture_digest", "model_digest"]
