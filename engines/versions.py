"""The installed version of a library, as the cache keys of the ONNX artifacts hold it.

Its own module because engines/artifacts.py (the export's key) and engines/onnx/convert.py and quantize.py (the
conversion's, fusion's and calibration's keys) all read it, and artifacts.py imports those two. Each caller
looks it up here when it builds a key (``versions.version_of(...)``), so a test fixes every key's versions in
one place (tests/selftest/test_cache_keys.py).
"""

from __future__ import annotations

import importlib.metadata


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
