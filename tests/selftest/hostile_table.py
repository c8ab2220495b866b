"""Run the hostile-input corpus and write its table into docs/reliability.md.

The cases are test_hostile_inputs.py's ``CASES`` (one list, used by the self-test and here, beside it):
each bad input is run end to end, as a child pytest run of the suite, and the table records what the user
sees (the error line, or the verdict and its first failed check), the number of lines printed, the exit
code, and whether that is the expected behaviour, a known gap (an xfail of the self-test, with where its fix
belongs) or a regression.

    .venv/bin/python tests/selftest/hostile_table.py                 # all cases; rewrites the table in the doc
    .venv/bin/python tests/selftest/hostile_table.py --print         # the same, to stdout only
    .venv/bin/python tests/selftest/hostile_table.py --only ID,ID --print

The table sits between the markers ``<!-- hostile-table:begin -->`` and ``<!-- hostile-table:end -->``;
the rest of the doc is left as it is. Runs take place in a temporary directory, removed afterwards. Exit
status: 0, or 1 when a case that is not a known gap falls short of its expectation (a regression).

Why here and not in tools/: it is a view of the test corpus, and tools/ import no test code (issue 25). pytest
does not collect it (its name does not start with test_).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from suite.verdict import EXIT_NOT_JUDGED  # noqa: E402
from tests.selftest.test_hostile_inputs import CASES, Case, Result, headline, problems, run_corpus  # noqa: E402

DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- hostile-table:begin -->", "<!-- hostile-table:end -->"
WIDTH = 220  # characters of the quoted line


def status(case: Case, result: Result, found: list[str]) -> str:
    if case.xfail and found:
        return "**gap** (xfail, below)"
    if case.xfail:
        return "**fixed?** meets its expectation: remove the xfail"
    if found:
        return "**REGRESSION**: " + "; ".join(found)
    if case.exit == EXIT_NOT_JUDGED:
        return "ok: not judged, saying why"
    return {4: "ok: one start-up error", 0: "ok: passes"}.get(case.exit, "ok: fails, naming it")


def _code(text: str) -> str:
    """A markdown code span that survives a table cell: no pipes, no backticks, one line."""
    text = text.replace("`", "'").replace("|", "\\|")
    return f"`{text}`" if text else ""


def quoted(case: Case, result: Result, root: Path) -> str:
    line = headline(case, result).replace(str(result.work), "WORK").replace(str(root), "TMP")
    line = re.sub(r"\b[0-9a-f]{64}\b", "KEY", line)
    return line if len(line) <= WIDTH else line[:WIDTH - 1] + "…"


def table(cases: list[Case], results: dict, root: Path, seconds: float) -> tuple[str, int]:
    shared = Counter(case.run for case in cases)
    rows, regressions, gaps = [], 0, []
    for n, case in enumerate(cases, start=1):
        result = results[case.run]
        found = problems(case, result)
        regressions += bool(found) and not case.xfail
        if case.xfail and found:
            gaps.append(case)
        lines = f"{result.lines}" + ("\\*" if shared[case.run] > 1 else "")
        rows.append(f"| {n} | {case.input} (`{case.id}`) | {_code(quoted(case, result, root))} | {lines} | "
                    f"{result.returncode} | {status(case, result, found)} |")
    import onnxruntime
    import torch

    when = datetime.date.today().isoformat()
    cpu = sum(r.cpu for r in results.values() if r.cpu == r.cpu)
    load = os.getloadavg()[0]
    head = [
        f"{len(cases)} cases in {len(results)} runs: {seconds:.0f} s on {os.cpu_count()} cores (the runs' CPU time "
        f"{cpu:.0f} s; load average {load:.1f} at the end), {platform.machine()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {when}. "
        "\\* a run shared by several cases (independent inputs of one run): its line count is the run's.",
        "",
        "| # | bad input (case) | what the user sees | lines | exit | status |",
        "|---|---|---|---|---|---|",
    ]
    notes = ["", "Known gaps (each an `xfail(strict=True)` of tests/selftest/test_hostile_inputs.py; the fix makes "
                 "it XPASS, which fails until the mark is removed):", ""]
    notes += [f"- `{case.id}`: {case.xfail}" for case in gaps] or ["- none"]
    return "\n".join(head + rows + notes), regressions


def write(doc: Path, text: str) -> None:
    content = doc.read_text()
    if BEGIN not in content or END not in content:
        raise SystemExit(f"{doc}: the markers {BEGIN} and {END} are missing; add them where the table goes")
    before, rest = content.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    doc.write_text(f"{before}{BEGIN}\n{text}\n{END}{after}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated case ids (default: every case)")
    parser.add_argument("--print", action="store_true", help="print the table instead of writing the doc")
    parser.add_argument("--doc", type=Path, default=DOC, help=f"the doc to write (default: {DOC.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    cases = CASES
    if args.only:
        wanted = [c.strip() for c in args.only.split(",") if c.strip()]
        unknown = sorted(set(wanted) - {c.id for c in CASES})
        if unknown:
            parser.error(f"--only: unknown case(s) {', '.join(unknown)}; valid: {', '.join(c.id for c in CASES)}")
        cases = [c for c in CASES if c.id in wanted]
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        start = time.perf_counter()
        results = run_corpus(cases, Path(tmp))
        text, regressions = table(cases, results, Path(tmp), time.perf_counter() - start)
    if args.print or args.only:
        print(text)
    else:
        write(args.doc, text)
        print(f"wrote the table of {len(cases)} cases into {args.doc}")
    if regressions:
        print(f"{regressions} case(s) fall short of their expectation and are not known gaps", file=sys.stderr)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
