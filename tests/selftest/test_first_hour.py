"""A newcomer's first hour (issue 24): what a first run says must hold. --collect-only lists tests and builds or
runs no model; '... and N more' points at the files that hold all of them, or says how to get them; --device's
help names every device form the suite takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from suite.verdict import EXIT_NOT_JUDGED
from tests.selftest.fake_options import options_stash
from tests.selftest.suite_runs import ROOT, explain, run_suite

pytestmark = pytest.mark.selftest


def test_collect_only_builds_and_runs_no_model(tmp_path: Path) -> None:
    done = run_suite(tmp_path, "--collect-only")
    assert done.returncode == 0, explain(done)
    assert "engine cache: 0 hits, 0 builds" in done.stdout, explain(done)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_dir() and p.name == "preflight"], explain(done)


def test_collect_only_never_claims_a_results_file(tmp_path: Path) -> None:
    """issue 43's defects: `--co --suite-results X` printed 'suite results written to X' and wrote nothing, leaving
    yesterday's X to read as today's. The earlier file is removed, saying so; with none there, none is claimed."""
    results = tmp_path / "out" / "results.json"
    results.parent.mkdir()
    results.write_text('{"verdict": {"verdict": "passed"}, "records": []}')  # an earlier run's
    done = run_suite(tmp_path, "--collect-only", "--suite-results", str(results))
    assert done.returncode == 0 and "suite results written to" not in done.stdout, explain(done)
    assert (f"suite results: none written to {results} (--collect-only judges nothing); the earlier run's file there "
            "was removed, so that nothing reads it as this run's") in done.stdout, explain(done)
    assert not list(results.parent.iterdir()), explain(done)  # neither the file nor an empty record stream
    done = run_suite(tmp_path, "--collect-only", "--suite-results", str(results))
    assert f"suite results: none written to {results} (--collect-only judges nothing)\n" in done.stdout, explain(done)


def test_and_n_more_says_where_all_of_them_are(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from suite.hooks.summary import _more

    lines: list[str] = []
    tr = SimpleNamespace(write_line=lines.append)
    for options, says in (({"suite_results": None}, "to list all of them, run with --suite-results FILE or "
                                                     "--html FILE"),
                          ({"suite_results": "r.json"}, "all of them in --suite-results r.json"),
                          ({"suite_results": "r.json", "htmlpath": "r.html"},
                           "all of them in --suite-results r.json and the HTML report r.html")):
        config = SimpleNamespace(stash=options_stash(**options))
        _more(tr, 3, config)
        assert lines[-1] == f"  ... and 3 more ({says})", lines[-1]
    _more(tr, 0, config)
    assert len(lines) == 3  # nothing more: no line


def test_device_help_names_every_form() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    text = " ".join(done.stdout.split())
    start = text.index("--device=DEVICE")
    assert "cuda:N (one GPU)" in text[start:start + 400] and "cuda (every visible GPU" in text[start:start + 400]


def test_benchmark_histogram_writes_its_svgs(tmp_path: Path) -> None:
    """main: --benchmark-histogram ended the run with an ImportError (pygal missing): no summary, no verdict."""
    done = run_suite(tmp_path, "--models", "steady", "--latency-rounds", "3", "--benchmark-histogram",
                     str(tmp_path / "hist"), tests=(str(ROOT / "tests" / "latency" / "test_latency.py"),))
    assert done.returncode in (0, 1, EXIT_NOT_JUDGED) and "VERDICT:" in done.stdout, explain(done)
    assert sorted(p.name for p in tmp_path.glob("hist-*.svg")) == ["hist-steady-bs1-all.svg",
                                                                     "hist-steady-bs4-all.svg"], explain(done)
