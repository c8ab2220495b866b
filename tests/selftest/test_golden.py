"""The golden comparison (issue 45: "behaviour unchanged, shown by the self-tests and a golden comparison of the
terminal summary and the HTML report of a fixed CPU run before and after"): one fixed, small run of the suite in a
child pytest (tests/selftest/data/golden_suite.toml: the tiny model, torch and ONNX Runtime, fp32 and fp16, accuracy
and parity, --html), its terminal summary and its HTML report turned into masked text (tests/selftest/golden.py) and
compared line by line with tests/selftest/golden/terminal.txt and report.txt. A difference fails with a unified diff.

A change that is meant to change what the run prints or reports rewrites them:

    SUITE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/selftest/test_golden.py -p no:cacheprovider

(the test then skips, saying that it rewrote them); review the rewritten files with `git diff` and commit them with
the change. Latency is left out of the run: its figures, and whether a case was timed busy (a line, a not-judged
reason, a re-measure), depend on the machine's load, not on the suite.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from tests.selftest.golden import mask, report_text, terminal_text
from tests.selftest.suite_runs import ROOT, ci_environment, explain, run_suite

pytestmark = pytest.mark.selftest

GOLDEN = Path(__file__).resolve().parent / "golden"
CONFIG = ROOT / "tests" / "selftest" / "data" / "golden_suite.toml"
TESTS = (str(ROOT / "tests" / "accuracy"), str(ROOT / "tests" / "parity" / "test_parity.py"))
#: Set to 1, the test rewrites the golden files from this run instead of comparing (and skips, saying so).
UPDATE = "SUITE_UPDATE_GOLDEN"


def _fixed_run(work: Path) -> dict[str, str]:
    """The fixed run in ``work`` (a cold engine cache: every engine is built, as the cache line says), with one CI
    variable of its own (pytest-html's environment block), as masked text per golden file. --precisions names fp16,
    so ONNX Runtime's fp16 cell is reported (not judged, precision-not-run) rather than left out with one line."""
    report = work / "report.html"
    done = run_suite(work, "--suite-config", str(CONFIG), "--precisions", "fp32,fp16", "--html", str(report),
                     "--self-contained-html", tests=TESTS, env=ci_environment(CI="selftest"))
    assert done.returncode == 0 and report.exists(), explain(done)
    paths = {str(work): "<work>", str(ROOT): "<root>"}
    return {"terminal.txt": terminal_text(done.stdout, paths), "report.txt": report_text(report.read_text(), paths)}


def test_the_fixed_run_prints_and_reports_what_the_golden_files_hold(tmp_path: Path) -> None:
    """One test for both files, so that pytest-xdist never makes the run twice (once per worker)."""
    texts = _fixed_run(tmp_path)
    if os.environ.get(UPDATE) == "1":
        GOLDEN.mkdir(exist_ok=True)
        for name, text in texts.items():
            (GOLDEN / name).write_text(text)
        pytest.skip(f"{', '.join(texts)} rewritten in {GOLDEN.relative_to(ROOT)} ({UPDATE}=1): review with git diff")
    problems = []
    for name, actual in texts.items():
        path = GOLDEN / name
        if not path.exists():
            problems.append(f"{path.relative_to(ROOT)} is missing: run this test with {UPDATE}=1 to write it")
            continue
        diff = list(difflib.unified_diff(path.read_text().splitlines(), actual.splitlines(),
                                         f"{path.relative_to(ROOT)} (golden)", "this run (masked)", n=2, lineterm=""))
        if diff:
            problems.append(f"the fixed run's {name.removesuffix('.txt')} differs from its golden file (- golden, + "
                            "this run):\n" + "\n".join(diff))
    if problems:
        pytest.fail("\n\n".join(problems) + f"\n\nif the change is meant, rewrite the golden files with {UPDATE}=1 "
                    "(tests/selftest/test_golden.py)", pytrace=False)


# ---- the masks: what varies is hidden, what the run says is not ----------------------------------------------------

PATHS = {"/tmp/pytest-of-ci/pytest-7/golden0": "<work>", "/src/suite": "<root>"}


def test_the_masks_hide_durations_dates_versions_hashes_paths_and_rounding_level_errors() -> None:
    assert mask("engine cache: 0 hits, 3 builds, 1.0 s building", PATHS) == \
        "engine cache: 0 hits, 3 builds, <s> building"
    assert mask("15 passed, 7 not judged in 3.31s", PATHS) == "15 passed, 7 not judged in <s>"
    assert mask("Report generated on 29-Nov-2026 at 15:50:22 by pytest-html v4.2.0", PATHS) == \
        "Report generated on <date> by pytest-html <version>"
    assert mask("config digest | golden_suite.toml sha256:b14d9dd3490f", PATHS) == \
        "config digest | golden_suite.toml sha256:<hash>"
    assert mask("onnxruntime 1.32.0's CPUExecutionProvider", PATHS) == "onnxruntime <version>'s CPUExecutionProvider"
    assert mask("--html /tmp/pytest-of-ci/pytest-7/golden0/report.html -c /src/suite/pyproject.toml", PATHS) == \
        "--html <work>/report.html -c <root>/pyproject.toml"
    assert mask("onnxruntime | fp32 | 100.0 | 1.68e-08 | 0.000147 | 1.000000 | 100.0 | passed", PATHS) == \
        "onnxruntime | fp32 | 100.0 | <err> | <err> | 1.000000 | 100.0 | passed"
    assert mask("worker time (span: setup, calls, teardown, idle): main 2.7 s: 0.0, 2.5, 0.2, 0.0", PATHS) == \
        "worker time (span: setup, calls, teardown, idle): main <s>: <t>, <t>, <t>, <t>"


@pytest.mark.parametrize(("before", "after"), [
    ("checks: 15 passed, 0 failed, 7 not judged", "checks: 14 passed, 1 failed, 7 not judged"),
    ("== VERDICT: PASSED ==", "== VERDICT: FAILED =="),
    ("not judged (precision-not-run, accepted): 7: the engine computes nothing",
     "not judged (precision-not-run, NOT accepted): 7: the engine computes nothing"),
    ("[tr data-cell=tiny-torch-fp16] torch | fp16 | 100.0 | <err> | <err> | 1.000000 | 100.0 | passed",
     "[tr data-cell=tiny-torch-fp16] torch | fp16 | 100.0 | <err> | <err> | 0.500000 | 100.0 | failed"),
    ("engine | fp32 | 42.19 | 100.0", "engine | fp32 | 40.62 | 100.0"),
    ("engine cache: 0 hits, 3 builds, 1.0 s building", "engine cache: 1 hits, 2 builds, 1.0 s building"),
    ("onnxruntime | fp16 | 100.0 | 5.23e-05", "onnxruntime | fp16 | 100.0 | 0.0052"),
])
def test_a_changed_verdict_count_reason_or_figure_stays_a_difference(before: str, after: str) -> None:
    assert mask(before, PATHS) != mask(after, PATHS)


def test_the_report_text_keeps_sections_rows_and_verdicts_and_masks_the_machine() -> None:
    page = ('<html><head><style>p {}</style></head><body><h2 id="suite-run">The run</h2>'
            '<table class="suite run"><tbody><tr class="" data-key="torch"><th>torch</th><td>2.14.1</td></tr>'
            '<tr data-key="workers"><th>workers</th><td>1</td></tr></tbody></table>'
            '<section id="suite-verdict" data-verdict="failed"><h2>Verdict: <span>failed</span></h2></section>'
            '<table class="suite environment"><thead><tr><th>key</th><th>value</th></tr></thead><tbody>'
            '<tr><td>device</td><td>cpu</td></tr><tr><td>hostname</td><td>vm</td></tr>'
            '<tr><td>torch</td><td>2.14.1</td></tr><tr><td>tensorrt</td><td>10.9.0</td></tr></tbody></table>'
            '<script>ignored()</script><template><p>ignored</p></template><p class="filter">(Un)check</p>'
            '<div class="summary__reload"><div>Reload<div>this page</div></div></div><p>0 Failed, 1 Skipped</p>'
            '<div id="data-container" data-jsonblob="{&#34;environment&#34;: {&#34;CI&#34;: &#34;selftest&#34;}, '
            '&#34;tests&#34;: {&#34;t::a&#34;: [{&#34;result&#34;: &#34;Skipped&#34;, &#34;log&#34;: '
            '&#34;not judged (busy): x\\n---- Captured log call ----\\nbuilt in 1.0 s&#34;}]}}"></div></body></html>')
    assert report_text(page, PATHS).splitlines() == [
        "The run", "[table suite run]", "[tr data-key=torch] torch | <machine>", "[tr data-key=workers] workers | 1",
        "[section id=suite-verdict data-verdict=failed]", "Verdict: failed", "[table suite environment]",
        "key | value", "device | cpu", "hostname | <machine>", "<library> | <version>", "0 Failed, 1 Skipped",
        "[div id=data-container]",
        "", "== pytest-html's results table (its JSON blob) ==", "environment: CI = selftest", "Skipped | t::a",
        "    not judged (busy): x"]


def test_the_terminal_text_starts_at_the_summary_and_leaves_out_pytests_warnings() -> None:
    stdout = ("....nn [100%]\n"
              "=============== warnings summary ===============\n"
              "/venv/_pytest/config/__init__.py:1507: PytestAssertRewriteWarning: ...\n"
              "-------------------- engines --------------------\n"
              "cell                 size MB   layers\n"
              "- Generated html report: file:///tmp/pytest-of-ci/pytest-7/golden0/report.html -\n"
              "4 passed, 1 warning, 2 not judged in 3.12s\n"
              "=============== VERDICT: PASSED ================\n"
              "  tests/x.py::t[a]: why\n")
    assert terminal_text(stdout, PATHS).splitlines() == [
        "-- engines --", "cell size MB layers", "-- Generated html report: file://<work>/report.html --",
        "4 passed, 2 not judged in <s>", "== VERDICT: PASSED ==", "  tests/x.py::t[a]: why"]
