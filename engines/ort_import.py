"""``onnxruntime`` imported with its telemetry off, for every engine module that uses it: the ONNX tools
(engines/onnx: conversion, quantization, intermediates, the precision census), the ONNX Runtime backend
(engines/onnxrt), localization and the version keys. Its own module, below them all, so that engines/onnx
and engines/onnxrt import one way (onnxrt runs what onnx makes)."""

from __future__ import annotations

import os
from typing import Any

# ONNX Runtime (1.32) writes a device id and an event database under
# $XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime when the module is *imported*, unless this is set
# first; onnxruntime.disable_telemetry_events() alone comes too late for that. Set as this module loads, so
# that every import the suite makes through its engines finds it.
_TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"
os.environ[_TELEMETRY_ENV] = "1"


def import_onnxruntime() -> Any:
    """``onnxruntime``, imported with its telemetry off: nothing written outside the engine cache. Every
    use in the suite goes through here (sessions, the int8 calibrator, the fp16 converter)."""
    os.environ[_TELEMETRY_ENV] = "1"
    import onnxruntime as ort

    disable = getattr(ort, "disable_telemetry_events", None)  # from onnxruntime 1.8
    if disable is not None:
        disable()
    return ort
