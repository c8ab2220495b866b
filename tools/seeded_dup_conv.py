"""A real device-side slowdown of the torch engine for a nightly sequence (issue 42): one convolution computed twice.

    SEEDED_DUP_CONV=layer3.0.conv2,features.14.conv.0.0 python -m pytest -p tools.seeded_dup_conv ...

A pytest plugin (``-p``), used by tools/gpu_sitting.sh's nights as a night's extra options; not a command. Every
torch runner whose module has one of the named submodules (dotted paths, as ``get_submodule`` takes them) computes
that convolution a second time in each forward and drops the result: the outputs are the same bits, the device
runs one more real kernel of the model's own size at every batch (in eager calls and inside the captured CUDA
graph alike), and the host launches one more. The suite's clocks time it as they time any engine; nothing is added
to a sample (``--inject-slowdown`` does that). The attribution corpus makes the same change in ONNX graphs
(engines/onnx/seeded_changes.py, "one Conv computed twice").
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from engines.pytorch.backend import TorchRunner
from suite.gate.state import gate_of

_plain_init = TorchRunner.__init__


def _twice(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> Any:
    module._conv_forward(args[0], module.weight, module.bias)  # type: ignore[operator]
    return output


def _seeded_init(self: TorchRunner, *args: Any, **kwargs: Any) -> None:
    _plain_init(self, *args, **kwargs)
    for path in filter(None, os.environ.get("SEEDED_DUP_CONV", "").split(",")):
        try:
            conv = self.module.get_submodule(path.strip())
        except AttributeError:
            continue
        if isinstance(conv, torch.nn.Conv2d) and not getattr(conv, "_seeded_twice", False):
            conv.register_forward_hook(_twice)
            conv._seeded_twice = True  # type: ignore[assignment]


@pytest.hookimpl(trylast=True)  # after the suite's gate exists
def pytest_configure(config: pytest.Config) -> None:
    """Installed when pytest loads the plugin; says so in the run's header, and records itself as a self-test knob:
    every file the run saves carries it, and none of them is then taken as a baseline (suite/gate/baselines.py)."""
    TorchRunner.__init__ = _seeded_init  # type: ignore[method-assign]
    gate = gate_of(config)
    if gate is not None:
        gate.plugin_knobs["-p tools.seeded_dup_conv"] = os.environ.get("SEEDED_DUP_CONV") or "(no conv named)"


def pytest_report_header(config: pytest.Config) -> str:
    return f"SELF-TEST: tools.seeded_dup_conv computes twice in every torch runner: {os.environ.get('SEEDED_DUP_CONV')}"
