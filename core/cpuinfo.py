"""The first CPU's model name and feature flags, from one read of /proc/cpuinfo: the environment record
(suite/environment.py) and the inductor ISA probe's key (engines/inductor/isa_probe.py) both need them, so they live
below both."""

from __future__ import annotations

import functools


@functools.cache
def cpuinfo() -> tuple[str | None, tuple[str, ...] | None]:
    """(model name, flags) of the first CPU: "model name" and "flags" ("Features" on ARM); None for what the file
    does not say, or where there is no such file."""
    model: str | None = None
    flags: tuple[str, ...] | None = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if model is None and line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif flags is None and line.startswith(("flags", "Features")):
                    flags = tuple(line.split(":", 1)[1].split())
                if model is not None and flags is not None:
                    break
    except OSError:
        pass
    return model, flags


# x86 instructions that multiply u8 by s8 and add into 32 bits in one step. Without them, ONNX Runtime's fused
# QLinearConv/QGemm kernels add pairs of products in 16 bits (vpmaddubsw), which saturate (docs/localization.md).
INT8_DOT_PRODUCT_X86 = ("avx512_vnni", "avx_vnni", "amx_int8")


def int8_pair_sums_saturate() -> bool | None:
    """True on an x86 CPU with AVX2 but none of INT8_DOT_PRODUCT_X86: int8 engines of ONNX Runtime's CPU EP lose
    accuracy there that a VNNI CPU keeps. None where the flags are unknown."""
    flags = cpuinfo()[1]
    if flags is None:
        return None
    return "avx2" in flags and not any(flag in flags for flag in INT8_DOT_PRODUCT_X86)
