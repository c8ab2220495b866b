"""Reproducible builds: ``--rebuild-check N`` builds each selected engine N times from scratch and says
whether the builds agree.

Why: TensorRT users compared layer counts between builds by hand; a build that changes with every run
(tactic selection, autotuning, a timestamp in the file) makes a nightly comparison measure the build,
not the upgrade. Each build gets an empty cache of its own, so the whole chain (ONNX export, fp16
conversion, int8 calibration, engine or package) is made again; only the model's own fixtures (trained
weights) come from the suite's cache, since the question is about engines, not about training.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.cache import ArtifactCache
from core.hashing import file_sha256

FIXTURE_KINDS = ("weights", "preflight")


class RebuildCache(ArtifactCache):
    """A fresh cache for engine artifacts; the model's fixtures are read from the suite's cache."""

    def __init__(self, root: Path | str, fixtures: ArtifactCache) -> None:
        super().__init__(root)
        self.fixtures = fixtures

    def get_or_build(self, kind: str, parts: Mapping[str, Any], build: Callable[[Path], None],
                     label: str = "") -> Path:
        if kind in FIXTURE_KINDS:
            return self.fixtures.get_or_build(kind, parts, build, label)
        return super().get_or_build(kind, parts, build, label)


@dataclass
class Build:
    index: int
    artifact: str | None  # path relative to its build's cache
    artifact_sha256: str | None
    artifact_bytes: int | None
    facts: dict[str, Any]
    outputs: dict[str, np.ndarray]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "artifact": self.artifact, "artifact_sha256": self.artifact_sha256,
                "artifact_bytes": self.artifact_bytes, "seconds": round(self.seconds, 2),
                "size_mb": self.facts.get("size_mb"), "layers": self.facts.get("layers"),
                "parameters": self.facts.get("parameters"), "precision_census": self.facts.get("precision_census")}


def build_once(make_session: Callable[[ArtifactCache], Any], cell: Any, fixtures: ArtifactCache,
               feed: Mapping[str, np.ndarray], index: int) -> Build:
    """One build of ``cell`` from scratch in a temporary cache, and its outputs on ``feed``."""
    import time

    scratch = fixtures.root / "rebuild-check"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch, prefix=f"build{index}-") as tmp:
        cache = RebuildCache(tmp, fixtures)
        session = make_session(cache)
        start = time.perf_counter()
        engine = session.engine(cell)
        seconds = time.perf_counter() - start
        outputs = session.run_batched(cell, dict(feed))
        artifact = Path(engine.artifact) if engine.artifact is not None else None
        digest = file_sha256(artifact) if artifact is not None and artifact.is_file() else None
        return Build(index, None if artifact is None else str(artifact.relative_to(tmp)), digest,
                     None if artifact is None or not artifact.is_file() else artifact.stat().st_size,
                     engine.facts.as_dict(), outputs, seconds)


def compare_builds(builds: list[Build]) -> dict[str, Any]:
    """Whether the artifacts are byte-identical, whether the outputs are bitwise identical and, if not, the
    largest difference from the first build's (NaN where only one of two is NaN counts as infinite)."""
    first = builds[0]
    digests = {b.artifact_sha256 for b in builds}
    identical_outputs = True
    largest = 0.0
    for b in builds[1:]:
        for name, ref in first.outputs.items():
            got = b.outputs[name]
            if not np.array_equal(ref, got, equal_nan=True):
                identical_outputs = False
                a, c = np.asarray(ref, np.float64), np.asarray(got, np.float64)
                both_nan = np.isnan(a) & np.isnan(c)
                diff = np.where(both_nan, 0.0, np.abs(a - c))
                largest = max(largest, float(np.nan_to_num(diff, nan=np.inf).max()))
    layers = sorted({str(b.facts.get("layers")) for b in builds})
    return {"builds": len(builds), "artifact_kind": first.artifact and Path(first.artifact).name,
            "identical_artifacts": None if None in digests else len(digests) == 1,
            "identical_outputs": identical_outputs, "max_abs_difference": largest,
            "layers": layers, "sizes_bytes": [b.artifact_bytes for b in builds],
            "per_build": [b.as_dict() for b in builds]}


def describe(cell_id: str, summary: Mapping[str, Any]) -> str:
    """One line per cell for the terminal."""
    artifacts = {True: "byte-identical", False: "differ", None: "no artifact (torch)"}[summary["identical_artifacts"]]
    outputs = ("bitwise identical" if summary["identical_outputs"]
               else f"differ, largest {summary['max_abs_difference']:.3g}")
    sizes = ", ".join("-" if s is None else f"{s / 1e6:.2f} MB" for s in summary["sizes_bytes"])
    return (f"{cell_id}: {summary['builds']} builds; artifacts {artifacts} ({sizes}); outputs {outputs}; "
            f"layers {'/'.join(summary['layers'])}")
