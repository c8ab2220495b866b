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

import importlib.metadata
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from engines.base import InputSpec
from engines.onnx.export import ONNX_FILE, export_onnx, export_options
from engines.pytorch import model_digest
from suite.cache import ArtifactCache

log = logging.getLogger(__name__)


class CalibrationData(Protocol):
    """What quantization needs of a dataset (fixtures.data.Dataset fits)."""

    feeds: dict[str, Any]

    def digest(self) -> str: ...

    def __len__(self) -> int: ...


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


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
        self._digest: str | None = None
        self._paths: dict[tuple[str, str | None, int | None], Path] = {}
        self._keys: dict[tuple[str, str | None, int | None], str] = {}

    def torch_module(self) -> torch.nn.Module:
        if self._module is None:
            from suite.preflight import make_module  # make() or make(cache), as preflight calls it

            self._module = make_module(self._factory, self.cache, self.name)
        return self._module

    def model_digest(self) -> str:
        if self._digest is None:
            self._digest = model_digest(self.torch_module())
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
            "model": self.name, "model_digest": self.model_digest(), "export": options,
            "inputs": [i.as_key() for i in self.inputs], "outputs": list(self.outputs),
            "torch": torch.__version__, "onnx": version_of("onnx"), "onnxscript": version_of("onnxscript"),
        }

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
                export_onnx(self.torch_module(), self.name, self.inputs, self.outputs, exported, options)
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
                export_onnx(self.torch_module(), self.name, self.inputs, self.outputs, d / ONNX_FILE, options)

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


def _onnx_stage(precision: str) -> str:
    """fp32 and tf32 share the fp32 file (TF32 is a math mode, not a storage type)."""
    return {"fp32": "fp32", "tf32": "fp32", "fp16": "fp16", "bf16": "bf16", "int8": "int8"}[precision]
