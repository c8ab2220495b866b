"""The repository holds code (issue 45): measurements live in one folder, as summaries, and the tracked tree stays
small. Every clone, CI checkout and GPU staging pays for what is tracked: docs/results once held 31 MB of logs, HTML
reports and whole results files, 93 % of the tree. The rules are pure functions of the tracked files (path -> size),
checked here on this checkout's `git ls-files` and on made-up trees that break each of them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
#: The one measurements folder: a README.md index and one folder per sitting.
MEASUREMENTS = "docs/results"
#: `git archive HEAD | wc -c`, the tree as a checkout or a staging carries it.
TREE_LIMIT = 6_000_000
#: One tracked file outside the measurements folder (the largest today is a doc of under 100 KB).
FILE_LIMIT = 200_000
#: One sitting's folder: a summary.tar.gz, or a few .gz and short text files.
SITTING_LIMIT = 200_000
#: Not tracked anywhere: HTML reports, logs and images stay on the machine or in a CI artifact.
FORBIDDEN = (".html", ".htm", ".log", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".bmp", ".webp", ".pdf")
#: Text files whose paths into the measurements folder must exist.
TEXT = (".md", ".py", ".sh", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".ini")
#: A path into the measurements folder, not one inside a `git show REV:docs/results/...` (git history).
MEASUREMENT_PATH = re.compile(r"(?<![:\w/])docs/results(?:/[\w.-]+)*/?")


def tracked(root: Path = ROOT) -> dict[str, int]:
    """The checkout's tracked files (the index: committed or staged) and their sizes; deleted ones left out."""
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip(f"{root} is not a git checkout: nothing tracked to check")
    listing = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
    files = {}
    for name in listing.decode().split("\0"):
        if name and (root / name).is_file():
            files[name] = (root / name).stat().st_size
    return files


def archive_size(files: dict[str, int]) -> int:
    """What `git archive` writes for these files: a tar of 512-byte blocks (a header per file and per folder, the
    content padded, git's pax header and the two end blocks), in 10,240-byte records."""
    folders = {str(parent) for name in files for parent in PurePosixPath(name).parents if str(parent) != "."}
    blocks = sum(1 + -(-size // 512) for size in files.values()) + len(folders) + 2 + 2
    return -(-blocks * 512 // 10240) * 10240


def _sitting(name: str) -> str | None:
    parts = PurePosixPath(name).parts
    return parts[2] if name.startswith(MEASUREMENTS + "/") and len(parts) > 3 else None


def misplaced(files: dict[str, int]) -> list[str]:
    """One line per file or sitting that breaks a rule of the tracked tree."""
    problems = []
    sittings: dict[str, int] = {}
    for name, size in sorted(files.items()):
        kind = name.lower().removesuffix(".gz")
        if kind.endswith(FORBIDDEN):
            problems.append(f"{name}: an HTML report, log or image is not tracked (keep it in an artifact)")
        sitting = _sitting(name)
        if sitting is not None:
            sittings[sitting] = sittings.get(sitting, 0) + size
        elif name.startswith(MEASUREMENTS + "/") and name != f"{MEASUREMENTS}/README.md":
            problems.append(f"{name}: {MEASUREMENTS}/ holds README.md and one folder per sitting, nothing else")
        elif size > FILE_LIMIT:
            problems.append(f"{name}: {size:,} bytes, over {FILE_LIMIT:,} for a file outside {MEASUREMENTS}/")
    problems += [f"{MEASUREMENTS}/{sitting}/: {size:,} bytes, over {SITTING_LIMIT:,} for one sitting's summary"
                 for sitting, size in sorted(sittings.items()) if size > SITTING_LIMIT]
    return problems


def unindexed(files: dict[str, int], index: str) -> list[str]:
    """The sittings the index (README.md's table, one row per sitting) does not name."""
    listed = set(re.findall(r"^\| `([^`]+)` \|", index, flags=re.M))
    return sorted({s for s in map(_sitting, files) if s is not None} - listed)


def dangling(files: dict[str, int], read) -> list[str]:
    """Paths into the measurements folder, named in a tracked text file outside it, that are not tracked."""
    folders = {str(parent) for name in files for parent in PurePosixPath(name).parents}
    problems = []
    for name in sorted(files):
        if name.startswith(MEASUREMENTS + "/") or not name.endswith(TEXT):
            continue
        for match in MEASUREMENT_PATH.finditer(read(name)):
            path = match.group(0).rstrip("./")
            if path not in files and path not in folders:
                problems.append(f"{name}: {match.group(0)} is not in the tree")
    return problems


# ---- this checkout ----------------------------------------------------------------------------------------------


def test_the_tracked_tree_holds_code_and_summaries_within_its_limits():
    files = tracked()
    assert misplaced(files) == []
    assert archive_size(files) <= TREE_LIMIT, f"the tracked tree is {archive_size(files):,} bytes"


def test_every_sitting_is_in_the_index():
    files = tracked()
    assert unindexed(files, (ROOT / MEASUREMENTS / "README.md").read_text()) == []


def test_every_path_into_the_measurements_folder_exists():
    files = tracked()
    assert dangling(files, lambda name: (ROOT / name).read_text(errors="replace")) == []


def test_the_archive_size_is_git_archives():
    """The estimate is the figure the limit names, where HEAD is what is tracked (a clean checkout, as CI's)."""
    files = tracked()
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, check=True).stdout
    if status.strip():
        pytest.skip("the checkout has changes not committed: HEAD's archive is another tree")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
    assert archive_size(files) == len(archive)


# ---- each rule breaks ---------------------------------------------------------------------------------------------

TREE = {"README.md": 50_000, "suite/verdict.py": 20_000, f"{MEASUREMENTS}/README.md": 9_000,
        f"{MEASUREMENTS}/2026-11-27h-h200x2/summary.tar.gz": 112_000,
        f"{MEASUREMENTS}/2026-11-29-h200-probe/env.txt": 300,
        f"{MEASUREMENTS}/2026-11-29-h200-probe/probe.json.gz": 6_600}
INDEX = ("| sitting | machine |\n|---|---|\n| `2026-11-27h-h200x2` | 2 x H200 |\n"
         "| `2026-11-29-h200-probe` | 1 x H200 |\n")


def test_a_tree_of_code_and_summaries_passes():
    assert misplaced(TREE) == [] and unindexed(TREE, INDEX) == []
    assert archive_size(TREE) <= TREE_LIMIT


@pytest.mark.parametrize(("name", "size", "problem"), [
    ("docs/report.html", 1_000, "an HTML report, log or image"),
    ("gpu-results/warm1.log", 1_000, "an HTML report, log or image"),
    ("docs/shot.PNG", 1_000, "an HTML report, log or image"),
    (f"{MEASUREMENTS}/2026-11-27h-h200x2/warm2.html", 1_000, "an HTML report, log or image"),
    (f"{MEASUREMENTS}/2026-11-27h-h200x2/cold.log.gz", 1_000, "an HTML report, log or image"),
    ("tests/selftest/data/big.json", FILE_LIMIT + 1, "over 200,000 for a file outside"),
    (f"{MEASUREMENTS}/2026-11-27h-h200x2/warm1.json.gz", SITTING_LIMIT - 100_000, "over 200,000 for one sitting"),
    (f"{MEASUREMENTS}/study.json", 1_000, "holds README.md and one folder per sitting"),
], ids=["html", "log", "image", "html-in-a-sitting", "gzipped-log", "large-file", "large-sitting", "stray-file"])
def test_each_rule_names_what_breaks_it(name, size, problem):
    problems = misplaced({**TREE, name: size})
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_tree_over_its_limit_fails():
    big = {**TREE, **{f"fixtures/data/part{i}.npz": FILE_LIMIT - 1 for i in range(TREE_LIMIT // FILE_LIMIT + 1)}}
    assert misplaced(big) == [] and archive_size(big) > TREE_LIMIT


def test_a_sitting_not_in_the_index_is_named():
    tree = {**TREE, f"{MEASUREMENTS}/2026-11-30-h100/summary.tar.gz": 10_000}
    assert unindexed(tree, INDEX) == ["2026-11-30-h100"]


def test_a_path_into_the_measurements_folder_must_exist():
    texts = {"docs/gpu.md": f"see `{MEASUREMENTS}/2026-11-27h-h200x2/` and {MEASUREMENTS}/README.md.\n"
                            f"`git show cd5c68d:{MEASUREMENTS}/2026-11-23-h100/study.json` (history)",
             "tools/x.py": f"# {MEASUREMENTS}/2026-11-26-h200x2/warm1.log, "
                           f"{MEASUREMENTS}/2026-11-29-h200-probe/env.txt"}
    tree = {**TREE, **{name: len(text) for name, text in texts.items()}}
    assert dangling(tree, lambda name: texts.get(name, "")) == [
        f"tools/x.py: {MEASUREMENTS}/2026-11-26-h200x2/warm1.log is not in the tree"]
