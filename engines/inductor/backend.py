"""AOTInductor engine: ``torch.export`` with a dynamic batch axis, compiled into a ``.pt2`` package.

Why AOTInductor rather than ``torch.compile``: the package is an artifact like a TensorRT plan,
built once, stored in the engine cache under a key that includes the torch version and the device,
and loaded without recompiling, so its cost is paid once and its result can be judged.
"""

from __future__ import annotations

import copy
import logging
import platform
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engines.base import (
    CellUnavailable,
    EngineBuildError,
    EngineFacts,
    EngineRequest,
    Feed,
    LoadedEngine,
    ModelArtifacts,
)
from engines.onnx.export import sample_inputs
from engines.pytorch.backend import _DTYPES, TorchRunner

if TYPE_CHECKING:
    from suite.cache import ArtifactCache

log = logging.getLogger(__name__)

PACKAGE = "model.pt2"
PRECISIONS = ("fp32", "fp16", "bf16")


def _device_identity(device: str) -> dict[str, Any]:
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(index)
        return {"gpu": torch.cuda.get_device_name(index), "cc": f"{major}.{minor}", "cuda": torch.version.cuda}
    return {"cpu": platform.processor() or platform.machine(), "machine": platform.machine()}


class InductorRunner(TorchRunner):
    """The loaded package behind eager torch's surface: ``infer`` and the device paths are inherited,
    only construction differs (the package is already compiled for its device and dtype)."""

    def __init__(self, compiled: Any, input_names: tuple[str, ...], output_names: tuple[str, ...],
                 device: str, precision: str) -> None:
        self.dtype = _DTYPES[precision]
        self.tf32 = False
        self.module = compiled
        self.input_names = input_names
        self.output_names = output_names
        self.device = torch.device(device)
        self.channels_last = False

    def prepare_path(self, path: str, feed: Feed) -> str:
        if path == "graph":
            raise CellUnavailable("latency-graph: capturing a loaded AOTInductor package in a CUDA graph "
                                  "invalidates the capture (seen on H200, torch 2.11); not measured")
        return super().prepare_path(path, feed)


def _check_loads_in_child(package: Path, request: EngineRequest) -> None:
    """Load the fresh package in a child process first: a package that crashes the loader (seen once
    as a segfault on an H200) must fail its own cell, not end the whole test session."""
    code = ("import sys, torch; m = torch._inductor.aoti_load_package(sys.argv[1]); "
            "print('loaded', type(m).__name__)")
    proc = subprocess.run([sys.executable, "-c", code, str(package)], capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise EngineBuildError(f"{request.cell_id}: the AOTInductor package does not load ({how}): "
                               + " | ".join(tail))


class InductorBackend:
    name = "inductor"

    def skip_reason(self, request: EngineRequest) -> str | None:
        chosen = tuple(request.options.get("precisions", ("fp32",)))
        if request.precision not in PRECISIONS or request.precision not in chosen:
            return (f"inductor runs {', '.join(chosen)} here (engine_options.inductor.precisions; possible: "
                    f"{', '.join(PRECISIONS)}): each package is a long compile")
        if request.device.startswith("cuda") and not torch.cuda.is_available():
            return f"torch {torch.__version__} sees no CUDA device for {request.device}"
        if not hasattr(torch._inductor, "aoti_compile_and_package"):
            return f"torch {torch.__version__} has no AOTInductor packaging (torch._inductor.aoti_compile_and_package)"
        return None

    def load(self, request: EngineRequest, artifacts: ModelArtifacts, cache: ArtifactCache) -> LoadedEngine:
        parts = {"model_digest": artifacts.model_digest(), "precision": request.precision,
                 "profile": request.profile.as_dict(), "inputs": [vars(i) for i in request.inputs],
                 "outputs": list(request.outputs), "torch": torch.__version__,
                 "device": _device_identity(request.device), "options": dict(request.options)}

        def build(directory: Path) -> None:
            self._compile(request, artifacts, directory / PACKAGE)
            _check_loads_in_child(directory / PACKAGE, request)

        entry = cache.get_or_build("inductor", parts, build, label=f"inductor {request.cell_id}")
        package = entry / PACKAGE
        try:
            compiled = torch._inductor.aoti_load_package(str(package))
        except Exception as exc:
            raise EngineBuildError(f"{request.cell_id}: loading AOTInductor package {package} failed: {exc}") from exc
        runner = InductorRunner(compiled, tuple(i.name for i in request.inputs), request.outputs, request.device,
                                request.precision)
        module = artifacts.torch_module()
        facts = EngineFacts(artifact_bytes=package.stat().st_size,
                            layers=sum(1 for m in module.modules() if not list(m.children())),
                            parameters=sum(p.numel() for p in module.parameters()),
                            detail={"layer_kind": "leaf modules of the exported model"})
        return LoadedEngine(runner=runner, facts=facts, artifact=package)

    def _compile(self, request: EngineRequest, artifacts: ModelArtifacts, package: Path) -> None:
        dtype = _DTYPES[request.precision]
        module = copy.deepcopy(artifacts.torch_module()).to(device=request.device, dtype=dtype).eval()
        batch = max(2, min(request.profile.opt_batch, 8))
        args = tuple(t.to(request.device, dtype) for t in sample_inputs(request.inputs, batch))
        dim = torch.export.Dim("batch", min=max(1, request.profile.min_batch), max=request.profile.max_batch)
        import inspect

        names = [p for p in inspect.signature(module.forward).parameters][: len(args)]
        log.info("inductor: exporting and compiling %s (this takes a while)", request.cell_id)
        try:
            with warnings.catch_warnings(), torch.inference_mode():
                warnings.simplefilter("ignore")
                exported = torch.export.export(module, args, dynamic_shapes={n: {0: dim} for n in names})
                torch._inductor.aoti_compile_and_package(exported, package_path=str(package))
        except Exception as exc:
            raise EngineBuildError(f"{request.cell_id}: torch.export/AOTInductor failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
