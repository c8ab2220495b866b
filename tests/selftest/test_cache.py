"""The engine cache: keys change with every keyed input, entries are atomic, corruption is rebuilt."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.cache import ArtifactCache
from core.cache_manifest import MANIFEST, CacheEntryCorrupt, verify_entry
from core.hashing import digest

pytestmark = pytest.mark.selftest

BASE = {"model_digest": "abc", "engine": "onnxruntime", "precision": "fp16",
        "profile": {"min": 1, "opt": 32, "max": 256}, "versions": {"onnxruntime": "1.31.1", "torch": "2.14.1"},
        "device": "cpu", "export": {"opset": 18}}


def _writer(content: bytes, calls: list):
    def build(d):
        calls.append(d)
        (d / "engine.bin").write_bytes(content)
    return build


def test_key_is_stable_and_order_independent():
    assert digest(BASE) == digest(dict(reversed(list(BASE.items()))))


@pytest.mark.parametrize("path,value", [
    (("model_digest",), "abd"), (("engine",), "tensorrt"), (("precision",), "int8"),
    (("profile", "max"), 128), (("versions", "onnxruntime"), "1.31.2"), (("versions", "torch"), "2.14.0"),
    (("device",), "cuda:0/NVIDIA H100"), (("export", "opset"), 17),
])
def test_every_keyed_input_changes_the_key(path, value):
    changed = json.loads(json.dumps(BASE))
    target = changed
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    assert digest(changed) != digest(BASE)


@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=4),
       st.text(min_size=1, max_size=5), st.integers())
def test_adding_a_part_changes_the_key(parts, name, value):
    if name in parts:
        return
    assert digest({**parts, name: value}) != digest(parts)


def test_second_request_hits_and_does_not_build(tmp_path):
    cache, calls = ArtifactCache(tmp_path), []
    first = cache.get_or_build("engine", BASE, _writer(b"plan", calls))
    second = cache.get_or_build("engine", BASE, _writer(b"plan", calls))
    assert first == second and len(calls) == 1
    assert (cache.stats.hits, cache.stats.builds) == (1, 1)
    assert cache.stats.summary_line().startswith("engine cache: 1 hits, 1 builds, ")


def test_changed_key_builds_a_new_entry(tmp_path):
    cache, calls = ArtifactCache(tmp_path), []
    a = cache.get_or_build("engine", BASE, _writer(b"a", calls))
    b = cache.get_or_build("engine", {**BASE, "precision": "int8"}, _writer(b"b", calls))
    assert a != b and len(calls) == 2 and (b / "engine.bin").read_bytes() == b"b"


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "manifest"])
def test_corrupt_entry_is_detected_reported_and_rebuilt(tmp_path, damage):
    events, calls = [], []
    cache = ArtifactCache(tmp_path, on_event=events.append)
    entry = cache.get_or_build("engine", BASE, _writer(b"0123456789", calls))
    target = entry / "engine.bin"
    if damage == "truncate":
        target.write_bytes(b"01234")
    elif damage == "flip":
        target.write_bytes(b"0123456780")
    elif damage == "delete":
        target.unlink()
    else:
        (entry / MANIFEST).write_text("{not json")
    with pytest.raises(CacheEntryCorrupt):
        verify_entry(entry)
    again = cache.get_or_build("engine", BASE, _writer(b"0123456789", calls))
    assert len(calls) == 2 and (again / "engine.bin").read_bytes() == b"0123456789"
    assert [e.action for e in events] == ["start", "build", "start", "rebuild-corrupt"]
    assert len(cache.stats.corrupt_rebuilds) == 1
    expected = "manifest" if damage == "manifest" else "engine.bin"
    assert expected in cache.stats.corrupt_rebuilds[0].detail
    verify_entry(again)


def test_failed_build_leaves_nothing_behind(tmp_path):
    cache = ArtifactCache(tmp_path)

    def broken(d):
        (d / "half.bin").write_bytes(b"x")
        raise RuntimeError("builder crashed")

    with pytest.raises(RuntimeError, match="builder crashed"):
        cache.get_or_build("engine", BASE, broken)
    left = sorted(p.name for p in (tmp_path / "engine").iterdir())
    assert left == [f"{cache.entry_dir('engine', BASE).name}.lock"], "only the entry's lock file may remain"
    assert cache.stats.builds == 0


def test_build_that_writes_nothing_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="wrote no files"):
        ArtifactCache(tmp_path).get_or_build("engine", BASE, lambda d: None, label="empty")


def test_unhashable_key_part_is_rejected(tmp_path):
    with pytest.raises(TypeError, match="not hashable into a key"):
        digest({"thing": object()})


def test_an_unwritable_kind_directory_is_found_at_start_up(tmp_path):
    """A writable root whose onnx/ is not: one CacheUnusable naming it (a PermissionError in every build before).
    chmod does not stop root, so as root onnx/ is a link to /sys (sysfs: root cannot create files there either)."""
    from core.cache import CacheUnusable
    from tests.selftest.suite_runs import make_unwritable

    kind = tmp_path / "onnx"
    make_unwritable(kind)
    try:
        with pytest.raises(CacheUnusable, match=rf"^engine cache {tmp_path}: its onnx/ directory is not writable: "):
            ArtifactCache(tmp_path).ensure_usable()
    finally:
        if not kind.is_symlink():
            kind.chmod(0o755)
