"""Every cache-key builder, field by field: changing one input that changes the artifact changes its key, and
nothing else does. A key that misses a field hands a stale artifact to a run after exactly the upgrade the suite
exists to catch (the export without the torch version, the fp16 conversion without onnxruntime's, the int8 model
without its calibration data's digest: three hand mutations the earlier tests let live, issue 23).

No artifact is built here: a recording cache gives every entry its address (the key's digest, as ArtifactCache
does) and never calls the build. Versions are monkeypatched where the builders look them up, so the keys are
those of a fixed, made-up environment. The TensorRT engine's key is tested the same way in test_trt_settings.py.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

import engines.artifacts as artifacts_module
import engines.inductor.backend as inductor
import engines.onnx.convert as convert
import engines.onnx.quantize as quantize
import engines.versions as versions_module
from core.hashing import digest
from core.inputs import AxisRange, InputSpec
from engines.artifacts import ModelBuild
from engines.base import EngineRequest, ShapeProfile
from engines.onnx.export import TracedExport
from engines.onnxrt.backend import OnnxRuntimeBackend
from engines.versions import version_of

pytestmark = pytest.mark.selftest

VERSIONS = {"onnx": "1.17.0", "onnxscript": "0.5.4", "onnxruntime": "1.20.1"}
TORCH = "2.9.0+cpu"
GRAPH = "graph-1"
INPUTS = (InputSpec("x", (4,)),)
OUTPUTS = ("y",)


class RecordingCache:
    """get_or_build as ArtifactCache addresses it (ROOT/KIND/digest({"kind": KIND, **parts})), recording the
    parts and never building."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.parts: dict[str, dict[str, Any]] = {}

    def get_or_build(self, kind: str, parts: dict[str, Any], build: Callable[[Path], None],
                     label: str | None = None) -> Path:
        key = digest({"kind": kind, **parts})
        self.parts[key] = parts
        return self.root / kind / key


class CalibrationSet:
    def __init__(self, digest_: str = "data-1", rows: int = 16) -> None:
        self._digest, self._rows = digest_, rows
        self.feeds = {"x": np.zeros((rows, 4), np.float32)}

    def digest(self) -> str:
        return self._digest

    def __len__(self) -> int:
        return self._rows


def _linear(seed: int = 0) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        torch.manual_seed(seed)
        return torch.nn.Linear(4, 2)

    return make


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The export's trace, replaced by a recorder of its arguments whose graph digest is GRAPH: these tests move
    the other fields, on inputs no module need fit. The graph's own tests trace for real (test_graph_digest.py:
    torch.export in a forked mutmut child hangs, so they stay out of the mutation gate's selection)."""
    calls: list[tuple[Any, ...]] = []

    def trace(*args: Any) -> TracedExport:
        calls.append(args)
        return TracedExport(GRAPH)

    monkeypatch.setattr(artifacts_module, "trace_export", trace)
    return calls


@pytest.fixture
def versions(monkeypatch: pytest.MonkeyPatch, traces: list[tuple[Any, ...]]) -> dict[str, str]:
    """The versions every key reads, fixed; a test changes one entry to move one field. An unknown
    distribution is "absent", as version_of says for a missing one. The trace is the recorder ``traces``."""
    table = dict(VERSIONS)
    monkeypatch.setattr(versions_module, "version_of", lambda dist: table.get(dist, "absent"))
    monkeypatch.setattr(torch, "__version__", TORCH)
    return table


def _build(tmp_path: Path, name: str = "tiny", factory: Callable[[], torch.nn.Module] | None = None,
           inputs: tuple[InputSpec, ...] = INPUTS, outputs: tuple[str, ...] = OUTPUTS,
           calibration: Any = CalibrationSet, int8_options: dict[str, Any] | None = None,
           export_overrides: dict[str, Any] | None = None) -> ModelBuild:
    return ModelBuild(name, factory or _linear(), inputs, outputs, RecordingCache(tmp_path),  # type: ignore[arg-type]
                      calibration=calibration, int8_options=int8_options or {"method": "minmax"},
                      export_overrides=export_overrides)


def _keys(build: ModelBuild, fusion: str | None = None) -> dict[str, str]:
    """The key of every precision's ONNX file (tf32 shares fp32's)."""
    return {p: build.onnx_key(p, fusion) for p in ("fp32", "fp16", "bf16", "int8")}


# =========================================================================== the export (fp32) and its chain


def test_equal_builds_give_equal_keys_and_each_precision_its_own(tmp_path: Path, versions: dict[str, str]) -> None:
    keys = _keys(_build(tmp_path))
    assert keys == _keys(_build(tmp_path))
    assert len(set(keys.values())) == 4, keys
    assert _build(tmp_path).onnx_key("tf32") == keys["fp32"]  # TF32 is a math mode of the fp32 file


@pytest.mark.parametrize("change", [
    "torch", "onnx", "onnxscript", "name", "weights", "inputs-shape", "inputs-dtype", "inputs-range", "inputs-axes",
    "outputs", "opset", "exporter", "sample_batch",
])
def test_every_field_of_the_export_changes_its_key_and_every_key_after_it(
        tmp_path: Path, versions: dict[str, str], monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """The export's key holds the model (name, digest of code and weights), its inputs and outputs, the export
    options and the versions of torch, onnx and onnxscript; fp16, bf16 and int8 chain from it."""
    before = _keys(_build(tmp_path))
    kwargs: dict[str, Any] = {}
    if change == "torch":
        monkeypatch.setattr(torch, "__version__", "2.10.0+cpu")
    elif change in ("onnx", "onnxscript"):
        versions[change] = "9.9.9"
    elif change == "name":
        kwargs["name"] = "tiny2"
    elif change == "weights":
        kwargs["factory"] = _linear(seed=1)
    elif change == "inputs-shape":
        kwargs["inputs"] = (InputSpec("x", (5,)),)
    elif change == "inputs-dtype":
        kwargs["inputs"] = (InputSpec("x", (4,), dtype="float16"),)
    elif change == "inputs-range":
        kwargs["inputs"] = (InputSpec("x", (4,), low=-1.0),)
    elif change == "inputs-axes":
        kwargs["inputs"] = (InputSpec("x", ("n",), axes=(("n", AxisRange(1, 4, 8)),)),)
    elif change == "outputs":
        kwargs["outputs"] = ("z",)
    elif change == "opset":
        kwargs["export_overrides"] = {"opset": 17}
    elif change == "exporter":
        kwargs["export_overrides"] = {"exporter": "torchscript"}
    else:
        kwargs["export_overrides"] = {"sample_batch": 4}
    after = _keys(_build(tmp_path, **kwargs))
    for precision in before:
        assert after[precision] != before[precision], (change, precision)


def test_the_export_key_holds_exactly_these_fields(tmp_path: Path, versions: dict[str, str],
                                                  traces: list[tuple[Any, ...]]) -> None:
    """What the export is keyed on, spelled out: a field dropped from the key, or a version read from the wrong
    distribution, shows here by name. The graph is the trace of this module for these options, made once."""
    build = _build(tmp_path)
    parts = build.cache.parts[build.onnx_key("fp32")]  # type: ignore[attr-defined]
    _keys(build)
    assert traces == [(build.torch_module(), "tiny", INPUTS, OUTPUTS, build.export_options)]
    assert build.onnx_key("fp32", batch=4) and traces[-1][-1] == build.export_options_for(4)
    assert parts == {
        "model": "tiny", "model_digest": build.model_digest(), "graph": GRAPH, "export": build.export_options,
        "inputs": [INPUTS[0].as_key()], "outputs": ["y"],
        "torch": TORCH, "onnx": VERSIONS["onnx"], "onnxscript": VERSIONS["onnxscript"],
    }
    assert build.export_options == {"opset": 18, "exporter": "dynamo", "sample_batch": 2, "revision": 2}


def test_a_static_batch_export_is_keyed_per_batch(tmp_path: Path, versions: dict[str, str]) -> None:
    build = _build(tmp_path, export_overrides={"opset": 17})
    dynamic, four, eight = (build.onnx_key("fp32", batch=b) for b in (None, 4, 8))
    assert len({dynamic, four, eight}) == 3
    assert build.onnx_key("fp32", batch=4) == four
    assert len({build.onnx_key("fp16", batch=b) for b in (None, 4, 8)}) == 3
    parts = build.cache.parts[four]  # type: ignore[attr-defined]
    assert parts["export"]["static_batch"] == 4 and parts["export"]["sample_batch"] == 4
    assert parts["export"]["opset"] == 17  # the model's own export options hold at every batch
    with pytest.raises(ValueError, match=r"^model 'tiny': int8 has no static-batch graph \(calibration runs the graph "
                                         r"on chunks of any size\)$"):
        build.onnx_key("int8", batch=4)


def test_versions_are_read_from_the_imported_modules() -> None:
    """The keys above monkeypatch version_of; here it is the real one: the version of the module as imported."""
    import onnxruntime

    assert version_of("onnx") == importlib.metadata.version("onnx") == onnx.__version__
    assert version_of("onnxruntime") == onnxruntime.__version__
    assert version_of("no_such_module_xyz") == "absent"


def test_a_version_is_the_modules_then_its_distributions_then_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module with no (or an empty) ``__version__`` is its distribution's version; with neither, "absent"."""
    import sys
    import types

    real = importlib.metadata.version

    def version(dist: str) -> str:
        if dist == "fake_mod_with_dist":
            return "1.2.3"
        if dist in ("fake_mod_bare", "fake_mod_empty"):
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    for name, attrs in (("fake_mod_with_dist", {}), ("fake_mod_bare", {}), ("fake_mod_empty", {"__version__": ""}),
                        ("fake_mod_own", {"__version__": "4.5.6"})):
        module = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)
    assert version_of("fake_mod_own") == "4.5.6"
    assert version_of("fake_mod_with_dist") == "1.2.3"
    assert version_of("fake_mod_bare") == "absent"
    assert version_of("fake_mod_empty") == "absent"  # an empty __version__ says nothing


def test_onnxruntimes_version_is_read_through_the_backends_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every import of onnxruntime goes through import_onnxruntime (telemetry off), the version's too."""
    import types

    import engines.ort_import as ort_import

    monkeypatch.setattr(ort_import, "import_onnxruntime", lambda: types.SimpleNamespace(__version__="7.7.7-seen"))
    assert version_of("onnxruntime") == "7.7.7-seen"


def test_an_onnxruntime_upgrade_moves_its_keys_whichever_distribution_installed_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traces: list[tuple[Any, ...]]) -> None:
    """onnxruntime-gpu installs the module onnxruntime with no distribution of that name: the keys read the
    distribution's version, "absent" before and after every upgrade, and reused the old converter's and quantizer's
    files (issue 43). They read the imported module's now: the fp16, bf16, int8 and fused keys move with it."""
    import onnxruntime

    real = importlib.metadata.version

    def without_a_cpu_distribution(dist: str) -> str:  # as where onnxruntime-gpu is installed
        if dist == "onnxruntime":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", without_a_cpu_distribution)
    monkeypatch.setattr(onnxruntime, "__version__", "1.20.1")
    old = _build(tmp_path)
    before = {**_keys(old), "fused": old.onnx_key("fp32", "bert"), "fused-fp16": old.onnx_key("fp16", "bert")}
    assert old.cache.parts[before["int8"]]["onnxruntime"] == "1.20.1"  # type: ignore[attr-defined]
    monkeypatch.setattr(onnxruntime, "__version__", "1.21.0")
    new = _build(tmp_path)
    after = {**_keys(new), "fused": new.onnx_key("fp32", "bert"), "fused-fp16": new.onnx_key("fp16", "bert")}
    assert after["fp32"] == before["fp32"]  # the export does not depend on onnxruntime
    assert [k for k in before if k != "fp32" and after[k] == before[k]] == []
    for key in ("fp16", "bf16", "int8", "fused"):
        assert new.cache.parts[after[key]]["onnxruntime"] == "1.21.0", key  # type: ignore[attr-defined]


# =========================================================================== fp16 / bf16 conversion


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("dist", ["onnxruntime", "onnx"])
def test_the_conversion_key_changes_with_onnxruntime_and_onnx(
        tmp_path: Path, versions: dict[str, str], dist: str, precision: str) -> None:
    """The converter is onnxruntime.transformers.float16 and it writes with onnx: a new version of either may
    convert differently, so each is in the key (the fp32 file it starts from, keyed on torch, is unchanged)."""
    build = _build(tmp_path)
    fp32, converted = build.onnx_key("fp32"), build.onnx_key(precision)
    versions[dist] = "9.9.9"
    if dist == "onnxruntime":
        assert _build(tmp_path).onnx_key("fp32") == fp32  # the export does not depend on onnxruntime
    assert _build(tmp_path).onnx_key(precision) != converted


def test_the_conversion_key_changes_with_the_ops_kept_in_fp32(tmp_path: Path, versions: dict[str, str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxruntime.transformers import float16

    fp16, bf16 = _build(tmp_path).onnx_key("fp16"), _build(tmp_path).onnx_key("bf16")
    monkeypatch.setattr(float16, "DEFAULT_OP_BLOCK_LIST", [*float16.DEFAULT_OP_BLOCK_LIST, "Gelu"])
    assert _build(tmp_path).onnx_key("fp16") != fp16
    monkeypatch.setattr(convert, "BF16_KEEP_FP32", (*convert.BF16_KEEP_FP32, "Where"))
    assert _build(tmp_path).onnx_key("bf16") != bf16


def test_the_conversion_key_holds_exactly_these_fields(tmp_path: Path, versions: dict[str, str]) -> None:
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    build = _build(tmp_path)
    for precision, extra in (("fp16", ()), ("bf16", convert.BF16_KEEP_FP32)):
        assert build.cache.parts[build.onnx_key(precision)] == {  # type: ignore[attr-defined]
            "source_onnx": build.onnx_key("fp32"), "precision": precision,
            "converter": "onnxruntime.transformers.float16", "onnxruntime": VERSIONS["onnxruntime"],
            "onnx": VERSIONS["onnx"], "keep_io_types": True, "keep_fp32": [*DEFAULT_OP_BLOCK_LIST, *extra],
            "revision": 2}


# =========================================================================== int8 calibration


@pytest.mark.parametrize("change", [
    {"calibration": lambda: CalibrationSet(digest_="data-2")},
    {"calibration": lambda: CalibrationSet(rows=32)},
    {"int8_options": {"method": "entropy"}},
    {"int8_options": {"method": "percentile", "percentile": 99.99}},
    {"int8_options": {"method": "minmax", "per_channel": False}},
    {"export_overrides": {"opset": 17}},
], ids=["data-digest", "rows", "method", "percentile", "per-channel", "source-onnx"])
def test_every_field_of_the_calibration_changes_the_int8_key(tmp_path: Path, versions: dict[str, str],
                                                             change: dict[str, Any]) -> None:
    """The calibration result depends on which rows were seen (the data's digest and their count), how ranges
    were computed (the options) and the graph calibrated (the fp32 key)."""
    assert _build(tmp_path, **change).onnx_key("int8") != _build(tmp_path).onnx_key("int8")


def test_the_int8_key_changes_with_onnxruntime(tmp_path: Path, versions: dict[str, str]) -> None:
    before = _build(tmp_path).onnx_key("int8")
    versions["onnxruntime"] = "9.9.9"
    assert _build(tmp_path).onnx_key("int8") != before


def test_the_int8_key_holds_exactly_these_fields(tmp_path: Path, versions: dict[str, str]) -> None:
    build = _build(tmp_path, calibration=lambda: CalibrationSet("data-7", 48),
                   int8_options={"method": "percentile", "percentile": 99.9})
    assert build.cache.parts[build.onnx_key("int8")] == {  # type: ignore[attr-defined]
        "source_onnx": build.onnx_key("fp32"), "calibration_data": "data-7", "calibration_rows": 48,
        "int8": {"method": "percentile", "percentile": 99.9}, "format": "QDQ", "activation": "int8-symmetric",
        "weights": "int8-symmetric", "bias": "float", "onnxruntime": VERSIONS["onnxruntime"], "revision": 1}
    assert quantize.quantize_parts("k", "d", 3, {"method": "minmax"})["int8"] == {"method": "minmax"}


def test_int8_without_calibration_data_is_refused(tmp_path: Path, versions: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="has no calibration_dataset; int8 needs one"):
        _build(tmp_path, calibration=None).onnx_key("int8")


# =========================================================================== ONNX Runtime's transformer fusion


class _Configured(torch.nn.Module):
    """A module carrying a Hugging Face-like config, whose heads and hidden size the fusion reads."""

    def __init__(self, heads: int = 2, hidden: int = 4) -> None:
        super().__init__()
        self.config = type("Config", (), {"num_attention_heads": heads, "hidden_size": hidden})()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def test_the_fused_graph_is_keyed_on_its_export_the_fusion_and_onnxruntime(
        tmp_path: Path, versions: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    def make(heads: int = 2) -> Callable[[], torch.nn.Module]:
        return lambda: (torch.manual_seed(0), _Configured(heads))[1]

    build = _build(tmp_path, factory=make())
    fused, plain = build.onnx_key("fp32", "bert"), build.onnx_key("fp32")
    assert fused != plain and build.onnx_key("fp16", "bert") not in (fused, build.onnx_key("fp16"))
    parts = build.cache.parts[fused]  # type: ignore[attr-defined]
    assert parts["source_export"]["export"]["exporter"] == convert.FUSION_EXPORTER != build.export_options["exporter"]
    assert {k: v for k, v in parts.items() if k != "source_export"} == {
        "fusion": "bert", "optimizer": convert.FUSION_OPTIMIZER, "num_heads": 2, "hidden_size": 4, "opt_level": 0,
        "use_gpu": False, "onnxruntime": VERSIONS["onnxruntime"], "revision": 1}
    assert _build(tmp_path, factory=make(heads=4)).onnx_key("fp32", "bert") != fused
    assert _build(tmp_path, factory=make()).onnx_key("fp32", "gpt2") != fused
    monkeypatch.setattr(torch, "__version__", "2.10.0")
    assert _build(tmp_path, factory=make()).onnx_key("fp32", "bert") != fused
    monkeypatch.setattr(torch, "__version__", TORCH)
    versions["onnxruntime"] = "9.9.9"
    assert _build(tmp_path, factory=make()).onnx_key("fp32", "bert") != fused
    assert _build(tmp_path, factory=make()).onnx_key("fp32") == plain


# =========================================================================== AOTInductor packages

REQUEST = EngineRequest(model="tiny", engine="inductor", precision="fp32", device="cpu", inputs=INPUTS,
                        outputs=OUTPUTS, profile=ShapeProfile(1, 4, 8), options={"precisions": ("fp32",)})


class _Artifacts:
    def __init__(self, digest_: str = "model-1") -> None:
        self._digest = digest_

    def model_digest(self) -> str:
        return self._digest


def _inductor_key(request: EngineRequest = REQUEST, artifacts: _Artifacts | None = None, cxx: str = "c++") -> str:
    return digest(inductor.cache_parts(request, artifacts or _Artifacts(), cxx))  # type: ignore[arg-type]


def _compiler(path: Path, body: str) -> str:
    """A stand-in C++ compiler: a shell script."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


GCC = "echo \"c++ (GCC) 12.2.0 $*\"; echo Copyright"  # says what it was asked


@pytest.fixture
def toolchain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A fixed torch, CPU and compiler on PATH; the compiler is keyed by its resolved path and --version line."""
    machine = {"processor": "x86_64", "machine": "x86_64", "isa": "avx512"}
    monkeypatch.setattr(torch, "__version__", TORCH)
    monkeypatch.setattr(inductor, "_cpu_isa", lambda: machine["isa"])
    monkeypatch.setattr(inductor.platform, "processor", lambda: machine["processor"])
    monkeypatch.setattr(inductor.platform, "machine", lambda: machine["machine"])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _compiler(bindir / "c++", GCC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return {"machine": machine, "bin": bindir}


@pytest.mark.parametrize("change", [
    {"precision": "fp16"}, {"profile": ShapeProfile(1, 8, 8)}, {"profile": ShapeProfile(1, 4, 16)},
    {"inputs": (InputSpec("x", (5,)),)}, {"outputs": ("z",)}, {"options": {"precisions": ("fp32",), "cxx": "x"}},
    {"device": "cuda:0"},
], ids=lambda c: ",".join(c))
def test_every_request_field_of_an_inductor_package_changes_its_key(
        toolchain: dict[str, Any], monkeypatch: pytest.MonkeyPatch, change: dict[str, Any]) -> None:
    monkeypatch.setattr(inductor, "_device_identity", lambda device: {"device": device})  # no GPU needed
    assert _inductor_key(dataclasses.replace(REQUEST, **change)) != _inductor_key()


def test_the_model_torch_cpu_isa_and_compiler_change_an_inductor_packages_key(
        toolchain: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    before = _inductor_key()
    assert _inductor_key() == before
    assert _inductor_key(artifacts=_Artifacts("model-2")) != before
    assert _inductor_key(cxx=_compiler(toolchain["bin"] / "clang++", "echo clang 17")) != before
    _compiler(toolchain["bin"] / "c++", "echo 'c++ (GCC) 13.1.0'")  # the same path, upgraded
    assert _inductor_key() != before
    _compiler(toolchain["bin"] / "c++", GCC)
    assert _inductor_key() == before
    toolchain["machine"]["processor"] = "aarch64"
    assert _inductor_key() != before
    toolchain["machine"]["processor"] = "x86_64"
    toolchain["machine"]["machine"] = "aarch64"
    assert _inductor_key() != before
    toolchain["machine"]["machine"] = "x86_64"
    toolchain["machine"]["isa"] = "avx2"  # the package records the vector ISA it was built for
    assert _inductor_key() != before
    toolchain["machine"]["isa"] = "avx512"
    monkeypatch.setattr(torch, "__version__", "2.10.0+cpu")
    assert _inductor_key() != before


def test_the_inductor_key_holds_exactly_these_fields(toolchain: dict[str, Any]) -> None:
    compiler = str(toolchain["bin"] / "c++")
    assert inductor.cache_parts(REQUEST, _Artifacts(), "c++") == {  # type: ignore[arg-type]
        "model_digest": "model-1", "precision": "fp32", "profile": {"min": 1, "opt": 4, "max": 8},
        "inputs": [INPUTS[0].as_key()], "outputs": ["y"], "torch": TORCH,
        "device": {"cpu": "x86_64", "machine": "x86_64"}, "cpu_isa": "avx512", "options": {"precisions": ("fp32",)},
        "compiler": {"cxx": compiler, "version": "c++ (GCC) 12.2.0 --version"}}


def test_a_compiler_is_identified_by_its_path_and_first_version_line(toolchain: dict[str, Any]) -> None:
    assert inductor._compiler_identity("no-such-compiler-xyz") == {"cxx": "no-such-compiler-xyz",
                                                                    "version": "not found"}
    silent = _compiler(toolchain["bin"] / "silent++", "exit 0")
    assert inductor._compiler_identity(silent) == {"cxx": silent, "version": "?"}
    failing = _compiler(toolchain["bin"] / "odd++", "echo odd 1.0; exit 3")  # identified by what it printed
    assert inductor._compiler_identity("odd++") == {"cxx": failing, "version": "odd 1.0"}


def test_a_cuda_device_is_identified_by_its_name_capability_and_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H200"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: names[index])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (9, index))
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert inductor._device_identity("cuda:1") == {"gpu": "NVIDIA H200", "cc": "9.1", "cuda": "12.8"}
    assert inductor._device_identity("cuda") == {"gpu": "NVIDIA H100 80GB HBM3", "cc": "9.0", "cuda": "12.8"}


# =========================================================================== ONNX Runtime's TensorRT EP engines


def test_the_tensorrt_ep_engine_directory_is_per_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TensorRT execution provider writes its own engines: each configuration gets its own directory."""
    import onnxruntime

    request = dataclasses.replace(REQUEST, engine="onnxruntime", device="cuda:0",
                                  options={"execution_provider": "tensorrt"})
    cache = RecordingCache(tmp_path)
    backend = OnnxRuntimeBackend()
    monkeypatch.setattr(onnxruntime, "__version__", "1.20.1")
    before = backend.trt_cache_dir(request, cache, "onnx-1")  # type: ignore[arg-type]
    assert before.is_dir() and before.parent == tmp_path / "ort-tensorrt"
    assert backend.trt_cache_dir(request, cache, "onnx-1") == before  # type: ignore[arg-type]
    for change in ({"precision": "fp16"}, {"device": "cuda:1"}, {"profile": ShapeProfile(1, 8, 8)},
                   {"model": "other"}, {"inputs": (InputSpec("x", (5,)),)}):
        assert backend.trt_cache_dir(dataclasses.replace(request, **change), cache, "onnx-1") != before, change  # type: ignore[arg-type]
    # another ONNX file (new weights, another export): the EP's own engine names need not tell them apart (issue 43)
    assert backend.trt_cache_dir(request, cache, "onnx-2") != before  # type: ignore[arg-type]
    monkeypatch.setattr(onnxruntime, "__version__", "1.21.0")
    assert backend.trt_cache_dir(request, cache, "onnx-1") != before  # type: ignore[arg-type]


def test_the_tensorrt_ep_is_given_the_directory_of_the_file_its_session_runs(tmp_path: Path) -> None:
    """providers() names the engine directory by the ONNX file's key, and refuses to guess one."""
    request = dataclasses.replace(REQUEST, engine="onnxruntime", device="cuda:0",
                                  options={"execution_provider": "tensorrt"})
    cache = RecordingCache(tmp_path)
    backend = OnnxRuntimeBackend()
    (trt, options), _ = backend.providers(request, cache, "onnx-1")  # type: ignore[arg-type,misc]
    assert trt == "TensorrtExecutionProvider"
    assert options["trt_engine_cache_path"] == str(backend.trt_cache_dir(request, cache, "onnx-1"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the TensorRT EP's engine cache needs the ONNX file's key"):
        backend.providers(request, cache)  # type: ignore[arg-type]


# =========================================================================== what is built is what the key says


class BuildingCache(RecordingCache):
    """RecordingCache that also runs each build, into the entry's directory, with the label recorded."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.labels: dict[str, str | None] = {}

    def get_or_build(self, kind: str, parts: dict[str, Any], build: Callable[[Path], None],
                     label: str | None = None) -> Path:
        entry = super().get_or_build(kind, parts, build, label)
        self.labels[entry.name] = label
        entry.mkdir(parents=True, exist_ok=True)
        build(entry)
        return entry


@pytest.fixture
def builders(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """The export, the converter, the quantizer and the fusion, replaced by recorders of their arguments."""
    calls: list[tuple[str, tuple[Any, ...]]] = []

    def recorder(name: str, result: Any = None) -> Callable[..., Any]:
        def record(*args: Any) -> Any:
            calls.append((name, args))
            return result

        return record

    monkeypatch.setattr(artifacts_module, "export_onnx", recorder("export"))
    monkeypatch.setattr(convert, "convert_precision", recorder("convert"))
    monkeypatch.setattr(quantize, "quantize_qdq", recorder("quantize"))
    monkeypatch.setattr(convert, "fuse_transformer", recorder("fuse", {"Attention": 1}))
    return calls


def test_each_stage_builds_what_its_key_describes(tmp_path: Path, versions: dict[str, str],
                                                  builders: list[tuple[str, tuple[Any, ...]]],
                                                  traces: list[tuple[Any, ...]]) -> None:
    """The export runs with the options its key holds; the converter and the quantizer read the fp32 file whose
    key they chain from and write into their own entry, at the precision, with the options, their keys hold."""
    data = CalibrationSet("data-3", 8)
    build = ModelBuild("tiny", _linear(), INPUTS, OUTPUTS, BuildingCache(tmp_path),  # type: ignore[arg-type]
                       calibration=lambda: data, int8_options={"method": "entropy"}, export_overrides={"opset": 17})
    cache: BuildingCache = build.cache  # type: ignore[assignment]
    fp32 = build.onnx_path("fp32")
    assert fp32 == tmp_path / "onnx" / build.onnx_key("fp32") / "model.onnx"
    assert builders == [("export", (build.torch_module(), "tiny", INPUTS, OUTPUTS, fp32, cache.parts[fp32.parent.name]
                                    ["export"], TracedExport(GRAPH)))]
    assert cache.parts[fp32.parent.name]["export"]["opset"] == 17
    for precision in ("fp16", "bf16"):
        builders.clear()
        path = build.onnx_path(precision)
        assert path == tmp_path / "onnx" / build.onnx_key(precision) / "model.onnx"
        assert builders == [("convert", (fp32, path, precision, "tiny"))]
        assert cache.parts[path.parent.name]["precision"] == precision
    builders.clear()
    int8 = build.onnx_path("int8")
    assert builders == [("quantize", (fp32, int8, data.feeds, {"method": "entropy"}, "tiny"))]
    assert cache.parts[int8.parent.name]["int8"] == {"method": "entropy"}
    assert [cache.labels[p.parent.name] for p in (fp32, build.onnx_path("fp16"), int8)] == [
        "export tiny to ONNX", "convert tiny ONNX to fp16", "calibrate tiny int8 (entropy)"]
    static = build.onnx_path("fp32", batch=4)
    fp16_static = build.onnx_path("fp16", batch=4)
    assert cache.labels[static.parent.name] == "export tiny to ONNX at batch 4"
    assert cache.labels[fp16_static.parent.name] == "convert tiny ONNX at batch 4 to fp16"
    assert builders[-1] == ("convert", (static, fp16_static, "fp16", "tiny"))
    # the trace each export was handed is the one of its key's options: traced for those, and for nothing else
    assert [options for *_, options in traces] == [cache.parts[p.parent.name]["export"] for p in (fp32, static)]


def test_the_fused_stage_exports_and_fuses_as_its_key_says(tmp_path: Path, versions: dict[str, str],
                                                           builders: list[tuple[str, tuple[Any, ...]]],
                                                           caplog: pytest.LogCaptureFixture,
                                                           traces: list[tuple[Any, ...]]) -> None:
    build = ModelBuild("bert", lambda: (torch.manual_seed(0), _Configured(2, 4))[1], INPUTS, OUTPUTS,
                       BuildingCache(tmp_path), calibration=CalibrationSet,  # type: ignore[arg-type]
                       int8_options={"method": "minmax"})
    cache: BuildingCache = build.cache  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger="engines.artifacts"):
        fused = build.onnx_path("fp32", "bert")
    assert "bert: fused {'Attention': 1}" in caplog.messages  # what the optimizer fused, in the run's log
    parts = cache.parts[fused.parent.name]
    (export, (module, name, inputs, outputs, exported, options, traced)), (fuse, args) = builders
    assert traced == TracedExport(GRAPH)
    assert (export, fuse) == ("export", "fuse")
    assert (module, name, inputs, outputs) == (build.torch_module(), "bert", INPUTS, OUTPUTS)
    assert options == parts["source_export"]["export"] and options["exporter"] == convert.FUSION_EXPORTER
    assert exported.name == "model.onnx" and exported.parent != fused.parent
    assert args == (exported, fused, "bert", 2, 4, "bert")
    assert cache.labels[fused.parent.name] == f"export bert ({convert.FUSION_EXPORTER}) and fuse (bert)"
    builders.clear()
    fp16 = build.onnx_path("fp16", "bert")
    assert builders == [("convert", (fused, fp16, "fp16", "bert"))]
    assert cache.labels[fp16.parent.name] == "convert bert ONNX (bert-fused) to fp16"
    int8 = build.onnx_path("int8", "bert")
    assert builders[-1][1][:2] == (fused, int8)
    assert cache.parts[int8.parent.name]["source_onnx"] == fused.parent.name
    assert cache.parts[fp16.parent.name]["source_onnx"] == fused.parent.name
    assert cache.labels[int8.parent.name] == "calibrate bert (bert-fused) int8 (minmax)"
    static = build.onnx_path("fp32", "bert", batch=2)
    assert cache.parts[static.parent.name]["source_export"]["export"]["static_batch"] == 2
    assert [options for *_, options in traces] == [cache.parts[p.parent.name]["source_export"]["export"]
                                                   for p in (fused, static)]


def test_the_tensorrt_ep_directory_is_named_by_exactly_these_fields(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    from engines.onnxrt.backend import trt_profile_options

    monkeypatch.setattr(onnxruntime, "__version__", "1.20.1")
    seq = AxisRange(4, 16, 32)
    request = EngineRequest(model="bert", engine="onnxruntime", precision="fp16", device="cuda:0",
                            inputs=(InputSpec("ids", ("seq",), "int64", axes=(("seq", seq),)),
                                    InputSpec("mask", ("seq",), "int64", axes=(("seq", seq),), role="attention_mask")),
                            outputs=OUTPUTS, profile=ShapeProfile(1, 8, 16, axes=(("seq", seq),)),
                            options={"execution_provider": "tensorrt"})
    shapes = {"trt_profile_min_shapes": "ids:1x4,mask:1x4", "trt_profile_opt_shapes": "ids:8x16,mask:8x16",
              "trt_profile_max_shapes": "ids:16x32,mask:16x32"}
    assert trt_profile_options(request) == shapes
    directory = OnnxRuntimeBackend().trt_cache_dir(request, RecordingCache(tmp_path), "onnx-abc")  # type: ignore[arg-type]
    assert directory == tmp_path / "ort-tensorrt" / digest({
        "ort": "1.20.1", "precision": "fp16", "device": "cuda:0", "model": "bert", "profile_shapes": shapes,
        "onnx": "onnx-abc",
        "profile": {"min": 1, "opt": 8, "max": 16, "axes": {"seq": {"min": 4, "opt": 16, "max": 32}}}})


# =========================================================================== the parts every key holds


def test_an_input_and_a_profile_are_keyed_by_exactly_these_fields() -> None:
    """Input specs and shape profiles sit in every key (export, TensorRT engine, AOTInductor package): a renamed
    field would change every address, and a dropped one would let two models share an artifact."""
    assert InputSpec("x", (3, 32, 32)).as_key() == {"name": "x", "shape": [3, 32, 32], "dtype": "float32", "low": 0.0,
                                                     "high": 1.0}
    seq = AxisRange(1, 16, 128)
    ids = InputSpec("ids", ("seq",), "int64", 0, 30000, axes=(("seq", seq),))
    assert ids.as_key() == {"name": "ids", "shape": ["seq"], "dtype": "int64", "low": 0, "high": 30000,
                            "axes": {"seq": {"min": 1, "opt": 16, "max": 128}}}
    mask = InputSpec("mask", ("seq",), "int64", axes=(("seq", seq),), role="attention_mask")
    assert mask.as_key()["role"] == "attention_mask" and "role" not in ids.as_key()
    assert ShapeProfile(1, 8, 32).as_dict() == {"min": 1, "opt": 8, "max": 32}
    assert ShapeProfile(2, 4, 8, axes=(("seq", seq),), static_batch=True).as_dict() == {
        "min": 2, "opt": 4, "max": 8, "axes": {"seq": {"min": 1, "opt": 16, "max": 128}}, "static_batch": True}


def test_the_tensorrt_engine_key_holds_exactly_these_fields() -> None:
    """test_trt_settings.py changes each field; here is what the key holds, by name."""
    from engines.trt.settings import ENGINE_RECIPE_VERSION, PROFILING_VERBOSITY, engine_cache_parts, plan_build

    request = dataclasses.replace(REQUEST, engine="tensorrt", precision="fp16", device="cuda:0",
                                  options={"workspace_mb": 1024})
    plan = plan_build("10.11.0.33", "fp16")
    assert plan.as_dict() == {"onnx_precision": "fp32", "strongly_typed": False, "flags": ["FP16"], "clear_flags": []}
    assert plan_build("10.13", "fp32").as_dict() == {"onnx_precision": "fp32", "strongly_typed": True, "flags": [],
                                                     "clear_flags": ["TF32"]}
    parts = engine_cache_parts(request, onnx_key="onnx-abc", plan=plan, trt_version="10.11.0.33",
                               gpu_name="NVIDIA H100 80GB HBM3", compute_capability="9.0",
                               cuda_versions={"driver": "12.8", "runtime": "12.9"})
    assert parts == {
        "recipe": ENGINE_RECIPE_VERSION, "onnx": "onnx-abc", "model": "tiny", "precision": "fp16",
        "plan": plan.as_dict(), "profile": {"min": 1, "opt": 4, "max": 8}, "inputs": [INPUTS[0].as_key()],
        "outputs": ["y"], "options": {"workspace_mb": 1024}, "profiling_verbosity": PROFILING_VERBOSITY,
        "tensorrt": "10.11.0.33", "gpu": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"},
        "cuda": {"driver": "12.8", "runtime": "12.9"}}
    assert (ENGINE_RECIPE_VERSION, PROFILING_VERBOSITY) == (1, "DETAILED")


def test_the_fusion_reads_heads_and_hidden_size_from_the_first_complete_config() -> None:
    class Partial(torch.nn.Module):
        def __init__(self, **config: Any) -> None:
            super().__init__()
            self.config = type("Config", (), config)()

    outer = torch.nn.Sequential(Partial(num_attention_heads=3), Partial(hidden_size=8), _Configured(4, 16))
    assert convert.transformer_shape(outer) == (4, 16)  # the partial configs are passed over
    assert convert.transformer_shape(torch.nn.Linear(2, 2)) == (0, 0)  # "detect", for the optimizer
    assert convert.transformer_shape(Partial(num_attention_heads="4", hidden_size=16)) == (0, 0)


def test_the_cpu_isa_is_read_from_the_cpu_flags_without_a_probe_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor's own check compiles and loads a probe in a child Python per candidate ISA (30 s per process on the
    GPU machine); the backend trusts /proc/cpuinfo for the base probe of every ISA, and names an ISA inductor knows.
    The subclasses' extra probes (AVX-512 bf16, VNNI, AMX) run whatever the setting."""
    from torch._inductor import cpu_vec_isa

    calls: list[Any] = []
    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", lambda self, code: calls.append(code) or True)
    memoized = (cpu_vec_isa.valid_vec_isa_list, cpu_vec_isa.VecISA._VecISA__bool__impl)  # type: ignore[attr-defined]
    for cached in memoized:
        cached.cache_clear()
    try:
        isa = inductor._cpu_isa()
    finally:
        for cached in memoized:
            cached.cache_clear()
    assert cpu_vec_isa.VecISA._avx_code not in calls  # the base probe, one child Python per candidate ISA
    assert isa in {str(i) for i in cpu_vec_isa.supported_vec_isa_list} | {str(cpu_vec_isa.invalid_vec_isa)}


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).relu()


def test_the_model_digest_reads_each_classs_source_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twelve blocks of one class: its source is read once (inspect parses the whole file on every read; that made
    the GPU tier's start-up check take 14-20 s), and the digest still follows the class's source."""
    import inspect

    import engines.pytorch.backend as torch_backend

    read: list[type] = []
    real = inspect.getsource

    def counting(obj: Any) -> str:
        read.append(obj)
        return real(obj)

    monkeypatch.setattr(torch_backend.inspect, "getsource", counting)
    torch_backend._class_source.cache_clear()
    model = torch.nn.Sequential(*[_Block() for _ in range(12)])
    first = torch_backend.model_digest(model)
    assert read == [_Block]  # torch's own classes are named, not read
    assert torch_backend.model_digest(model) == first and read == [_Block]

    class _Edited(_Block):  # another class (an edited forward): its source is read and the digest moves
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x).tanh()

    edited = torch.nn.Sequential(*[_Edited() for _ in range(12)])
    edited.load_state_dict(model.state_dict())
    assert torch_backend.model_digest(edited) != first and read.count(_Edited) == 1
