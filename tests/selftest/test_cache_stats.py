"""Cache stats travel from pytest-xdist workers to the controller and add up to one summary line; a
cache root that cannot hold entries is one clear error at start-up."""

from __future__ import annotations

import json
import sys

import pytest

from core.cache import ArtifactCache, CacheUnusable
from core.cache_stats import CacheEvent, CacheStats

pytestmark = pytest.mark.selftest


def _worker(hits, builds, seconds, waits=0, waited=0.0, corrupt=()):
    events = [CacheEvent("onnx", f"hit {i}", "k", "hit") for i in range(hits)]
    events += [CacheEvent("onnx", label, "k", "rebuild-corrupt", 1.0, detail) for label, detail in corrupt]
    return CacheStats(hits=hits, builds=builds, build_seconds=seconds, events=events, waits=waits,
                      wait_seconds=waited)


def test_summary_line_is_unchanged_without_waits_and_names_them_with():
    assert _worker(14, 0, 0.0).summary_line() == "engine cache: 14 hits, 0 builds, 0.0 s building"
    assert _worker(3, 2, 41.0, 1, 12.0).summary_line() == \
        "engine cache: 3 hits, 2 builds, 41.0 s building, 1 wait (12.0 s)"
    assert _worker(0, 0, 0.0, 2, 3.25).summary_line().endswith(", 2 waits (3.2 s)")


def test_workers_stats_survive_json_and_add_up_with_their_corrupt_rebuilds():
    workers = [_worker(3, 1, 10.0), _worker(0, 2, 31.0, 1, 12.0, [("quantize int8", "/c/onnx/ab: checksum")]),
               _worker(5, 0, 0.0, 2, 4.0, [("tensorrt fp16", "/c/trt/cd: no manifest.json")])]
    sent = [json.loads(json.dumps(w.as_dict())) for w in workers]
    total = sum((CacheStats.from_dict(d) for d in sent), CacheStats())
    assert (total.hits, total.builds, total.build_seconds, total.waits, total.wait_seconds) == (8, 3, 41.0, 3, 16.0)
    assert [(e.kind, e.label, e.detail) for e in total.corrupt_rebuilds] == [
        ("onnx", "quantize int8", "/c/onnx/ab: checksum"), ("onnx", "tensorrt fp16", "/c/trt/cd: no manifest.json")]
    assert total.summary_line() == "engine cache: 8 hits, 3 builds, 41.0 s building, 3 waits (16.0 s)"
    assert all(e.action != "hit" for e in total.events), "hit events are counted, not shipped"
    assert workers[0].hits == 3 and len(workers[0].events) == 3, "adding must not change the operands"


@pytest.mark.parametrize("record,field", [
    ([1, 2], "not a mapping"), ({"hits": "3"}, "hits is '3'"), ({"builds": 1.5}, "builds is 1.5"),
    ({"wait_seconds": -1}, "wait_seconds is -1"), ({"waits": True}, "waits is True"),
    ({"events": {}}, "events is a dict"), ({"events": [{"kind": "onnx"}]}, "events[0] is not a cache event"),
])
def test_malformed_stats_record_names_the_field(record, field):
    with pytest.raises(ValueError, match="cache stats record") as raised:
        CacheStats.from_dict(record)
    assert field in str(raised.value)


def test_usable_root_is_created_and_left_clean(tmp_path):
    root = tmp_path / "a" / "cache"
    ArtifactCache(root).ensure_usable()
    assert root.is_dir() and list(root.iterdir()) == []


def test_root_that_is_a_file_is_unusable(tmp_path):
    (tmp_path / "cache").write_text("")
    with pytest.raises(CacheUnusable, match=f"^engine cache {tmp_path / 'cache'} is a file, not a directory$"):
        ArtifactCache(tmp_path / "cache").ensure_usable()


def test_root_that_cannot_be_created_is_unusable(tmp_path):
    (tmp_path / "file").write_text("")
    root = tmp_path / "file" / "cache"
    with pytest.raises(CacheUnusable, match=f"^engine cache {root} cannot be created: Not a directory$"):
        ArtifactCache(root).ensure_usable()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc, a directory nobody can write to")
def test_root_that_is_not_writable_is_unusable():
    """/proc/self refuses new files even to root, unlike a chmod'ed directory."""
    with pytest.raises(CacheUnusable, match="^engine cache /proc/self is not writable: ") as raised:
        ArtifactCache("/proc/self").ensure_usable()
    assert isinstance(raised.value, ValueError) and "\n" not in str(raised.value)
