"""Entry verification: every malformed manifest, and an entry copied over another's address, is
reported as corrupt with its reason and rebuilt; none of them may crash a rerun."""

from __future__ import annotations

import json
import shutil

import pytest

from core.cache import ArtifactCache
from core.cache_manifest import MANIFEST, CacheEntryCorrupt, verify_entry

pytestmark = pytest.mark.selftest

BASE = {"model_digest": "abc", "engine": "onnxruntime", "precision": "int8",
        "versions": {"onnxruntime": "1.31.1"}, "calibration": {"samples": 256}}
PLAN = b"0123456789"


def _writer(content: bytes, calls: list):
    def build(d):
        calls.append(d)
        (d / "engine.bin").write_bytes(content)
    return build


def _file(m, **meta):
    m["files"]["engine.bin"] = meta
    return m


def _change(m, **changes):
    return _file(m, **{**m["files"]["engine.bin"], **changes})


MALFORMED = {
    "not JSON": (lambda m: "{not json", "not JSON"),
    "empty file": (lambda m: "", "not JSON"),
    "not UTF-8": (lambda m: b"\xff\xfe{", "not UTF-8"),
    "a list": (lambda m: [m], "manifest is a JSON array, not an object"),
    "a number": (lambda m: 42, "manifest is a JSON number, not an object"),
    "key missing": (lambda m: {k: v for k, v in m.items() if k != "key"}, "manifest has no key"),
    "key not an object": (lambda m: {**m, "key": ["onnx"]}, "manifest key belongs to another entry"),
    "files missing": (lambda m: {k: v for k, v in m.items() if k != "files"}, "manifest files is missing"),
    "files a list": (lambda m: {**m, "files": list(m["files"])}, "files is a JSON array, not an object"),
    "files a string": (lambda m: {**m, "files": "engine.bin"}, "files is a JSON string, not an object"),
    "files empty": (lambda m: {**m, "files": {}}, "lists no files"),
    "file meta null": (lambda m: {**m, "files": {"engine.bin": None}}, "engine.bin is a JSON null, not an object"),
    "bytes missing": (lambda m: _file(m, sha256=m["files"]["engine.bin"]["sha256"]), "bytes of engine.bin is missing"),
    "bytes a string": (lambda m: _change(m, bytes="10"), "bytes of engine.bin is '10'"),
    "bytes a boolean": (lambda m: _change(m, bytes=True), "bytes of engine.bin is True"),
    "sha256 missing": (lambda m: _file(m, bytes=len(PLAN)), "sha256 of engine.bin is missing"),
    "sha256 not hex": (lambda m: _file(m, bytes=len(PLAN), sha256="abc"), "sha256 of engine.bin is 'abc'"),
    "path escapes": (lambda m: {**m, "files": {"../engine.bin": m["files"]["engine.bin"]}}, "'../engine.bin'"),
    "absolute path": (lambda m: {**m, "files": {"/etc/passwd": m["files"]["engine.bin"]}}, "'/etc/passwd'"),
    "lists itself": (lambda m: {**m, "files": {**m["files"], MANIFEST: m["files"]["engine.bin"]}}, "'manifest.json'"),
    "size wrong": (lambda m: _change(m, bytes=11), "manifest says 11"),
}


@pytest.mark.parametrize("damage", list(MALFORMED))
def test_malformed_manifest_is_corrupt_and_rebuilt_never_a_crash(tmp_path, damage):
    mutate, reason = MALFORMED[damage]
    events, calls = [], []
    cache = ArtifactCache(tmp_path, on_event=events.append)
    entry = cache.get_or_build("engine", BASE, _writer(PLAN, calls))
    manifest_path = entry / MANIFEST
    new = mutate(json.loads(manifest_path.read_text()))
    if isinstance(new, bytes):
        manifest_path.write_bytes(new)
    else:
        manifest_path.write_text(new if isinstance(new, str) else json.dumps(new))

    with pytest.raises(CacheEntryCorrupt) as raised:
        verify_entry(entry)
    assert str(entry) in str(raised.value) and reason in str(raised.value), str(raised.value)

    again = cache.get_or_build("engine", BASE, _writer(PLAN, calls))
    assert again == entry and len(calls) == 2 and (again / "engine.bin").read_bytes() == PLAN
    (corrupt,) = cache.stats.corrupt_rebuilds
    assert reason in corrupt.detail and str(entry) in corrupt.detail
    verify_entry(again)


def test_entry_copied_over_another_address_is_rebuilt_naming_the_differing_fields(tmp_path):
    """An fp32 entry copied over the int8 entry's directory has valid files; only its key gives it away."""
    cache, calls = ArtifactCache(tmp_path), []
    fp32 = {**BASE, "precision": "fp32", "calibration": None}
    src = cache.get_or_build("onnx", fp32, _writer(b"fp32 model", calls))
    dst = cache.entry_dir("onnx", BASE)
    shutil.copytree(src, dst)

    with pytest.raises(CacheEntryCorrupt, match="manifest key belongs to another entry"):
        verify_entry(dst)
    built = cache.get_or_build("onnx", BASE, _writer(b"int8 model", calls), label="quantize int8")
    assert built == dst and (built / "engine.bin").read_bytes() == b"int8 model" and len(calls) == 2
    (corrupt,) = cache.stats.corrupt_rebuilds
    assert corrupt.label == "quantize int8"
    assert "precision (manifest 'fp32', wanted 'int8')" in corrupt.detail, corrupt.detail
    assert 'calibration (manifest null, wanted {"samples": 256})' in corrupt.detail, corrupt.detail
    assert "model_digest" not in corrupt.detail, "only differing fields are named"
    verify_entry(src)
    verify_entry(built)


def test_manifest_records_exactly_the_addressed_key_and_the_label_beside_it(tmp_path):
    cache = ArtifactCache(tmp_path)
    parts = {**BASE, "label": "a part that happens to be called label"}
    entry = cache.get_or_build("onnx", parts, _writer(PLAN, []), label="export resnet18")
    manifest = verify_entry(entry)
    assert manifest["key"] == {"kind": "onnx", **parts} and manifest["label"] == "export resnet18"
    assert cache.get_or_build("onnx", parts, _writer(PLAN, [])) == entry and cache.stats.hits == 1


def test_entry_written_before_the_format_field_is_still_a_hit(tmp_path):
    """Manifests of earlier suites kept the label inside the key; a fleet's cache must not rebuild for that."""
    cache, calls = ArtifactCache(tmp_path), []
    entry = cache.get_or_build("engine", BASE, _writer(PLAN, calls), label="old")
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest["key"] = {**manifest["key"], "label": manifest.pop("label")}
    del manifest["format"]
    (entry / MANIFEST).write_text(json.dumps(manifest))
    assert cache.get_or_build("engine", BASE, _writer(PLAN, calls)) == entry and len(calls) == 1
    manifest["key"]["precision"] = "fp16"
    (entry / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CacheEntryCorrupt, match="belongs to another entry"):
        verify_entry(entry)


def test_key_that_changes_as_json_is_refused_before_building(tmp_path):
    """Integer dict keys sort differently once they are strings: such an entry could never verify."""
    calls = []
    with pytest.raises(TypeError, match=r"hashes differently once stored as JSON.*string dict keys"):
        ArtifactCache(tmp_path).get_or_build("engine", {"by_batch": {2: "a", 10: "b"}}, _writer(PLAN, calls),
                                             label="batches")
    assert calls == []


def test_build_that_writes_a_manifest_of_its_own_is_an_error(tmp_path):
    def build(d):
        (d / MANIFEST).write_text("{}")

    with pytest.raises(RuntimeError, match=f"wrote {MANIFEST}, a name the cache reserves"):
        ArtifactCache(tmp_path).get_or_build("engine", BASE, build, label="sneaky")
