"""What a run leaves behind: the ``--suite-results`` JSON, written atomically and marked complete or not.

Why atomic and marked: a results file is tomorrow's baseline. A run killed half-way (a CI timeout
sends SIGTERM; a user presses Ctrl-C) used to overwrite a complete file with a partial one and no
mark, and the cases it never reached then became "no baseline" in every later run. The file is now
written to a temporary name and renamed into place, so it is either the old file or the whole new
one, and ``complete`` says whether the run ended; the gates refuse an incomplete baseline unless
asked (``--accept-incomplete-baseline``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FORMAT = 2  # 2: adds complete, incomplete_reason, verdict, run


def write_json_atomic(path: Path | str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def results_document(*, environment: dict[str, Any], records: list[dict[str, Any]], engines: dict[str, Any],
                     verdict: dict[str, Any], complete: bool, incomplete_reason: str | None,
                     run: dict[str, Any], self_test_knobs: dict[str, Any] | None = None,
                     baseline_environment: dict[str, Any] | None = None) -> dict[str, Any]:
    """The --suite-results file: what the run measured, the verdict, whether it ran to its end, the self-test
    knobs it was made with (a file that has them is refused as a baseline: suite.gate.baselines), and what differs
    from its baselines' environments (suite/gate/baseline_environment.py; None: no baseline)."""
    return {"format": FORMAT, "complete": complete, "incomplete_reason": incomplete_reason,
            **({"self_test_knobs": self_test_knobs} if self_test_knobs else {}),
            "environment": environment, "baseline_environment": baseline_environment, "run": run,
            "verdict": verdict, "records": records, "engines": engines}


#: What a results file kept as a baseline although its run did not pass carries: its verdict then and who accepted it
#: (the nightly's accept_as_baseline). The accuracy baseline's loader takes such a file; without the mark a failed
#: night kept that way was refused by every later night (exit 4) until someone deleted it.
ACCEPTED_KEY = "accepted_as_baseline"


def accept_as_baseline(data: dict[str, Any], how: str) -> dict[str, Any]:
    """``data`` (a results file) marked as accepted as a baseline by ``how``, its verdict kept as it was."""
    verdict = data.get("verdict") if isinstance(data.get("verdict"), dict) else {}
    return {**data, ACCEPTED_KEY: {"how": how, "verdict": verdict.get("verdict")}}


def incompleteness(data: dict[str, Any]) -> str | None:
    """Why a saved results file (or pytest-benchmark JSON carrying the suite's ``suite`` block) is not
    a whole run, or None. Files written before the mark existed count as complete."""
    block = data.get("suite") if "benchmarks" in data else data
    if not isinstance(block, dict) or block.get("complete", True):
        return None
    return str(block.get("incomplete_reason") or "the run did not end")


def merge_streamed(records: list[dict[str, Any]], stream: Path) -> list[dict[str, Any]]:
    """``records`` and, after them, the records streamed to ``stream`` (FILE.partial.jsonl) that are not
    among them: what xdist workers measured before an interruption stopped them sending it."""
    if not stream.is_file():
        return records
    seen = {json.dumps(r, sort_keys=True, default=str) for r in records}
    merged = list(records)
    for line in stream.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line a killed process was writing
        key = json.dumps(record, sort_keys=True, default=str)
        if isinstance(record, dict) and key not in seen:
            seen.add(key)
            merged.append(record)
    return merged
