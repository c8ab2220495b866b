"""Models whose forward fails the way a full GPU does, for the resource-error self-tests (test_lifetime.py):
``RESOURCE_FAILURE`` picks the shape of the failure at batch 4 (the preflight's smoke forward runs at 2)."""

from __future__ import annotations

import os

import torch

from engines.base import UNSUPPORTED, CellUnavailable
from tests.selftest.tiny_models import TwoInputNet


class FailsLikeAFullGpu(TwoInputNet):
    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        if image.shape[0] == 4:
            oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")
            if os.environ.get("RESOURCE_FAILURE") == "as-unsupported":  # what the old ORT graph path did with it
                raise CellUnavailable("latency-graph: cannot capture this model", UNSUPPORTED) from oom
            raise oom
        return super().forward(image, extra)


def fails_like_a_full_gpu(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return FailsLikeAFullGpu().eval()
