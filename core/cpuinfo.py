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
