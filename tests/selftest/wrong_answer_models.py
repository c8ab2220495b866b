"""Models that are right where the suite used to look and wrong where it did not (issue 23, "No green over a wrong
answer"), for the hostile-input corpus (tests/selftest/test_hostile_inputs.py). Each is tiny_models.TwoInputNet
(inputs ``image`` 1x8x8 in [0, 1] and ``extra`` 3 in [-1, 1], five logits) with one mistake."""

from __future__ import annotations

import torch

from tests.selftest.tiny_models import TwoInputNet


class WrongFromBatch40(TwoInputNet):
    """Right in eager PyTorch (the reference); the exported graph (ONNX Runtime's engines) returns 1.5x the logits
    for a batch of 40 rows or more (beyond generated parity's batch 32). The batch is counted with tensor ops, so a
    dynamic-batch export computes it per call and a static-batch export at 40 or more is wrong at every call: a
    1.5x-wrong engine at one batch."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        out = super().forward(image, extra)
        if torch.onnx.is_in_onnx_export():
            rows = torch.ones_like(extra[:, 0]).sum()
            out = out * torch.where(rows >= 40, 1.5, 1.0)
        return out


def wrong_from_batch_40(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return WrongFromBatch40().eval()


class StaleWhenRepeated(TwoInputNet):
    """Right on every new input; in half precision (torch's fp16 and bf16 cells, never the fp32 reference), from
    the 5th consecutive call with the same input on it returns zeros: an output buffer the replay stopped writing,
    as a CUDA graph or an IO binding can leave it. Parity feeds each input once, so only a latency case, which
    calls it round after round on one feed, meets it: its first timed round is right, its last is not."""

    def __init__(self) -> None:
        super().__init__()
        self.repeats = 0
        self.previous: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        out = super().forward(image, extra)
        if self.fc.weight.dtype == torch.float32:
            return out
        same = self.previous is not None and all(a.shape == b.shape and torch.equal(a, b)
                                                 for a, b in zip(self.previous, (image, extra), strict=True))
        self.repeats = self.repeats + 1 if same else 1
        self.previous = (image.clone(), extra.clone())
        return torch.zeros_like(out) if self.repeats >= 5 else out


def stale_when_repeated(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return StaleWhenRepeated().eval()
