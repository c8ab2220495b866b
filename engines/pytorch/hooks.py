"""Every named module's output, captured with forward hooks, for the torch engine's per-layer localization.

The engine side is the cell's own ``TorchRunner`` (weights and inputs cast to fp16/bf16, the precision's math
mode); the reference side is the fp32 module in a ``TorchRunner`` at fp32 (TF32 off). Hooks fire when a module
returns, so the capture order (children before their parent, in execution order) is a topological order of
the outputs. A module called more than once (a shared encoder) gives one row per call: ``name#2``, ``name#3``.
Functional ops inside ``forward`` (``torch.relu(...)``, ``x.exp()``) are not modules and are not seen.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engines.pytorch.backend import TorchRunner

#: The root module's row (the model's output).
ROOT = "(model)"


@dataclass(frozen=True)
class ModuleOutput:
    name: str
    op_type: str  # the module's class name
    value: np.ndarray  # float32 (a half-precision output is widened exactly; inf stays inf)


@contextmanager
def capture_outputs(module: torch.nn.Module) -> Iterator[list[ModuleOutput]]:
    """Within the block, every forward of ``module`` or one of its named submodules appends its output to the
    yielded list (the first floating tensor of a tuple/list/dict output)."""
    captured: list[ModuleOutput] = []
    calls: dict[str, int] = {}
    handles = []

    def hook_for(name: str) -> Any:
        def hook(mod: torch.nn.Module, args: Any, output: Any) -> None:
            tensor = _first_float_tensor(output)
            if tensor is None:
                return
            calls[name] = calls.get(name, 0) + 1
            label = name if calls[name] == 1 else f"{name}#{calls[name]}"
            captured.append(ModuleOutput(label, type(mod).__name__, tensor.detach().float().cpu().numpy()))

        return hook

    try:
        for name, sub in module.named_modules():
            handles.append(sub.register_forward_hook(hook_for(name or ROOT)))
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def run_captured(runner: TorchRunner, feed: Mapping[str, np.ndarray]) -> list[ModuleOutput]:
    """``runner.infer(feed)`` with every module's output captured."""
    with capture_outputs(runner.module) as captured:
        runner.infer(feed)
    return captured


def torch_layer_pairs(reference: torch.nn.Module, feed: Mapping[str, np.ndarray], precision: str,
                      input_names: Sequence[str], output_names: Sequence[str], device: str = "cpu",
                      channels_last: bool = False) -> tuple[list[tuple[str, str, np.ndarray, np.ndarray]], list[str]]:
    """(name, class, fp32 output, engine output) per module call in execution order, and the calls seen on one
    side only. The reference module is copied, never modified."""
    ref_runner = TorchRunner(copy.deepcopy(reference), tuple(input_names), tuple(output_names), device, "fp32")
    engine_runner = TorchRunner(copy.deepcopy(reference), tuple(input_names), tuple(output_names), device, precision,
                                channels_last=channels_last)
    ref = run_captured(ref_runner, feed)
    eng = {m.name: m for m in run_captured(engine_runner, feed)}
    pairs, unmatched = [], []
    for m in ref:
        other = eng.pop(m.name, None)
        if other is None or other.value.shape != m.value.shape:
            unmatched.append(m.name)
            continue
        pairs.append((m.name, m.op_type, m.value, other.value))
    unmatched.extend(eng)
    return pairs, unmatched


def _first_float_tensor(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output if output.is_floating_point() else None
    if isinstance(output, Mapping):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        for item in output:
            found = _first_float_tensor(item)
            if found is not None:
                return found
    return None
