"""Whether the TensorRT library itself is installed, and which version.

Why a module of its own: the backend's skip reasons, its build and the debug build all ask this first, and the
answer must tell the real library from ``tensorrt-stubs`` (type stubs only) without importing tensorrt at
module import.
"""

from __future__ import annotations

from typing import Any

NOT_INSTALLED = ("tensorrt is not installed (its wheels live only on NVIDIA's package index: "
                 "pip install --extra-index-url https://pypi.nvidia.com tensorrt)")


def require_tensorrt() -> str:
    """The installed TensorRT version; ImportError with an install hint when the library is not there.

    ``import tensorrt`` alone is not proof: with only ``tensorrt-stubs`` installed it imports an empty
    namespace package (a folder of .pyi files), which has neither ``Builder`` nor ``__version__``.
    """
    try:
        import tensorrt
    except ImportError as exc:
        raise ImportError(f"{NOT_INSTALLED}; import failed: {exc}") from exc
    version = getattr(tensorrt, "__version__", None)
    if not isinstance(version, str) or not hasattr(tensorrt, "Builder"):
        where = ", ".join(str(p) for p in getattr(tensorrt, "__path__", [])) or "?"
        raise ImportError(f"{NOT_INSTALLED}; `import tensorrt` found only type stubs or an empty package at {where}")
    return version


def tensorrt_api(api: Any = None) -> Any:
    """The tensorrt module the build steps call (``api.Builder``, ``api.BuilderFlag``, ``api.Dims``, ...): ``api``
    where the caller passes a stand-in (the CPU self-tests' fakes), else tensorrt itself, imported on first use."""
    if api is not None:
        return api
    import tensorrt

    return tensorrt
