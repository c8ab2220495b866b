"""Models that are right where the suite used to look and wrong where it did not (issue 23, "No green over a wrong
answer"), for the hostile-input corpus (tests/selftest/test_hostile_inputs.py). Each is tiny_models.TwoInputNet
(inputs ``image`` 1x8x8 in [0, 1] and ``extra`` 3 in [-1, 1], five logits) with one mistake."""

from __future__ import annotations

import functools
from collections.abc import Callable

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
    """Right on its first calls; in half precision (torch's fp16 and bf16 cells, never the fp32 reference), from the
    5th call in a row at one batch size on it returns what it returned at the 4th, whatever its input: an output
    buffer the replay stopped writing, as a CUDA graph that no longer launches or an IO binding can leave it. Only a
    latency case, which calls it round after round, meets it; and only on a feed other than the 4th call's, which is
    why the rounds cycle through distinct feeds (issue 43): on one feed the stale output was the right one."""

    def __init__(self) -> None:
        super().__init__()
        self.repeats = 0
        self.shape: tuple[int, ...] | None = None
        self.kept: torch.Tensor | None = None

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        out = super().forward(image, extra)
        if self.fc.weight.dtype == torch.float32:
            return out
        self.repeats = self.repeats + 1 if tuple(image.shape) == self.shape else 1
        self.shape = tuple(image.shape)
        if self.repeats >= 5 and self.kept is not None:
            return self.kept.clone()
        self.kept = out.clone()
        return out


def stale_when_repeated(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return StaleWhenRepeated().eval()


class DoublesItsInput(TwoInputNet):
    """Doubles its image in place (``image.mul_(2)``), then computes: right, as its exported graph (which doubles a
    copy) is. Torch hands the runner's arrays to the module as they are, so before issue 23 the reference doubled
    the feed that ONNX Runtime then got, doubled again, and ONNX Runtime was blamed."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        image = image * 2 if torch.onnx.is_in_onnx_export() else image.mul_(2)
        return super().forward(image, extra)


def doubles_its_input(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return DoublesItsInput().eval()


class ClampsItsInput(TwoInputNet):
    """Clamps its image to [0, 0.5] in place, then computes; its exported graph clamps to [0, 0.9]: ONNX Runtime is
    wrong on every image with a pixel above 0.5. Before issue 23 the reference clamped the feed ONNX Runtime then
    got, where the engine's clamp changes nothing: green over a wrong engine."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():
            image = torch.minimum(image, torch.full_like(image, 0.9)).relu()  # clamp(0, 0.9)
        else:
            image = image.clamp_(0, 0.5)
        return super().forward(image, extra)


def clamps_its_input(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return ClampsItsInput().eval()


class VariantNet(TwoInputNet):
    """A plain attribute picks what the export computes (as ``set_swish(memory_efficient=False)`` or an attention
    implementation does): variant "v2" exports 1.5x the logits; eager PyTorch computes the same for both."""

    def __init__(self, variant: str) -> None:
        super().__init__()
        self.variant = variant

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        out = super().forward(image, extra)
        if torch.onnx.is_in_onnx_export() and self.variant == "v2":
            out = out * 1.5
        return out


def variant_v1(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return VariantNet("v1").eval()


def variant_v2(cache=None) -> torch.nn.Module:
    m = variant_v1()
    m.variant = "v2"
    return m


# ---- five more ways a factory changes the export and nothing the cache key read (issue 43, item 3) ---------------
# Each factory's "v1" exports the right logits and its "v2" 1.5x them; eager PyTorch computes the same for both, so
# only a graph built for v2 shows it. A warm cache of a v1 run used to hand v2 the v1 file: 30 passed; a fresh
# cache: 30 failed. The model digest saw none of them (a partial's keywords, a lambda's closure, a module global,
# a value below module_state's depth 4, a function outside the model's classes); the traced graph sees each.

class ExportScaledNet(TwoInputNet):
    """Under export, multiplies its logits by what ``factor()`` says: each route keeps that number somewhere else."""

    def factor(self) -> float:
        raise NotImplementedError

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        out = super().forward(image, extra)
        return out * self.factor() if torch.onnx.is_in_onnx_export() else out


def _scale(factor: float = 1.0) -> float:
    return factor


class PartialScaled(ExportScaledNet):
    """The factor is a ``functools.partial`` keyword (module_state named the partial, not its arguments)."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.scale = functools.partial(_scale, factor=factor)

    def factor(self) -> float:
        return self.scale()


def _closure(factor: float) -> Callable[[], float]:
    return lambda: factor


class ClosureScaled(ExportScaledNet):
    """The factor is a lambda's closure (module_state named the lambda by its qualified name, the same for both)."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.scale = _closure(factor)

    def factor(self) -> float:
        return self.scale()


EXPORT_FACTOR = 1.0  # set by global_scaled_v1 / _v2


class GlobalScaled(ExportScaledNet):
    """The factor is this module's global, which the factory sets (no attribute of the model holds it)."""

    def factor(self) -> float:
        return EXPORT_FACTOR


class NestedScaled(ExportScaledNet):
    """The factor is a config value five dicts deep (module_state stopped at depth 4)."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.settings = {"export": {"head": {"logits": {"scale": {"factor": factor}}}}}

    def factor(self) -> float:
        return self.settings["export"]["head"]["logits"]["scale"]["factor"]


def _seeded(make: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    torch.manual_seed(0)
    return make().eval()


def partial_scaled_v1(cache=None) -> torch.nn.Module:
    return _seeded(lambda: PartialScaled(1.0))


def partial_scaled_v2(cache=None) -> torch.nn.Module:
    return _seeded(lambda: PartialScaled(1.5))


def closure_scaled_v1(cache=None) -> torch.nn.Module:
    return _seeded(lambda: ClosureScaled(1.0))


def closure_scaled_v2(cache=None) -> torch.nn.Module:
    return _seeded(lambda: ClosureScaled(1.5))


def global_scaled_v1(cache=None) -> torch.nn.Module:
    global EXPORT_FACTOR
    EXPORT_FACTOR = 1.0
    return _seeded(GlobalScaled)


def global_scaled_v2(cache=None) -> torch.nn.Module:
    global EXPORT_FACTOR
    EXPORT_FACTOR = 1.5
    return _seeded(GlobalScaled)


def nested_scaled_v1(cache=None) -> torch.nn.Module:
    return _seeded(lambda: NestedScaled(1.0))


def nested_scaled_v2(cache=None) -> torch.nn.Module:
    return _seeded(lambda: NestedScaled(1.5))


#: The fifth route: a helper function in another file, edited between two runs. ``HELPER_MODEL`` is the model's file
#: and ``helper_source(factor)`` the helper's (written beside it as ``export_helper.py``): neither class source nor
#: attribute changes when the helper's body does.
HELPER_MODEL = """import torch

import export_helper
from tests.selftest.wrong_answer_models import ExportScaledNet


class HelperScaled(ExportScaledNet):
    def factor(self):
        return export_helper.factor()


def make(cache=None):
    torch.manual_seed(0)
    return HelperScaled().eval()
"""


def helper_source(factor: float) -> str:
    """The helper's file; its size differs between factors, so that Python never takes the old one's bytecode."""
    return f"def factor():\n    return {factor!r}  # the export's scale{'' if factor == 1.0 else ', edited'}\n"
