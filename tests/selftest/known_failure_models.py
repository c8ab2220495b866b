"""Models whose ONNX engine fails in a known way and, beside it, in another way: what a known failure must not
absorb (issue 23, item 1). Each is tiny_models.TwoInputNet (inputs ``image`` 1x8x8 in [0, 1] and ``extra`` 3 in
[-1, 1], five logits), correct in eager PyTorch (the reference) and wrong only in the exported graph."""

from __future__ import annotations

import torch

from tests.selftest.tiny_models import TwoInputNet


class OutputBGarbageWhenExported(TwoInputNet):
    """Two outputs, ``a`` and ``b``. Exported, ``a`` is scaled by 1.05 (isclose fails, nothing else: the declared
    failure) and ``b`` is negated (garbage of the right shape: cosine -1)."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> dict[str, torch.Tensor]:
        out = super().forward(image, extra)
        if torch.onnx.is_in_onnx_export():
            return {"a": out * 1.05, "b": -out}
        return {"a": out, "b": out}


def output_b_garbage_when_exported(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return OutputBGarbageWhenExported().eval()


class OutputAScaledWhenExported(TwoInputNet):
    """Two outputs, ``a`` and ``b``; exported, ``a`` is scaled by 1.05 and ``b`` is right: the declared failure
    alone."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> dict[str, torch.Tensor]:
        out = super().forward(image, extra)
        if torch.onnx.is_in_onnx_export():
            return {"a": out * 1.05, "b": out}
        return {"a": out, "b": out}


def output_a_scaled_when_exported(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return OutputAScaledWhenExported().eval()


class ShapeWhenExported(TwoInputNet):
    """Eager: (batch, 1, 5); exported: (batch, 5). One row per input row on both sides, so no OutputShapeError:
    the comparison itself meets the mismatch (a ValueError)."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        out = super().forward(image, extra)
        if torch.onnx.is_in_onnx_export():
            return out
        return out[:, None, :]


def shape_when_exported(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return ShapeWhenExported().eval()
