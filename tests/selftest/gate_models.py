"""A model with a known, steady latency, for the gate's end-to-end self-tests.

Why: the self-tests must show that an A/A run passes and a 5 % injected slowdown fails on any
machine, including a shared 2-core VM where a real engine's run-to-run noise is 5-10 % (measured:
docs/gating.md). Its forward spins on the wall clock for ``SPIN_S`` and then does almost nothing,
so each call takes SPIN_S plus ~0.6 ms of framework overhead whatever the CPU's speed. The gate's
behaviour on real engines is what tools/gate_calibration.py measures.
"""

import time

import torch

SPIN_S = 0.020


class SteadyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 5)

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:
            pass
        return self.fc(extra) + image.mean()


def steady_net(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return SteadyNet().eval()
