"""PyTorch eager backend: the reference (fp32, eval mode, no autograd, TF32 off)."""

from __future__ import annotations

import hashlib
import inspect
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from engines.base import EngineFacts, EngineRequest, Feed, LoadedEngine, ModelArtifacts
from engines.feeds import check_feed

if TYPE_CHECKING:
    from suite.cache import ArtifactCache


def model_digest(module: torch.nn.Module) -> str:
    """Hash of what determines the model's outputs: architecture source and every weight and buffer.

    Source of non-torch module classes is included so an edited ``forward`` changes the key even
    when the weights do not.
    """
    h = hashlib.sha256()
    h.update(repr(module).encode())
    sources = set()
    for sub in module.modules():
        cls = type(sub)
        if not cls.__module__.startswith("torch."):
            try:
                sources.add(inspect.getsource(cls))
            except (OSError, TypeError):
                sources.add(f"{cls.__module__}.{cls.__qualname__}")
    for src in sorted(sources):
        h.update(src.encode())
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def torch_facts(module: torch.nn.Module) -> EngineFacts:
    params = sum(p.numel() for p in module.parameters())
    state_bytes = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    leaves = sum(1 for m in module.modules() if not list(m.children()))
    return EngineFacts(artifact_bytes=state_bytes, layers=leaves, parameters=params,
                       detail={"layer_kind": "leaf modules"})


class TorchRunner:
    """Runs a module on host arrays; outputs are mapped to the configured output names."""

    def __init__(self, module: torch.nn.Module, input_names: tuple[str, ...], output_names: tuple[str, ...],
                 device: str = "cpu") -> None:
        self.module = module.eval().to(device)
        self.input_names = input_names
        self.output_names = output_names
        self.device = torch.device(device)

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        check_feed(feed, self.input_names)
        args = [torch.from_numpy(np.ascontiguousarray(feed[n])).to(self.device) for n in self.input_names]
        with torch.inference_mode():
            out = self.module(*args)
        return name_outputs(out, self.output_names)


def name_outputs(out: Any, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Map a module's return value (tensor, tuple or dict) to the configured output names."""
    if isinstance(out, torch.Tensor):
        out = (out,)
    if isinstance(out, dict):
        missing = [n for n in names if n not in out]
        if missing:
            raise ValueError(f"model returned keys {sorted(out)}, config expects {list(names)}")
        return {n: out[n].detach().float().cpu().numpy() for n in names}
    if len(out) != len(names):
        raise ValueError(f"model returned {len(out)} outputs, config names {len(names)}: {list(names)}")
    return {n: t.detach().float().cpu().numpy() for n, t in zip(names, out, strict=True)}


class TorchBackend:
    """The reference: fp32 only on CPU; reduced precisions arrive with the GPU tier."""

    name = "torch"

    def skip_reason(self, request: EngineRequest) -> str | None:
        if request.precision != "fp32":
            return (f"torch {request.precision} is not run on {request.device}: "
                    "reduced-precision torch cells belong to the GPU tier")
        return None

    def load(self, request: EngineRequest, artifacts: ModelArtifacts, cache: ArtifactCache) -> LoadedEngine:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        module = artifacts.torch_module()
        runner = TorchRunner(module, tuple(i.name for i in request.inputs), request.outputs, request.device)
        return LoadedEngine(runner=runner, facts=torch_facts(module))
