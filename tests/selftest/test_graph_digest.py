"""The traced graph in the export's key (issue 43, item 3): whatever in Python changes what the export computes moves
every key, and nothing else does: the digest is the same in every process.

A factory that set a ``functools.partial`` keyword, a lambda's closure, a module global or a config five dicts deep,
or a helper function edited in another file, changed the export and none of what the model digest reads; a warm
cache reused the old file (10 hits, 0 builds, passed; a fresh cache: failed). Here each route's v1 and v2
(tests/selftest/wrong_answer_models.py) are traced for real, as a run traces them, with a recording cache that
builds nothing; the hostile corpus runs the same five end to end on a warm cache. The other fields of every key are
tested in test_cache_keys.py, with the trace replaced: torch.export hangs in the forked children of the mutation
gate, whose selection that file is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from core.inputs import InputSpec
from engines.artifacts import ModelBuild
from tests.selftest.test_cache_keys import CalibrationSet, RecordingCache, _keys

pytestmark = pytest.mark.selftest

TWO_INPUTS = (InputSpec("image", (1, 8, 8)), InputSpec("extra", (3,), low=-1.0))


def _route_keys(tmp_path: Path, factory: Callable[[], torch.nn.Module], exporter: str = "dynamo",
                fusion: str | None = None) -> tuple[str, dict[str, str]]:
    """(the model digest, every precision's key) of wrong_answer_models' two-input net, traced for real."""
    build = ModelBuild("m", factory, TWO_INPUTS, ("out",), RecordingCache(tmp_path),  # type: ignore[arg-type]
                       calibration=CalibrationSet, int8_options={"method": "minmax"},
                       export_overrides={"exporter": exporter})
    return build.model_digest(), _keys(build, fusion)


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("route", ["partial", "closure", "global", "nested"])
def test_what_the_factory_changes_in_the_export_changes_every_key(tmp_path: Path, route: str, exporter: str) -> None:
    """A partial's keyword, a lambda's closure, a module global, a value five dicts deep: v2 exports 1.5x the
    logits, eager computes the same, and the model digest stays what it was (which a warm cache matched, reusing
    v1's file). The traced graph has the factor in it, so every key moves; the same factory twice, the same keys."""
    import tests.selftest.wrong_answer_models as models

    v1, v2 = (getattr(models, f"{route}_scaled_{v}") for v in ("v1", "v2"))
    digest, before = _route_keys(tmp_path, v1, exporter)
    assert _route_keys(tmp_path, v1, exporter) == (digest, before)
    digest_v2, after = _route_keys(tmp_path, v2, exporter)
    assert digest_v2 == digest  # what the model digest sees: nothing
    assert all(after[p] != before[p] for p in before), (before, after)
    if exporter == "torchscript":  # the fused chain's export (convert.FUSION_EXPORTER) is traced the same way
        assert _route_keys(tmp_path, v2, fusion="bert")[1] != _route_keys(tmp_path, v1, fusion="bert")[1]


def test_a_helper_edited_in_another_file_changes_every_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's classes unchanged, a function they call edited (as between two runs): the graph moves."""
    import importlib
    import sys

    import tests.selftest.wrong_answer_models as models

    (tmp_path / "helper_model.py").write_text(models.HELPER_MODEL)
    (tmp_path / "export_helper.py").write_text(models.helper_source(1.0))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import helper_model  # type: ignore[import-not-found]

        digest, before = _route_keys(tmp_path, helper_model.make)
        assert _route_keys(tmp_path, helper_model.make)[1] == before
        (tmp_path / "export_helper.py").write_text(models.helper_source(1.5))
        importlib.reload(sys.modules["export_helper"])
        digest_v2, after = _route_keys(tmp_path, helper_model.make)
        assert digest_v2 == digest
        assert all(after[p] != before[p] for p in before), (before, after)
    finally:
        for name in ("helper_model", "export_helper"):
            sys.modules.pop(name, None)


def test_the_graph_digest_is_the_same_in_every_process() -> None:
    """A warm cache must be a hit in the next run: no address, path, line or hash seed in the digest."""
    import subprocess
    import sys

    code = ("from engines.artifacts import ModelBuild\n"
            "from core.inputs import InputSpec\n"
            "from tests.selftest.wrong_answer_models import nested_scaled_v2\n"
            "inputs = (InputSpec('image', (1, 8, 8)), InputSpec('extra', (3,), low=-1.0))\n"
            "b = ModelBuild('m', nested_scaled_v2, inputs, ('out',), None)\n"
            "print(b.traced(b.export_options).digest, b.traced(b.export_options_for(4)).digest)\n"
            "b = ModelBuild('m', nested_scaled_v2, inputs, ('out',), None)\n"
            "print(b.traced({**b.export_options, 'exporter': 'torchscript'}).digest)\n")
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(digests) == 1, digests
    (out,) = digests
    assert len(set(out.split())) == 3, out  # dynamic, static batch 4 and torchscript: three graphs
