"""Inductor's CPU vector-ISA probes, answered once per machine instead of once per process.

Inductor picks the CPU ISA it compiles for by building a probe library per candidate ISA and loading it in a child
Python (``VecISA.check_build``); ``aoti_load_package`` asks again at every load, for an advisory warning only
(pytorch#191715). On torch 2.11 each child imports torch: on the H200 machine the children took 30 s at the first
AOTInductor load of every xdist worker (inductor-first-load-profile.txt in docs/results/2026-11-26b-h200x2/), which is
a fixed cost that a run on two GPUs pays twice. Newer torch (2.14) remembers a passed probe itself, with a
``.load_ok`` marker beside the probe library (``VecISA._probe_load``). For a torch without that, ``remember_probes``
keeps the same kind of marker in the engine cache, keyed on everything that decides the answer: the probe's code
and flags, the compiler, torch, the Python that loads it, the CPU's flags and the kernel (AMX needs the OS).
"""

from __future__ import annotations

import functools
import hashlib
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.cpuinfo import cpuinfo
from core.hashing import digest

#: Under the engine cache's inductor directory (engines.inductor.backend.WORK_DIR).
MARKERS = "isa-probes"

CheckBuild = Callable[[Any, str], bool]


def probe_key(isa: Any, code: str, compiler: Any) -> dict[str, Any]:
    """Everything that decides whether one probe passes on this machine."""
    import torch

    return {"isa": type(isa).__name__, "arch_flags": isa.build_arch_flags(),
            "code": hashlib.sha256(code.encode()).hexdigest(), "compiler": compiler, "torch": torch.__version__,
            "python": sys.executable, "cpu_flags": " ".join(cpuinfo()[1] or ()), "kernel": platform.release()}


def remembering(check_build: CheckBuild, markers: Path, compiler: Callable[[], Any]) -> CheckBuild:
    """``check_build`` that runs a probe only when no marker says it passed before on this machine; a passed probe
    leaves one (a failed one does not, as in torch's own)."""

    def check(isa: Any, code: str) -> bool:
        marker = markers / f"{digest(probe_key(isa, code, compiler()))}.ok"
        if marker.is_file():
            return True
        passed = check_build(isa, code)
        if passed:
            markers.mkdir(parents=True, exist_ok=True)
            marker.touch()
        return passed

    check.__wrapped__ = check_build  # type: ignore[attr-defined]
    return check


def remember_probes(work_dir: Path, identify: Callable[[str], Any], vec_isa: Any = None) -> bool:
    """Make this process's ISA probes use markers under ``work_dir``; True when that changed anything (False on a
    torch that remembers them itself, or where it is already done). ``identify`` names a compiler by its path and
    version: the probes are built with inductor's configured one at the time."""
    if vec_isa is None:
        from torch._inductor.cpu_vec_isa import VecISA as vec_isa
    if hasattr(vec_isa, "_probe_load") or hasattr(vec_isa.check_build, "__wrapped__"):
        return False
    identified = functools.cache(identify)

    def compiler() -> Any:
        from torch._inductor import config

        cxx = config.cpp.cxx
        return identified(next((c for c in (cxx if isinstance(cxx, (list, tuple)) else (cxx,)) if c), "g++"))

    vec_isa.check_build = remembering(vec_isa.check_build, Path(work_dir) / MARKERS, compiler)
    return True
