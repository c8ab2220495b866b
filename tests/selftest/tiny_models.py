"""Tiny models for the machinery tests: fast to export, quantize and run on CPU."""

import torch


class TwoInputNet(torch.nn.Module):
    """Two inputs, so the feed-dict path is exercised; conv + linear, so int8 QDQ has work to do."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8 + 3, 5)

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(image)).flatten(1)
        return self.fc(torch.cat([x, extra], dim=1))


def two_input_net(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return TwoInputNet().eval()
