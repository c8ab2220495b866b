"""Compiled PyTorch: torch.export + an AOTInductor package, built once and cached like any engine."""

from engines.inductor.backend import InductorBackend

__all__ = ["InductorBackend"]
