"""pytest-benchmark's files, written whole or not at all, and (under xdist) one file from every worker's cases:
a valid baseline either way."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_benchmark

from suite.results import write_json_atomic


def atomic_benchmark_files(config: pytest.Config) -> None:
    """pytest-benchmark writes its JSON (``--benchmark-json``) and storage entries (``--benchmark-save``,
    ``--benchmark-autosave``) with a plain open(): a run killed while writing leaves a truncated file, which
    then poisons ``latest`` and ``last:K``. Its two writers go through write_json_atomic instead (the file is
    the old one or the whole new one); xdist runs write theirs with write_benchmark_json below."""
    bench = getattr(config, "_benchmarksession", None)
    if bench is None:
        return
    storage = bench.storage

    failed: list[tuple[str, str, OSError]] = []
    config.stash[_UNWRITTEN_KEY] = failed

    def save_json(output_json: dict[str, Any]) -> None:
        try:
            write_json_atomic(Path(bench.json), output_json)
        except OSError as exc:  # a full disk: a line and a failed check (suite/hooks/verdict_wiring.py), no traceback
            failed.append(("--benchmark-json", str(bench.json), exc))
            return
        bench.logger.info(f"Wrote benchmark data in: {bench.json}", purple=True)

    def save(output_json: dict[str, Any], name: str) -> None:
        path = storage.get(f"{storage._next_num}_{name}.json")
        try:
            write_json_atomic(path, output_json)
        except OSError as exc:
            failed.append(("pytest-benchmark's storage entry", str(path), exc))
            return
        bench.logger.info(f"Saved benchmark data in: {path}")

    bench.save_json = save_json
    if hasattr(storage, "get") and hasattr(storage, "_next_num"):  # file storage (not elasticsearch)
        storage.save = save


_UNWRITTEN_KEY = pytest.StashKey[list[tuple[str, str, OSError]]]()


def unwritten_benchmark_files(config: pytest.Config) -> list[tuple[str, str, OSError]]:
    """(what, where, error) of each pytest-benchmark file this run could not write (atomic_benchmark_files)."""
    return list(config.stash.get(_UNWRITTEN_KEY, []))


def write_benchmark_json(config: pytest.Config, benchmarks: list[dict[str, Any]], environment: dict[str, Any],
                         complete: bool, incomplete_reason: str | None,
                         self_test_knobs: dict[str, Any] | None = None,
                         identity: dict[str, Any] | None = None) -> list[Path]:
    """The controller's one pytest-benchmark file (storage entry and/or --benchmark-json), from every worker's
    cases, written atomically; as loadable by --latency-baseline and --benchmark-compare as a single run's.
    ``identity``: the suite's commit and config (suite/hooks/run_identity.py run_identity), as a single run's file has
    them."""
    bench = getattr(config, "_benchmarksession", None)
    if bench is None or not benchmarks:
        return []
    machine_info = bench.get_machine_info()
    machine_info["suite_environment"] = environment
    doc = {"machine_info": machine_info,
           "commit_info": config.hook.pytest_benchmark_generate_commit_info(config=config),
           "benchmarks": sorted(benchmarks, key=lambda b: str(b.get("fullname"))),
           "datetime": datetime.now(UTC).isoformat(), "version": pytest_benchmark.__version__,
           "suite": {"complete": complete, "incomplete_reason": incomplete_reason, "merged_from_workers": True,
                     **(identity or {}),
                     **({"self_test_knobs": self_test_knobs} if self_test_knobs else {})}}
    written = []
    name = bench.save or bench.autosave
    if name:
        path = bench.storage.get(f"{bench.storage._next_num}_{name}.json")
        write_json_atomic(path, doc)
        written.append(path)
    if bench.json:  # pytest-benchmark < 5.3 holds --benchmark-json as the file it opened, 5.3 as its path
        target = Path(getattr(bench.json, "name", bench.json))
        write_json_atomic(target, doc)
        written.append(target)
    return written
