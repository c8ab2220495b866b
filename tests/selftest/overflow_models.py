"""Models whose activations overflow float16 (max 65504) in one known layer, for the localization self-tests.

Every weight is fixed (seeded), inputs are drawn from [-1, 1]: the fp32 reference stays finite everywhere, and
the named layer's output reaches ~1e5 in magnitude, so any engine that *computes* that layer in fp16 gets inf
there, and NaN/inf in everything after it.
"""

from __future__ import annotations

import torch

FEATURES = 16
HIDDEN = 32
CLASSES = 4
#: fp16's largest finite value: every overflowing layer below is built to exceed it on ordinary inputs.
FP16_MAX = 65504.0


class OverflowMLP(torch.nn.Module):
    """``blowup`` (a Linear with large weights) overflows fp16 and feeds a LayerNorm: in fp32 the LayerNorm
    brings it back to O(1), in fp16 it is already inf (and the LayerNorm turns it into NaN)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.fc1 = torch.nn.Linear(FEATURES, HIDDEN)
        self.act = torch.nn.ReLU()
        self.blowup = torch.nn.Linear(HIDDEN, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, CLASSES)
        with torch.no_grad():
            for layer in (self.fc1, self.head):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) / layer.in_features**0.5)
                layer.bias.zero_()
            # |outputs| ~ 1e5: each output sums ~16 positive ReLU activations of ~0.5 times weights of 2e4.
            signs = torch.where(torch.randn(HIDDEN, HIDDEN, generator=g) > 0, 1.0, -1.0)
            self.blowup.weight.copy_(2.0e4 * signs)
            self.blowup.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blowup(self.act(self.fc1(x)))))


class LayerNormOverflow(torch.nn.Module):
    """``norm`` (a LayerNorm with a gain of 4e4) overflows fp16: its normalized values of ~±2 times the gain
    exceed 65504; ``norm2`` brings the fp32 values back to O(1), and turns fp16's inf into NaN.

    LayerNormalization (and Max, ReLU's ONNX form) are among the few ops ONNX Runtime's CPU EP has fp16 kernels
    for, and a run of them stays in fp16 there (an isolated one is moved to fp32 with the Casts around it), so
    this ``norm`` really computes in fp16 on the CPU EP; the Linears (Gemm, no fp16 kernel) do not."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.fc1 = torch.nn.Linear(FEATURES, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.act = torch.nn.ReLU()
        self.norm2 = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, CLASSES)
        with torch.no_grad():
            for layer in (self.fc1, self.head):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) / layer.in_features**0.5)
                layer.bias.zero_()
            self.norm.weight.fill_(4.0e4)
            self.norm.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm2(self.act(self.norm(self.fc1(x)))))


def overflow_mlp(cache: object = None) -> torch.nn.Module:
    return OverflowMLP().eval()


def layernorm_overflow(cache: object = None) -> torch.nn.Module:
    return LayerNormOverflow().eval()


class ConvNet(torch.nn.Module):
    """Not an overflow model: a small convolutional net for the optimization-bisect test, whose convolutions
    ONNX Runtime's CPU EP swaps for NCHWc kernels at ORT_ENABLE_LAYOUT/ALL (another summation order)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.fc(x.mean((2, 3)))


def conv_net(cache: object = None) -> torch.nn.Module:
    return ConvNet().eval()


def overflow_mlp_unlocalizable() -> OverflowMLP:
    """``overflow_mlp`` in a process whose localizer crashes (engines.localize.localize raises), for the test
    that a parity failure keeps its own message when the diagnosis of it fails."""
    import engines.localize

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected: the localizer crashed")

    engines.localize.localize = crash  # type: ignore[assignment]
    return overflow_mlp()
