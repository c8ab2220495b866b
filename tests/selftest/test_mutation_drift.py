"""The mutation gate cannot drift (issue 43): a mutated function changed without its mutants re-run fails here.

tools/mutation.sh exited 1 on main with 36 unlisted survivors because commits changed mutated functions and nobody
re-ran them. Each mutation target's fingerprint (its syntax tree without docstrings) is recorded by a clean run of
tools/mutation.sh in docs/mutation-survivors.md; this test compares them with the code now.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tools import mutation_targets as targets

ROOT = Path(__file__).resolve().parents[2]


#: Targets whose last whole run left survivors nobody has yet killed or explained (tools/mutation.sh exits 1 on
#: them): named here, each with its count, so that this test still holds every other target to its fingerprint.
#: A target leaves this list when a clean run records its fingerprint (the second test then fails until it does).
NOT_YET_CLEAN: dict[str, str] = {}  # none since 2026-11-29: check_latency and component run clean


def test_every_mutated_target_was_tested_as_it_is_now() -> None:
    stale = [p for p in targets.drifted(targets.PATTERNS, targets.SURVIVORS.read_text(encoding="utf-8"))
             if p not in NOT_YET_CLEAN]
    commands = "\n".join(f"  bash tools/mutation.sh '{p}'" for p in stale)
    assert not stale, (f"{len(stale)} mutation target(s) changed since tools/mutation.sh last ran them clean; run "
                       f"their mutants and kill or list the survivors (docs/mutation-survivors.md):\n{commands}")


def test_a_target_named_not_yet_clean_has_no_clean_run_recorded() -> None:
    recorded = targets.recorded(targets.SURVIVORS.read_text(encoding="utf-8"))
    assert [p for p in NOT_YET_CLEAN if p in recorded] == [], "a clean run was recorded: remove it from NOT_YET_CLEAN"
    assert set(NOT_YET_CLEAN) <= set(targets.PATTERNS)


def test_a_changed_function_is_named_and_a_docstring_or_comment_is_not(tmp_path: Path) -> None:
    for rel in ("suite/gate/latency.py", "suite/verdict.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    method = f"{targets.L}LatencyChecksǁbusy_matters__mutmut_*"
    patterns = [method, "suite.verdict.*", f"{targets.L}LatencyChecksǁungated__mutmut_*"]
    text = targets.record(patterns, "# survivors\n", tmp_path)
    assert targets.drifted(patterns, text, tmp_path) == []
    source = (tmp_path / "suite/gate/latency.py").read_text(encoding="utf-8")
    marker = "    def busy_matters("
    assert marker in source
    head, tail = source.split(marker, 1)
    signature, body = tail.split("\n", 1)
    (tmp_path / "suite/gate/latency.py").write_text(f"{head}{marker}{signature}\n        # a comment\n{body}",
                                                    encoding="utf-8")
    assert targets.drifted(patterns, text, tmp_path) == []  # a comment is not code
    body = body.replace("return ", "return not ", 1)
    (tmp_path / "suite/gate/latency.py").write_text(f"{head}{marker}{signature}\n{body}", encoding="utf-8")
    assert targets.drifted(patterns, text, tmp_path) == [method]  # the method changed: only it is named
    assert targets.recorded(targets.record([method], text, tmp_path))[method] == targets.fingerprint(method, tmp_path)
    (tmp_path / "suite/verdict.py").unlink()
    assert targets.fingerprint("suite.verdict.*", tmp_path) == "missing"


def test_every_pattern_names_code_that_exists() -> None:
    assert [p for p in targets.PATTERNS if targets.fingerprint(p) == "missing"] == []
