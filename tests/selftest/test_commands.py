"""The tools users call are commands on PATH once the project is installed (issue 25): each [project.scripts]
entry names a tools/ module's main(), and the installed command answers --help."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_user_facing_tool_is_a_command() -> None:
    tools = {p.stem for p in (ROOT / "tools").glob("*.py") if p.stem != "__init__"}
    # set-up's and tools/mutation.sh's, and the GPU sittings' pytest plugin (-p tools.seeded_dup_conv): not a user's
    own = {"trt_typings", "mutation_targets", "seeded_dup_conv"}
    assert {target.split(":")[0].removeprefix("tools.") for target in SCRIPTS.values()} == tools - own
    assert all(name.startswith("suite-") for name in SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_command_names_a_main_that_answers_help(name: str) -> None:
    module, _, function = SCRIPTS[name].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    installed = shutil.which(name, path=str(Path(sys.executable).parent))
    assert installed, f"{name} is not installed beside {sys.executable}: bash setup.sh (pip install -e .) makes it"
    done = subprocess.run([installed, "--help"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"usage: {name}" in done.stdout
