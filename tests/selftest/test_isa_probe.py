"""Inductor's CPU ISA probes are answered once per machine (engines/inductor/isa_probe.py): a torch without its own
marker (2.11 on the GPU machine) otherwise spends 30 s of child Pythons at the first load of every xdist worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engines.inductor import isa_probe

pytestmark = pytest.mark.selftest


class FakeISA:
    """Stands in for torch's VecISA: only what the key reads."""

    def __init__(self, flags: str = "-mavx512f") -> None:
        self.flags = flags

    def build_arch_flags(self) -> str:
        return self.flags


def _probe(results: dict[str, bool], calls: list[str]) -> Any:
    def check_build(isa: Any, code: str) -> bool:
        calls.append(code)
        return results.get(code, True)
    return check_build


def test_a_passed_probe_is_not_run_again_by_another_process(tmp_path: Path) -> None:
    calls: list[str] = []
    first = isa_probe.remembering(_probe({}, calls), tmp_path, lambda: "g++ 13")
    assert first(FakeISA(), "vnni") is True and calls == ["vnni"]
    later = isa_probe.remembering(_probe({}, calls), tmp_path, lambda: "g++ 13")  # a new process, the same machine
    assert later(FakeISA(), "vnni") is True and calls == ["vnni"]


@pytest.mark.parametrize("change", ["code", "flags", "compiler"])
def test_anything_that_decides_a_probe_runs_it_again(tmp_path: Path, change: str) -> None:
    calls: list[str] = []
    isa_probe.remembering(_probe({}, calls), tmp_path, lambda: "g++ 13")(FakeISA(), "vnni")
    check = isa_probe.remembering(_probe({}, calls), tmp_path, lambda: "g++ 14" if change == "compiler" else "g++ 13")
    check(FakeISA("-mavx512f -mamx-tile" if change == "flags" else "-mavx512f"), "amx" if change == "code" else "vnni")
    assert len(calls) == 2


def test_a_failed_probe_is_not_remembered(tmp_path: Path) -> None:
    calls: list[str] = []
    check = isa_probe.remembering(_probe({"amx": False}, calls), tmp_path, lambda: "g++ 13")
    assert check(FakeISA(), "amx") is False and check(FakeISA(), "amx") is False
    assert calls == ["amx", "amx"] and not list(tmp_path.rglob("*.ok"))


def test_the_key_holds_the_machine_and_the_software() -> None:
    key = isa_probe.probe_key(FakeISA(), "vnni", "g++ 13")
    assert {"torch", "python", "cpu_flags", "kernel", "compiler", "arch_flags", "code", "isa"} <= set(key)


def test_remember_probes_wraps_only_a_torch_without_its_own_marker(tmp_path: Path) -> None:
    calls: list[str] = []

    class Old(FakeISA):  # torch 2.11: check_build loads the probe in a child Python every time
        check_build = _probe({}, calls)

    class New(Old):  # torch 2.14: VecISA._probe_load and its .load_ok marker
        def _probe_load(self, path: str) -> bool:
            return True

    new_check = New.check_build
    assert isa_probe.remember_probes(tmp_path, str, vec_isa=New) is False and New.check_build is new_check
    assert isa_probe.remember_probes(tmp_path, str, vec_isa=Old) is True
    assert isa_probe.remember_probes(tmp_path, str, vec_isa=Old) is False  # once per process
    Old().check_build("vnni")
    Old().check_build("vnni")
    assert calls == ["vnni"] and len(list((tmp_path / isa_probe.MARKERS).glob("*.ok"))) == 1
