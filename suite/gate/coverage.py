"""Coverage, stated and enforced: which collected cases have a baseline counterpart, which do not, and which
baseline cases this run does not have. A baseline that matches nothing is a usage error (it would gate nothing), for
--latency-baseline, --accuracy-baseline and pytest-benchmark's --benchmark-compare-fail alike."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from suite.gate.baselines import BaselineError, key_label
from suite.gate.environment import BaselineEnvironment
from suite.options import options_of

# Case ids (suite/hooks/parametrize.py latency_case_id, Cell.id) -> what they measure, for coverage.
_ENGINES = "torch|onnxruntime|inductor|tensorrt"
_PRECISIONS = "fp32|tf32|fp16|bf16|int8"
_CELL = rf"(?P<model>.+)-(?P<engine>{_ENGINES})-(?P<precision>{_PRECISIONS})"
_LATENCY_ID = re.compile(rf"test_latency\[{_CELL}-(?P<shape>bs\d+(?:-[A-Za-z_]+\d+)*)(?:-(?P<path>model|graph))?\]$")
_ACCURACY_ID = re.compile(rf"test_top1_top5\[{_CELL}\]$")
_PARITY_ID = re.compile(rf"test_parity_on_dataset\[{_CELL}\]$")
_GENERATED_ID = re.compile(rf"test_parity_on_generated_inputs\[{_CELL}-(?P<distribution>[a-z]+)\]$")
_BATCHES_ID = re.compile(rf"test_parity_at_every_engine_batch\[{_CELL}\]$")  # data set generated:batches


@dataclass
class Coverage:
    """Which of this run's cases a baseline covers, and which baseline cases the run lacks."""

    cases: int = 0
    with_baseline: int = 0
    absent_from_run: int = 0
    absent_examples: tuple[str, ...] = ()
    saved_busy: int = 0  # of the run's cases with a baseline: how many were saved while the CPUs were busy

    @property
    def without_baseline(self) -> int:
        return self.cases - self.with_baseline

    def describe(self, gated: int | None = None) -> str:
        head = (f"gated {gated} of {self.cases} cases" if gated is not None
                else f"{self.with_baseline} of {self.cases} cases have a baseline")
        return (f"{head}; {self.without_baseline} without baseline; {self.absent_from_run} baseline cases absent "
                "from this run" + (f"; {self.saved_busy} of the baseline's cases were saved busy" if self.saved_busy
                                   else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "with_baseline": self.with_baseline, "without_baseline": self.without_baseline,
                "absent_from_run": self.absent_from_run, "absent_examples": list(self.absent_examples),
                "saved_busy": self.saved_busy}


class CoverageChecks(BaselineEnvironment):
    """The coverage part of the Gate (suite/gate/state.py). The fields are the Gate's."""

    busy_limit: float
    coverage: dict[str, Coverage]

    def set_coverage(self, nodeids: list[str], models: dict[str, Any]) -> None:
        """From the collected test ids: which cases have a baseline counterpart. Raises BaselineError when
        a baseline was given and matches none of the run's cases (it would gate nothing)."""
        if self.latency_baseline is not None:
            keys = {k for n in nodeids if (k := latency_key_of_nodeid(n)) is not None}
            base = set(self.latency_baseline.samples)
            self.coverage["latency"] = _coverage(keys, base, key_label)
            self.coverage["latency"].saved_busy = sum(
                1 for k in keys & base if self.latency_baseline.interference.get(k, 0.0) > self.busy_limit)
            if not keys & base:
                raise BaselineError(
                    f"--latency-baseline {self.latency_baseline.source}: none of this run's {len(keys)} latency cases "
                    f"has a counterpart among its {len(base)} cases, so it would gate nothing (e.g. run: "
                    f"{_examples(keys, key_label)}; baseline: {_examples(base, key_label)})")
        if self.results_baseline is not None:
            keys = {k for n in nodeids for k in record_keys_of_nodeid(n, models)}
            base = set(self.results_baseline.records)
            self.coverage["accuracy"] = _coverage(keys, base, " / ".join)
            if not keys & base:
                raise BaselineError(
                    f"--accuracy-baseline {self.results_baseline.source}: none of this run's {len(keys)} accuracy/"
                    f"parity records has a counterpart among its {len(base)} records, so it would gate nothing "
                    f"(e.g. run: {_examples(keys, ' / '.join)}; baseline: {_examples(base, ' / '.join)})")


def _coverage(keys: set[Any], base: set[Any], label: Callable[[Any], str]) -> Coverage:
    absent = sorted(base - keys)
    return Coverage(cases=len(keys), with_baseline=len(keys & base), absent_from_run=len(absent),
                    absent_examples=tuple(label(k) for k in absent[:8]))


def _examples(keys: set[Any], label: Callable[[Any], str]) -> str:
    shown = [label(k) for k in sorted(keys)[:3]]
    return ", ".join(shown) + (" ..." if len(keys) > 3 else "") if shown else "none"


def latency_key_of_nodeid(nodeid: str) -> tuple[str, str, str, str, str] | None:
    """The (model, engine, precision, shape, path) a test_latency id measures (ids: parametrize.latency_case_id)."""
    match = _LATENCY_ID.search(nodeid)
    if not match:
        return None
    return (match["model"], match["engine"], match["precision"], match["shape"], match["path"] or "all")


def record_keys_of_nodeid(nodeid: str, models: dict[str, Any]) -> list[tuple[str, ...]]:
    """The accuracy/parity record keys (suite.gate.baselines.record_key) a test will produce, from its id."""
    for pattern, kind in ((_ACCURACY_ID, "accuracy"), (_PARITY_ID, "parity"), (_GENERATED_ID, "generated"),
                          (_BATCHES_ID, "batches")):
        match = pattern.search(nodeid)
        if match is None or match["model"] not in models:
            continue
        model = models[match["model"]]
        cell = f"{match['model']}-{match['engine']}-{match['precision']}"
        if kind == "accuracy":
            return [("accuracy", cell, str(model.accuracy_dataset))]
        dataset = {"parity": str(model.parity_dataset), "batches": "generated:batches"}.get(
            kind, f"generated:{match.groupdict().get('distribution')}")
        return [("parity", cell, dataset, name) for name in model.outputs]
    return []


def benchmark_compared(bench: Any) -> set[str]:
    """The case names pytest-benchmark's session found in the compared run(s) (``--benchmark-compare``)."""
    return set().union(*(m.keys() for m in (bench.compared_mapping or {}).values()))


def benchmark_compare_coverage(config: pytest.Config, nodeids: list[str]) -> None:
    """pytest-benchmark's --benchmark-compare-fail matches cases by test id. A compared run that has none of
    this run's latency cases would compare nothing and pass: a usage error, as for --latency-baseline."""
    bench = getattr(config, "_benchmarksession", None)
    if bench is None or not getattr(bench, "compare_fail", None) or not bench.compared_mapping:
        return
    cases = [n for n in nodeids if "::test_latency[" in n]
    compared = benchmark_compared(bench)
    if cases and not compared & set(cases):
        raise pytest.UsageError(
            f"--benchmark-compare {options_of(config).benchmark_compare}: none of this run's {len(cases)} latency "
            f"cases is in the compared run's {len(compared)} (pytest-benchmark matches test ids, e.g. run: "
            f"{sorted(cases)[0]}; compared: {sorted(compared)[0] if compared else '-'}), so "
            "--benchmark-compare-fail would compare nothing")
