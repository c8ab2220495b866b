"""The version of a library, as the cache keys of the ONNX artifacts hold it.

Its own module because engines/artifacts.py (the export's key) and engines/onnx/convert.py and quantize.py (the
conversion's, fusion's and calibration's keys) all read it, and artifacts.py imports those two. Each caller
looks it up here when it builds a key (``versions.version_of(...)``), so a test fixes every key's versions in
one place (tests/selftest/test_cache_keys.py).

The version is the imported module's (its ``__version__``), not a distribution's: onnxruntime-gpu installs the
module ``onnxruntime`` under another distribution name, so the metadata of a distribution "onnxruntime" said
"absent" for every version, and an upgrade reused the files the old converter and quantizer made (issue 43).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any


def version_of(module: str) -> str:
    """``module``'s version as this process imports it; its distribution's where the module has no
    ``__version__``; "absent" where it cannot be imported."""
    try:
        imported = _imported(module)
    except ImportError:
        return "absent"
    version = getattr(imported, "__version__", None)
    if isinstance(version, str) and version:
        return version
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _imported(module: str) -> Any:
    if module == "onnxruntime":  # every import of it goes through the backend's, which turns telemetry off
        from engines.ort_import import import_onnxruntime

        return import_onnxruntime()
    return importlib.import_module(module)
