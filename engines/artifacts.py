"""One model's build artifacts (torch module, ONNX per precision), each built once and cached.

Why one object: ONNX Runtime and TensorRT consume the same exported, converted and quantized ONNX
files, so the export/convert/quantize chain lives here once and every key chains from the model
digest: change a weight and every downstream artifact gets a new address. A second chain starts from
ONNX Runtime's transformer fusions (``fusion="bert"``: a TorchScript export fused by
onnxruntime.transformers, then converted or quantized like the plain one), for the ONNX Runtime cells
that ask for it. Either chain may start from a static-batch export (``batch``: the batch axis fixed at one
size), one chain per batch, for the engines of a ``static_batch`` model.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from core.cache import ArtifactCache
from core.factory import make_module
from core.hashing import canonical_json
from core.inputs import InputSpec
from engines import versions
from engines.onnx.export import ONNX_FILE, TracedExport, export_onnx, export_options, trace_export
from engines.pytorch import model_digest

log = logging.getLogger(__name__)


class CalibrationData(Protocol):
    """What quantization needs of a dataset (fixtures.data.Dataset fits)."""

    feeds: dict[str, Any]

    def digest(self) -> str: ...

    def __len__(self) -> int: ...


class ModelBuild:
    """Implements engines.base.ModelArtifacts for one configured model."""

    def __init__(
        self,
        name: str,
        factory: Callable[..., torch.nn.Module],  # make() or make(cache)
        inputs: tuple[InputSpec, ...],
        outputs: tuple[str, ...],
        cache: ArtifactCache,
        calibration: Callable[[], CalibrationData] | None = None,
        int8_options: dict[str, Any] | None = None,
        export_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self._factory = factory
        self.inputs = inputs
        self.outputs = outputs
        self.cache = cache
        self._calibration = calibration
        self.int8_options = dict(int8_options or {})
        self._export_overrides = dict(export_overrides or {})  # [models.NAME.export]
        self.export_options = export_options(self._export_overrides)
        self._module: torch.nn.Module | None = None
        self._state: dict[str, Any] | None = None
        self._digest: str | None = None
        self._paths: dict[tuple[str, str | None, int | None], Path] = {}
        self._keys: dict[tuple[str, str | None, int | None], str] = {}
        self._traces: dict[str, TracedExport] = {}  # export options (JSON) -> the module's trace for them

    def torch_module(self) -> torch.nn.Module:
        if self._module is None:
            self._module = make_module(self._factory, self.cache, self.name)  # as preflight makes it
            self._state = module_state(self._module)  # as the factory made it, before any forward runs
        return self._module

    def model_digest(self) -> str:
        """The root of every cache key built from this model: its weights and architecture (engines.pytorch's
        model_digest) and its non-parameter state (``module_state``: plain attributes such as ``m.variant = "v2"``,
        hooks), as the factory made it. A plain attribute can change what the export computes while the eager outputs
        stay equal (issue 23: a warm cache reused the old ONNX and passed); it changes every key now."""
        if self._digest is None:
            module = self.torch_module()
            state = json.dumps(self._state if self._state is not None else module_state(module), sort_keys=True)
            self._digest = hashlib.sha256(f"{model_digest(module)}\n{state}".encode()).hexdigest()
        return self._digest

    def onnx_path(self, precision: str, fusion: str | None = None, batch: int | None = None) -> Path:
        stage = (_onnx_stage(precision), fusion, batch)
        if stage not in self._paths:
            parts, build, label = self._stage(*stage)
            entry = self.cache.get_or_build("onnx", parts, build, label=label)
            self._paths[stage] = entry / ONNX_FILE
            self._keys[stage] = entry.name
        return self._paths[stage]

    def onnx_key(self, precision: str, fusion: str | None = None, batch: int | None = None) -> str:
        self.onnx_path(precision, fusion, batch)
        return self._keys[(_onnx_stage(precision), fusion, batch)]

    def export_options_for(self, batch: int | None = None) -> dict[str, Any]:
        """The export options of the fp32 graph: dynamic (``self.export_options``), or fixed at ``batch``."""
        return self.export_options if batch is None else export_options(self._export_overrides, static_batch=batch)

    def _export_parts(self, options: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": self.name, "model_digest": self.model_digest(), "graph": self.traced(options).digest,
            "export": options, "inputs": [i.as_key() for i in self.inputs], "outputs": list(self.outputs),
            "torch": torch.__version__, "onnx": versions.version_of("onnx"),
            "onnxscript": versions.version_of("onnxscript"),
        }

    def traced(self, options: dict[str, Any]) -> TracedExport:
        """The module traced as the export with ``options`` traces it, once per options and session: its graph's
        digest is in the export's key, so a cached file proves it was made from the graph this module exports
        today, whatever in Python changed it (issue 43); a build exports that very trace."""
        key = canonical_json(options)
        if key not in self._traces:
            self._traces[key] = trace_export(self.torch_module(), self.name, self.inputs, self.outputs, options)
        return self._traces[key]

    def _fused_stage(self, fusion: str, batch: int | None) -> tuple[dict[str, Any], Callable[[Path], None], str]:
        """The fp32 graph ONNX Runtime's transformer optimizer fused: exported with the exporter whose graphs
        its patterns match (convert.FUSION_EXPORTER), then fused; the export itself is not kept."""
        import tempfile

        from engines.onnx.convert import FUSION_EXPORTER, fuse_transformer, fusion_parts, transformer_shape

        options = export_options({**self._export_overrides, "exporter": FUSION_EXPORTER}, static_batch=batch)
        heads, hidden = transformer_shape(self.torch_module())
        parts = {"source_export": self._export_parts(options), **fusion_parts(fusion, heads, hidden)}

        def build(d: Path) -> None:
            with tempfile.TemporaryDirectory() as tmp:
                exported = Path(tmp) / ONNX_FILE
                export_onnx(self.torch_module(), self.name, self.inputs, self.outputs, exported, options,
                            self.traced(options))
                stats = fuse_transformer(exported, d / ONNX_FILE, fusion, heads, hidden, self.name)
            log.info("%s: fused %s", self.name, stats)

        return parts, build, f"export {self.name} ({FUSION_EXPORTER}) and fuse ({fusion})"

    def _stage(self, stage: str, fusion: str | None = None,
               batch: int | None = None) -> tuple[dict[str, Any], Callable[[Path], None], str]:
        at = f" at batch {batch}" if batch is not None else ""
        if stage == "fp32" and fusion is not None:
            return self._fused_stage(fusion, batch)
        if stage == "fp32":
            options = self.export_options_for(batch)
            parts = self._export_parts(options)

            def build(d: Path) -> None:
                export_onnx(self.torch_module(), self.name, self.inputs, self.outputs, d / ONNX_FILE, options,
                            self.traced(options))

            return parts, build, f"export {self.name} to ONNX{at}"
        from engines.onnx.convert import convert_parts, convert_precision
        from engines.onnx.quantize import quantize_parts, quantize_qdq

        fused = f" ({fusion}-fused)" if fusion else ""
        if stage in ("fp16", "bf16"):
            source = self.onnx_path("fp32", fusion, batch)
            parts = convert_parts(self.onnx_key("fp32", fusion, batch), stage)

            def build(d: Path) -> None:
                convert_precision(source, d / ONNX_FILE, stage, self.name)

            return parts, build, f"convert {self.name} ONNX{fused}{at} to {stage}"
        if batch is not None:
            # The calibrator runs the graph on chunks of whatever size the data gives; a fixed batch takes one.
            raise ValueError(f"model {self.name!r}: int8 has no static-batch graph (calibration runs the graph on "
                             "chunks of any size)")
        if self._calibration is None:
            raise ValueError(f"model {self.name!r} has no calibration_dataset; int8 needs one")
        source = self.onnx_path("fp32", fusion)
        data = self._calibration()
        parts = quantize_parts(self.onnx_key("fp32", fusion), data.digest(), len(data), self.int8_options)

        def build(d: Path) -> None:
            quantize_qdq(source, d / ONNX_FILE, data.feeds, self.int8_options, self.name)

        return parts, build, f"calibrate {self.name}{fused} int8 ({self.int8_options.get('method')})"


#: nn.Module's own bookkeeping: parameters, buffers and submodules are in the weight digest and the module's repr;
#: state-dict and backward hooks change no forward. Forward hooks (and every other attribute) are module state.
_MODULE_INTERNALS = frozenset({
    "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_backward_hooks", "_backward_pre_hooks",
    "_is_full_backward_hook", "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs", "training",
})
#: Where a model was loaded from, not what it computes: a Hugging Face config's ``_name_or_path`` is the directory of
#: the installed weights (which the weight digest covers), so keying it would tie every key to one host's paths.
_PROVENANCE = frozenset({"_name_or_path", "name_or_path", "_commit_hash"})
#: Forward hooks, kept by nn.Module under their handles' ids (a process-wide counter): only the hooks themselves, in
#: order, are state.
_HOOKS = frozenset({"_forward_hooks", "_forward_pre_hooks"})


def module_state(module: torch.nn.Module) -> dict[str, Any]:
    """Every submodule's non-parameter state, as JSON-able values that are the same in every process: its plain
    attributes (``variant = "v2"``, a flag an attention implementation or ``set_swish(memory_efficient=False)``
    sets, a config object's fields, a tensor kept as a plain attribute) and its forward hooks. Functions and classes
    are named by module and qualified name, other objects by their type and attributes; never by ``repr``, which
    can hold a memory address. Keys are the submodules' names ("" the root)."""
    def value(key: str, v: Any) -> Any:
        return [_state_value(hook, 1, set()) for hook in v.values()] if key in _HOOKS else _state_value(v, 0, set())

    return {name: {k: value(k, v) for k, v in sorted(vars(sub).items()) if k not in _MODULE_INTERNALS | _PROVENANCE}
            for name, sub in module.named_modules()}


def _state_value(value: Any, depth: int, seen: set[int]) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)  # nan and inf stay comparable
    if isinstance(value, (torch.Tensor, np.ndarray)):
        array = value.detach().cpu().contiguous() if isinstance(value, torch.Tensor) else np.ascontiguousarray(value)
        flat = array.reshape(-1)
        data = flat.view(torch.uint8).numpy() if isinstance(flat, torch.Tensor) else flat.view(np.uint8)
        return {"tensor": str(array.dtype), "shape": list(array.shape), "sha256": hashlib.sha256(data).hexdigest()}
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, torch.nn.Module):  # a module kept where nn.Module does not register it (a list, a dict)
        return {"module": _qualname(type(value)), "repr": repr(value)}
    if callable(value) and hasattr(value, "__qualname__"):  # a function, method or class
        return {"callable": _qualname(value)}
    if id(value) in seen or depth >= 4:
        return {"object": _qualname(type(value))}
    seen = seen | {id(value)}
    if isinstance(value, (list, tuple)):
        return [_state_value(v, depth + 1, seen) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_state_value(v, depth + 1, seen) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        return {json.dumps(_state_value(k, depth + 1, seen), sort_keys=True): _state_value(v, depth + 1, seen)
                for k, v in value.items()}
    attributes = getattr(value, "__dict__", None)
    out: dict[str, Any] = {"object": _qualname(type(value))}
    if isinstance(attributes, dict):
        out["attributes"] = {str(k): _state_value(v, depth + 1, seen) for k, v in sorted(attributes.items())
                             if k not in _PROVENANCE}
    elif hasattr(type(value), "__members__"):  # an enum
        out["value"] = str(value)
    return out


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _onnx_stage(precision: str) -> str:
    """fp32 and tf32 share the fp32 file (TF32 is a math mode, not a storage type)."""
    return {"fp32": "fp32", "tf32": "fp32", "fp16": "fp16", "bf16": "bf16", "int8": "int8"}[precision]
