"""AOTInductor engine: ``torch.export`` with a dynamic batch axis (and a ``Dim`` per named axis, such as a
sequence length), compiled into a ``.pt2`` package.

Why AOTInductor rather than ``torch.compile``: the package is an artifact like a TensorRT plan,
built once, stored in the engine cache under a key that includes the torch version, the device and
the C++ compiler, and loaded without recompiling, so its cost is paid once and its result can be judged.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engines.base import (
    UNSUPPORTED,
    CellUnavailable,
    EngineBuildError,
    EngineFacts,
    EngineRequest,
    LoadedEngine,
    ModelArtifacts,
)
from engines.feeds import Feed
from engines.inductor.isa_probe import remember_probes
from engines.onnx.export import export_dims, input_dynamic_shapes, sample_inputs, with_configured_outputs
from engines.pytorch.backend import _DTYPES, TorchRunner

if TYPE_CHECKING:
    from core.cache import ArtifactCache

log = logging.getLogger(__name__)

PACKAGE = "model.pt2"
PRECISIONS = ("fp32", "fp16", "bf16")
#: Inductor's own compile cache (and Triton's, under it), inside the engine cache: by default both live
#: under /tmp/torchinductor_$USER and ~/.triton, outside anything the suite was told it may write.
WORK_DIR = "torchinductor"


def inductor_cache_env(cache_root: Path) -> dict[str, str]:
    """TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR inside the engine cache. Set for the whole process
    before torch._dynamo is first imported (its import creates the cache directory), they keep every
    inductor write in the cache; the backend also sets them around each compile and load."""
    work = Path(cache_root).resolve() / WORK_DIR
    return {"TORCHINDUCTOR_CACHE_DIR": str(work), "TRITON_CACHE_DIR": str(work / "triton")}


def scratch_dir(cache_root: Path) -> Path:
    """A fresh directory under the engine cache for one process's $TMPDIR while it compiles and loads
    packages. AOTInductor's C++ package loader extracts each package into a new directory under $TMPDIR
    (read at each load) and removes it only when the model is freed, which a process that ends with the
    model loaded never does; the compiler's own temporary files land there too."""
    root = Path(cache_root).resolve() / WORK_DIR / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"pid{os.getpid()}-", dir=root))


_process_scratch: dict[Path, Path] = {}


def _own_scratch(cache_root: Path) -> Path:
    """This process's scratch_dir, made once and removed when the process exits: the loaded packages may
    read their extracted files while they run (CUDA kernels load lazily), but at exit nothing runs them."""
    key = Path(cache_root).resolve()
    if key not in _process_scratch:
        _process_scratch[key] = scratch_dir(key)
        atexit.register(shutil.rmtree, _process_scratch[key], True)
    return _process_scratch[key]


@contextlib.contextmanager
def inductor_cache(cache_root: Path) -> Iterator[dict[str, str]]:
    """The engine cache as inductor's cache, and this process's scratch directory there as the C++ side's
    $TMPDIR, for one compile or load; then the process's environment as it was. Inductor reads
    TORCHINDUCTOR_CACHE_DIR at each use but memoizes some paths derived from it, so its in-process caches
    are cleared on entry and exit (as torch's own temporary_cache_dir does). Python's tempfile keeps the
    temporary directory it had."""
    tempfile.gettempdir()  # fixes Python's choice first: only the C++ side reads the TMPDIR set here
    env = {**inductor_cache_env(cache_root), "TMPDIR": str(_own_scratch(cache_root))}
    saved = {k: os.environ.get(k) for k in env}
    try:
        from torch._inductor.utils import clear_caches as clear
    except ImportError:  # an older torch: nothing memoized to clear
        clear = lambda: None
    os.environ.update(env)
    clear()
    try:
        yield env
    finally:
        clear()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# Precompiled headers go to tempfile.gettempdir()/torchinductor_$USER whatever TORCHINDUCTOR_CACHE_DIR says
# (torch 2.14 computes their directory once, as torch._inductor.codecache is imported): off, so nothing is
# written outside the engine cache. On the 2-core CI machine, one cold compile of a tiny model took 59 s
# without them and 84 s with them (their own build included).
_NO_PRECOMPILED_HEADERS = {"aot_inductor.precompile_headers": False, "cpp_cache_precompile_headers": False}

# The CPU's vector ISA as /proc/cpuinfo's flags give it. Otherwise inductor checks each candidate ISA by compiling
# a probe and loading it in a child Python, in every process that compiles or loads a package: on the H200 machine
# (torch 2.11, 2026-11-26) ten children that each import torch, 30 s at the first load of every xdist worker. The
# extra probes of AVX-512 (bf16), VNNI and AMX run whatever the setting (AMX needs the OS to enable its tiles); those
# are remembered across processes (remember_isa_probes). The package records the ISA it was built for (AOTI_CPU_ISA)
# and its cache key holds it (cache_parts).
_ISA_FROM_FLAGS = {"cpp.vec_isa_ok": True}
_ISA_FROM_FLAGS_ENV = {"TORCHINDUCTOR_VEC_ISA_OK": "1"}  # the same, for a child process (read as it imports)


def remember_isa_probes(cache_root: Path) -> None:
    """Inductor's ISA probes answered from markers in the engine cache once they passed (engines.inductor.isa_probe)."""
    remember_probes(Path(cache_root).resolve() / WORK_DIR, _compiler_identity)


#: The directory that holds the ``engines`` package, for a child Python that imports it.
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


def _cpu_isa() -> str:
    """The vector ISA inductor compiles and loads packages for in this process (``avx512``, ``avx2``, ...)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    with torch._inductor.config.patch(_ISA_FROM_FLAGS):
        return str(pick_vec_isa())


def _device_identity(device: str) -> dict[str, Any]:
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(index)
        return {"gpu": torch.cuda.get_device_name(index), "cc": f"{major}.{minor}", "cuda": torch.version.cuda}
    return {"cpu": platform.processor() or platform.machine(), "machine": platform.machine()}


def _compiler(request: EngineRequest) -> str:
    """The C++ compiler for the package's wrapper: ``engine_options.inductor.cxx``, else torch's own
    choice (``$CXX``, else ``g++``). Made explicit because the compiler decides how libstdc++ is
    linked, and a wrapper with a static libstdc++ crashes on load (see _load_failure_hint)."""
    chosen = request.options.get("cxx")
    if chosen:
        return str(chosen)
    return next(str(c) for c in torch._inductor.config.cpp.cxx if c)


def _compiler_identity(cxx: str) -> dict[str, str]:
    """Resolved path and ``--version`` line: a different compiler builds a different package."""
    path = shutil.which(cxx)
    if path is None:
        return {"cxx": cxx, "version": "not found"}
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
    return {"cxx": path, "version": (proc.stdout.splitlines() or ["?"])[0]}


def _needed_libraries(shared_object: Path) -> list[str] | None:
    """DT_NEEDED entries of a shared object, from binutils' readelf (present wherever gcc builds);
    None when readelf is missing."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    out = subprocess.run([readelf, "-d", str(shared_object)], capture_output=True, text=True, timeout=60,
                         check=False).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def _load_failure_hint(package: Path, cxx: str) -> str:
    """Why a package may crash its loader. Seen on our H100/H200 image: its ``$CXX`` (/opt/gcc)
    links libstdc++ statically into wrapper.so; inside a process that already has the shared
    libstdc++ the two copies' locale data mix and std::regex in AOTInductor's parse_device_str
    segfaults. The same package loads with the shared libstdc++ preloaded."""
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(package) as archive:
        names = [n for n in archive.namelist() if n.endswith(".so")]
        if not names:
            return ""
        wrapper = Path(archive.extract(names[0], tmp))
        needed = _needed_libraries(wrapper)
    if needed is None or any(n.startswith("libstdc++") for n in needed):
        return ""
    return (f" | the package's wrapper.so does not link the shared libstdc++ (NEEDED: {', '.join(needed)}): "
            f"compiler {cxx} linked libstdc++ statically, which crashes on load beside the process's shared "
            "libstdc++. Set [engine_options.inductor] cxx to a g++ that links it dynamically (e.g. /usr/bin/g++)")


class InductorRunner(TorchRunner):
    """The loaded package behind eager torch's surface: ``infer`` and the device paths are inherited,
    only construction differs (the package is already compiled for its device and dtype)."""

    def __init__(self, compiled: Any, input_names: tuple[str, ...], output_names: tuple[str, ...],
                 device: str, precision: str, label: str = "inductor") -> None:
        self.label = label
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
                                  "invalidates the capture (seen on H200, torch 2.11); not measured", UNSUPPORTED)
        return super().prepare_path(path, feed)


def _check_loads_in_child(package: Path, request: EngineRequest, cxx: str, cache_root: Path) -> None:
    """Load the fresh package in a child process first: a package that crashes the loader (seen as a
    segfault on our H100/H200 image) must fail its own cell, not end the whole test session. The child's
    inductor cache is the engine cache's too."""
    code = ("import pathlib, sys, torch; from engines.inductor.backend import remember_isa_probes; "
            "remember_isa_probes(pathlib.Path(sys.argv[2])); m = torch._inductor.aoti_load_package(sys.argv[1]); "
            "print('loaded', type(m).__name__)")
    scratch = scratch_dir(cache_root)  # the child exits with the package loaded: its extraction stays there
    try:
        path = os.pathsep.join(p for p in (_SOURCE_ROOT, os.environ.get("PYTHONPATH")) if p)
        proc = subprocess.run([sys.executable, "-c", code, str(package), str(cache_root)], capture_output=True,
                              text=True, timeout=600, check=False,
                              env={**os.environ, **inductor_cache_env(cache_root), **_ISA_FROM_FLAGS_ENV,
                                   "TMPDIR": str(scratch), "PYTHONPATH": path})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise EngineBuildError(f"{request.cell_id}: the AOTInductor package does not load ({how}): "
                               + " | ".join(tail) + _load_failure_hint(package, cxx))


def cache_parts(request: EngineRequest, artifacts: ModelArtifacts, cxx: str) -> dict[str, Any]:
    """Everything that changes an AOTInductor package: the key parts of its cache entry (the model by its
    digest, the request's shapes and options, torch, the device and the C++ compiler). A plain function, so
    that each field is tested to change the key (tests/selftest/test_cache_keys.py) without compiling."""
    return {"model_digest": artifacts.model_digest(), "precision": request.precision,
            "profile": request.profile.as_dict(), "inputs": [i.as_key() for i in request.inputs],
            "outputs": list(request.outputs), "torch": torch.__version__,
            "device": _device_identity(request.device), "cpu_isa": _cpu_isa(), "options": dict(request.options),
            "compiler": _compiler_identity(cxx)}


class InductorBackend:
    name = "inductor"

    def unsupported_reason(self, request: EngineRequest) -> str | None:
        chosen = tuple(request.options.get("precisions", ("fp32",)))
        if request.precision not in PRECISIONS or request.precision not in chosen:
            return (f"inductor runs {', '.join(chosen)} here (engine_options.inductor.precisions; possible: "
                    f"{', '.join(PRECISIONS)}): each package is a long compile")
        return None

    def skip_reason(self, request: EngineRequest) -> str | None:
        if request.device.startswith("cuda") and not torch.cuda.is_available():
            return f"torch {torch.__version__} sees no CUDA device for {request.device}"
        if not hasattr(torch._inductor, "aoti_compile_and_package"):
            return f"torch {torch.__version__} has no AOTInductor packaging (torch._inductor.aoti_compile_and_package)"
        return None

    def load(self, request: EngineRequest, artifacts: ModelArtifacts, cache: ArtifactCache) -> LoadedEngine:
        cxx = _compiler(request)
        remember_isa_probes(cache.root)  # before cache_parts, which asks for the ISA too
        parts = cache_parts(request, artifacts, cxx)

        def build(directory: Path) -> None:
            with inductor_cache(cache.root):
                self._compile(request, artifacts, directory / PACKAGE, cxx)
            _check_loads_in_child(directory / PACKAGE, request, cxx, cache.root)

        entry = cache.get_or_build("inductor", parts, build, label=f"inductor {request.cell_id}")
        package = entry / PACKAGE
        try:
            with inductor_cache(cache.root), torch._inductor.config.patch(_ISA_FROM_FLAGS):
                compiled = torch._inductor.aoti_load_package(str(package))
        except Exception as exc:
            raise EngineBuildError(f"{request.cell_id}: loading AOTInductor package {package} failed: {exc}") from exc
        runner = InductorRunner(compiled, tuple(i.name for i in request.inputs), request.outputs, request.device,
                                request.precision, label=request.cell_id)
        module = artifacts.torch_module()
        facts = EngineFacts(artifact_bytes=package.stat().st_size,
                            layers=sum(1 for m in module.modules() if not list(m.children())),
                            parameters=sum(p.numel() for p in module.parameters()),
                            detail={"layer_kind": "leaf modules of the exported model"})
        return LoadedEngine(runner=runner, facts=facts, artifact=package)

    def _compile(self, request: EngineRequest, artifacts: ModelArtifacts, package: Path, cxx: str) -> None:
        """Export and compile with the ONNX export's conventions: sample inputs in their configured dtype
        (only floating ones cast to the precision: token ids stay integers), outputs in the configured
        order (by key for dict and named-tuple outputs), axis 0 dynamic over the profile's batch range and
        each named axis over its range (engines.onnx.export.export_dims, shared with the ONNX export)."""
        dtype = _DTYPES[request.precision]
        module = copy.deepcopy(artifacts.torch_module()).to(device=request.device, dtype=dtype).eval()
        batch = max(2, min(request.profile.opt_batch, 8))
        args = tuple(t.to(request.device, dtype) if t.is_floating_point() else t.to(request.device)
                     for t in sample_inputs(request.inputs, batch))
        dims = export_dims(request.inputs, max(1, request.profile.min_batch), request.profile.max_batch,
                           named_as_hints=True)
        module = with_configured_outputs(module, args, request.outputs, request.cell_id)
        log.info("inductor: exporting and compiling %s with %s (this takes a while)", request.cell_id, cxx)
        try:
            settings = {"cpp.cxx": (None, cxx), **_NO_PRECOMPILED_HEADERS, **_ISA_FROM_FLAGS}
            with warnings.catch_warnings(), torch.inference_mode(), torch._inductor.config.patch(settings):
                warnings.simplefilter("ignore")
                shapes = input_dynamic_shapes(module, request.inputs, dims)
                exported = torch.export.export(module, args, dynamic_shapes=shapes)
                torch._inductor.aoti_compile_and_package(exported, package_path=str(package))
        except Exception as exc:
            raise EngineBuildError(f"{request.cell_id}: torch.export/AOTInductor failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
