"""Make the installed ``tensorrt-stubs`` usable by mypy, so CI really type-checks engines/trt.

Why: tensorrt-stubs 10.13.0.35.1 ships its ``py.typed`` outside the packages it types (mypy then
ignores the stubs and treats ``tensorrt`` as Any, checking nothing), and its ``tensorrt.pyi`` has
Python syntax errors (parameters named ``in``; a non-default parameter after defaults). This copies
the ``.pyi`` files into a typings directory (default ``.typings/``) with those lines repaired; point
``MYPYPATH`` at it. Nothing here changes a signature's meaning.
"""

from __future__ import annotations

import re
import shutil
import sys
import sysconfig
from pathlib import Path

PACKAGES = ("tensorrt", "tensorrt_bindings")
_IN_PARAM = re.compile(r"(\(|, )in: ")
_ADD_SCALE_ND = "power: Weights = None, channel_axis: int)"


def repair(text: str) -> str:
    text = _IN_PARAM.sub(r"\1in_: ", text)
    return text.replace(_ADD_SCALE_ND, "power: Weights = None, channel_axis: int = ...)")


def main(out: Path) -> int:
    site = Path(sysconfig.get_paths()["purelib"])
    if out.exists():
        shutil.rmtree(out)
    count = 0
    for package in PACKAGES:
        source = site / package
        stubs = sorted(source.glob("*.pyi")) if source.is_dir() else []
        if not stubs:
            print(f"trt_typings: no .pyi files in {source}; install tensorrt-stubs (--no-deps)", file=sys.stderr)
            return 1
        (out / package).mkdir(parents=True)
        for stub in stubs:
            repaired = repair(stub.read_text())
            compile(repaired.replace("...", "None"), str(stub), "exec")  # still a syntax error? fail here
            (out / package / stub.name).write_text(repaired)
            count += 1
    print(f"trt_typings: {count} stub files repaired into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".typings")))
