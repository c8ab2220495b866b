"""The pure-Python half of the TensorRT backend: decisions that need neither tensorrt nor a GPU.

Everything here is a plain function of versions, precisions and request fields, so it is unit-tested on
CPU-only CI (tests/selftest/test_trt_settings.py) while the half that calls TensorRT (backend.py, builder.py,
network.py, timing_cache.py, logger.py, runner.py) runs only on the GPU tier, its build steps also on fakes
(tests/selftest/test_trt_loaders.py).

Precision policy (TensorRT 10.12 deprecated the weak-typing precision flags; 11.0 removed them):

* TensorRT >= 10.12 (and 11.x, where every network is strongly typed): build a STRONGLY_TYPED network
  from the ONNX file already converted for the precision (fp16/bf16 weights with fp32 I/O, int8 = QDQ),
  and set no precision flags: the types in the graph are the precision.
* TensorRT 10.0 - 10.11: parse the fp32 file and let the builder choose fp16/bf16 kernels with
  BuilderFlag.FP16 / BF16; for int8 parse the QDQ file (explicit quantization) with INT8 + FP16 fallback.
* fp32 clears BuilderFlag.TF32 (TensorRT enables it by default); tf32 sets it. TF32 is a math mode of
  fp32 tensors, not a tensor type, so it stays a flag on every version.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import PRECISIONS, EngineRequest
from engines.feeds import Feed, check_feed

#: Oldest TensorRT this backend supports (the tensor-name API: set_tensor_address / execute_async_v3).
MIN_TENSORRT = (10, 0)
#: From this version on, build strongly typed networks instead of using precision flags.
STRONGLY_TYPED_FROM = (10, 12)

#: Minimum compute capability for each precision to mean what its name says on this GPU.
MIN_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "fp32": (0, 0),
    "tf32": (8, 0),  # TF32 tensor cores arrived with Ampere; below that "tf32" would silently be fp32
    "fp16": (7, 0),  # fp16 tensor cores (Volta); TensorRT 10 itself targets Turing (7.5) and newer
    "bf16": (8, 0),  # bf16 arithmetic arrived with Ampere
    "int8": (6, 1),  # dp4a int8 (Pascal 6.1); int8 tensor cores from Turing 7.5
}

ENGINE_FILE = "engine.plan"
BUILD_INFO_FILE = "build.json"
TIMING_CACHE_DIR = "tensorrt-timing"
#: Bump when the way an engine is built changes in a way the other key parts do not show.
ENGINE_RECIPE_VERSION = 1
#: ProfilingVerbosity the builder is set to (DETAILED lets the engine inspector report layer types).
PROFILING_VERBOSITY = "DETAILED"


def parse_version(text: str) -> tuple[int, ...]:
    """TensorRT's ``__version__`` as a tuple of ints: "10.12.0.36" -> (10, 12, 0, 36); "11.0" -> (11, 0)."""
    parts = re.findall(r"\d+", text.split("+", 1)[0])
    if not parts:
        raise ValueError(f"cannot parse a version from {text!r}")
    numbers = tuple(int(p) for p in parts[:4])
    return numbers if len(numbers) >= 2 else (numbers[0], 0)


def tensorrt_version_skip_reason(trt_version: str) -> str | None:
    try:
        version = parse_version(trt_version)
    except ValueError:
        return f"tensorrt reports an unparsable version {trt_version!r}"
    if version[:2] < MIN_TENSORRT:
        return (f"tensorrt {trt_version} is older than {MIN_TENSORRT[0]}.{MIN_TENSORRT[1]}: this backend uses the "
                "TensorRT 10 tensor API (set_tensor_address / execute_async_v3)")
    return None


def precision_skip_reason(
    precision: str, compute_capability: tuple[int, int], gpu_name: str = "this GPU"
) -> str | None:
    """Why ``precision`` cannot run (meaningfully) on a GPU of ``compute_capability``, or None."""
    if precision not in MIN_COMPUTE_CAPABILITY:
        return (f"precision {precision!r} is not supported by the tensorrt backend "
                f"(supported: {', '.join(PRECISIONS)}; fp8/fp4 are out of scope)")
    need = MIN_COMPUTE_CAPABILITY[precision]
    if tuple(compute_capability) < need:
        have = f"{compute_capability[0]}.{compute_capability[1]}"
        return (f"{precision} needs compute capability >= {need[0]}.{need[1]}; {gpu_name} has {have}")
    return None


def cuda_device_index(device: str) -> int | None:
    """ "cuda:1" -> 1, "cuda" -> 0; None for anything that is not a CUDA device ("cpu", "mps"...)."""
    match = re.fullmatch(r"cuda(?::(\d+))?", device.strip())
    if not match:
        return None
    return int(match.group(1) or 0)


@dataclass(frozen=True)
class BuildPlan:
    """How to build one precision with one TensorRT version.

    onnx_precision: which ``ModelArtifacts.onnx_path(...)`` to parse.
    strongly_typed: create the network with NetworkDefinitionCreationFlag.STRONGLY_TYPED.
    flags / clear_flags: names of ``trt.BuilderFlag`` members to set / clear on the builder config.
    """

    onnx_precision: str
    strongly_typed: bool
    flags: tuple[str, ...] = ()
    clear_flags: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"onnx_precision": self.onnx_precision, "strongly_typed": self.strongly_typed,
                "flags": list(self.flags), "clear_flags": list(self.clear_flags)}


def plan_build(trt_version: str, precision: str) -> BuildPlan:
    """The build recipe for ``precision`` on TensorRT ``trt_version`` (see the module docstring)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    version = parse_version(trt_version)[:2]
    if version < MIN_TENSORRT:
        raise ValueError(tensorrt_version_skip_reason(trt_version))
    strong = version >= STRONGLY_TYPED_FROM
    if precision == "fp32":
        return BuildPlan("fp32", strong, (), ("TF32",))
    if precision == "tf32":
        return BuildPlan("fp32", strong, ("TF32",), ())
    if strong:
        # fp16/bf16: converted weights, fp32 I/O; int8: QDQ graph. The graph's types are the precision.
        return BuildPlan(precision, True, (), ())
    if precision == "fp16":
        return BuildPlan("fp32", False, ("FP16",), ())
    if precision == "bf16":
        return BuildPlan("fp32", False, ("BF16",), ())
    # int8 before 10.12: explicit quantization (QDQ) with INT8 kernels enabled, FP16 for what is not quantized.
    return BuildPlan("int8", False, ("INT8", "FP16"), ())


def engine_cache_parts(
    request: EngineRequest,
    *,
    onnx_key: str,
    plan: BuildPlan,
    trt_version: str,
    gpu_name: str,
    compute_capability: str,
    cuda_versions: Mapping[str, str],
) -> dict[str, Any]:
    """Everything that changes a serialized TensorRT engine: the key parts of its cache entry.

    An engine is specific to the TensorRT version and the GPU; the driver and CUDA runtime versions are keyed
    too because this suite exists to catch regressions after exactly those upgrades.
    """
    return {
        "recipe": ENGINE_RECIPE_VERSION,
        "onnx": onnx_key,
        "model": request.model,
        "precision": request.precision,
        "plan": plan.as_dict(),
        "profile": request.profile.as_dict(),
        "inputs": [spec.as_key() for spec in request.inputs],  # as every other key: unchanged for batch-only inputs
        "outputs": list(request.outputs),
        "options": dict(request.options),
        "profiling_verbosity": PROFILING_VERBOSITY,
        "tensorrt": trt_version,
        "gpu": {"name": gpu_name, "compute_capability": compute_capability},
        "cuda": dict(cuda_versions),
    }


Shape = tuple[int, ...]


def optimization_profile_shapes(request: EngineRequest) -> dict[str, tuple[Shape, Shape, Shape]]:
    """(min, opt, max) shape of every input, as the engine's one optimization profile sets them: the batch at the
    profile's min, opt_batch and max (a static-batch engine's profile: its batch thrice), each named axis over its
    range. Pure, so that what reaches TensorRT is tested without it."""
    return {spec.name: request.profile.shapes(spec) for spec in request.inputs}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "unknown"


def timing_cache_filename(trt_version: str, compute_capability: str, gpu_name: str) -> str:
    """One timing cache per (TensorRT version, compute capability, GPU name): a file name for it."""
    return f"timing-trt{_slug(trt_version)}-sm{_slug(compute_capability)}-{_slug(gpu_name)}.cache"


def timing_cache_path(cache_root: Path, trt_version: str, compute_capability: str, gpu_name: str) -> Path:
    return Path(cache_root) / TIMING_CACHE_DIR / timing_cache_filename(trt_version, compute_capability, gpu_name)


def workspace_bytes(options: Mapping[str, Any]) -> int | None:
    """``options["workspace_mb"]`` in bytes, or None when not given."""
    value = options.get("workspace_mb")
    if value is None:
        return None
    mb = int(value)
    if mb <= 0:
        raise ValueError(f"workspace_mb must be positive, got {value!r}")
    return mb << 20


def builder_optimization_level(options: Mapping[str, Any]) -> int | None:
    value = options.get("builder_optimization_level")
    if value is None:
        return None
    level = int(value)
    if not 0 <= level <= 5:
        raise ValueError(f"builder_optimization_level must be in 0..5, got {value!r}")
    return level


# ---------------------------------------------------------------------------------------------------------
# Parser errors


@dataclass(frozen=True)
class ParserErrorInfo:
    """One ONNX parser error, copied out of ``trt.ParserError`` (see network.parser_errors)."""

    code: str
    desc: str
    node: int = -1
    node_name: str = ""
    operator: str = ""
    file: str = ""
    line: int = -1
    func: str = ""


def format_parser_errors(cell_id: str, onnx_path: Path | str, errors: Sequence[ParserErrorInfo]) -> str:
    """The EngineBuildError text for a failed parse: the cell, the file, then one line per error."""
    head = f"tensorrt could not parse {onnx_path} for {cell_id}: {len(errors)} parser error(s)"
    if not errors:
        return head + " (the parser reported failure without an error; is the file a valid ONNX model?)"
    lines = [head]
    for i, e in enumerate(errors):
        where = f"node {e.node}" if e.node >= 0 else "no node"
        if e.node_name:
            where += f" {e.node_name!r}"
        if e.operator:
            where += f" (op {e.operator})"
        source = f" [{e.file}:{e.line} {e.func}]" if e.file else ""
        lines.append(f"  [{i}] {e.code} at {where}: {e.desc}{source}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Logging


#: TensorRT ILogger severity name -> logging level.
SEVERITY_TO_LEVEL: dict[str, int] = {
    "INTERNAL_ERROR": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARNING": logging.WARNING,
    "INFO": logging.INFO,
    "VERBOSE": logging.DEBUG,
}


def logging_level(severity_name: str) -> int:
    return SEVERITY_TO_LEVEL.get(severity_name.upper(), logging.DEBUG)


# ---------------------------------------------------------------------------------------------------------
# Facts


def layer_summary(engine_information_json: str) -> dict[str, Any]:
    """Layer count and layer-type histogram from ``IEngineInspector.get_engine_information(JSON)``.

    With ProfilingVerbosity.DETAILED each entry of "Layers" is an object with a "LayerType"; with
    LAYER_NAMES_ONLY it is just a name, and only the count is known. Returns {} if the text is not JSON.
    """
    try:
        info = json.loads(engine_information_json)
    except (TypeError, ValueError):
        return {}
    layers = info.get("Layers") if isinstance(info, dict) else None
    if not isinstance(layers, list):
        return {}
    summary: dict[str, Any] = {"engine_layers": len(layers)}
    types = Counter(str(layer.get("LayerType", "unknown")) for layer in layers if isinstance(layer, dict))
    if types:
        summary["layer_types"] = dict(sorted(types.items()))
    return summary


# ---------------------------------------------------------------------------------------------------------
# Feed validation


@dataclass(frozen=True)
class TensorSpec:
    """An engine I/O tensor as the runner sees it: name, engine shape (-1 = dynamic), numpy dtype, and for an
    input the smallest and largest shapes of its optimization profile (None where unknown)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    profile_min: tuple[int, ...] | None = None
    profile_max: tuple[int, ...] | None = None


def check_feed_shapes(feed: Feed, inputs: Sequence[TensorSpec], min_batch: int, max_batch: int) -> None:
    """Raise ValueError listing expected vs got unless every input has the engine's rank, static dims and
    dtype, a batch (axis 0) inside the engine's optimization profile [min_batch, max_batch], and every other
    dynamic axis (a sequence length) inside the spec's profile range where the spec has one.

    Names and batch agreement are checked first, by the check every runner shares (engines.feeds).
    """
    check_feed(feed, [spec.name for spec in inputs])
    problems = []
    for spec in inputs:
        array = feed[spec.name]
        got_shape, got_dtype = tuple(np.shape(array)), np.asarray(array).dtype
        want = "(" + ", ".join("batch" if i == 0 and d < 0 else ("?" if d < 0 else str(d))
                               for i, d in enumerate(spec.shape)) + ")"
        if got_dtype != spec.dtype:
            problems.append(f"{spec.name}: dtype {got_dtype}, engine expects {spec.dtype}")
        if len(got_shape) != len(spec.shape):
            problems.append(f"{spec.name}: shape {got_shape}, engine expects rank {len(spec.shape)} {want}")
            continue
        bad_dims = [i for i, (g, w) in enumerate(zip(got_shape, spec.shape, strict=True)) if w >= 0 and g != w]
        if bad_dims:
            problems.append(f"{spec.name}: shape {got_shape}, engine expects {want} (axis {bad_dims} differ)")
        if got_shape and not min_batch <= got_shape[0] <= max_batch:
            problems.append(f"{spec.name}: batch {got_shape[0]} is outside the engine's optimization profile "
                            f"[{min_batch}, {max_batch}]")
        if spec.profile_min is not None and spec.profile_max is not None:
            for i, (g, lo, hi) in enumerate(zip(got_shape, spec.profile_min, spec.profile_max, strict=False)):
                if i > 0 and spec.shape[i] < 0 and not lo <= g <= hi:
                    problems.append(f"{spec.name}: axis {i} is {g}, outside the engine's optimization profile "
                                    f"[{lo}, {hi}]")
    if problems:
        raise ValueError("feed does not match the TensorRT engine:\n  " + "\n  ".join(problems))
