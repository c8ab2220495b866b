"""Baselines: where they are, what they hold, and how a current case finds its counterpart.

Two formats, both written by ordinary runs, both carrying the environment fingerprint:

* latency: a pytest-benchmark JSON (``--benchmark-save NAME`` / ``--benchmark-autosave``), whose
  ``benchmarks[i]["extra_info"]["samples_s"]`` holds each case's per-round seconds and whose
  ``machine_info["suite_environment"]`` holds the fingerprint;
* accuracy/parity: the suite's own ``--suite-results FILE`` (``{"environment", "records", "engines"}``).

Cases are matched on what they measure, not on test ids: (model, engine, precision, batch size,
path) for latency, (kind, cell, dataset[, output]) for accuracy/parity, and for a generated parity case
its batch and seed too (its inputs). A renamed test id therefore
still finds its baseline, and a baseline from another machine lines up case by case.
"""

from __future__ import annotations

import json
import math
import platform
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metrics.drift import DriftTolerances
from suite.results import ACCEPTED_KEY, incompleteness

LatencyKey = tuple[str, str, str, str, str]
RecordKey = tuple[str, ...]


class BaselineError(ValueError):
    """A baseline that cannot be used; the message says which file and why."""


def parse_fraction(text: str, what: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05. A bare number above 1 is refused (was '5' meant as 5 %?)."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BaselineError(f"{what}: {text!r} is not a fraction; write e.g. 5% or 0.05") from None
    if not raw.endswith("%") and value > 1.0:
        raise BaselineError(f"{what}: {text!r} is ambiguous; write {raw}% or {value / 100:g}")
    if not (0.0 <= value < 10.0):
        raise BaselineError(f"{what}: {text!r} is out of range")
    return value


def parse_drift(text: str) -> DriftTolerances:
    """'top1=0.5pt,top5=1pt,isclose=1pt,mae=2x' (any subset; units optional) -> DriftTolerances."""
    keys = {"top1": "top1_pts", "top5": "top5_pts", "isclose": "isclose_pts", "mae": "mae_factor",
            "memory": "memory_factor"}
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        name, sep, raw = part.partition("=")
        name = name.strip().lower()
        if not sep or name not in keys:
            raise BaselineError(f"--accuracy-drift: {part!r}; expected NAME=VALUE with NAME in {', '.join(keys)}")
        number = re.sub(r"(pts?|x)$", "", raw.strip().lower())
        try:
            values[keys[name]] = float(number)
        except ValueError:
            raise BaselineError(f"--accuracy-drift: {part!r}: {raw!r} is not a number") from None
        if not math.isfinite(values[keys[name]]):  # 'nan' passes every range check below, and then gates nothing
            raise BaselineError(f"--accuracy-drift: {part!r}: {raw!r} is not a finite number")
        if values[keys[name]] < 0 or (name in ("mae", "memory") and values[keys[name]] < 1.0):
            raise BaselineError(f"--accuracy-drift: {part!r} out of range (points >= 0, mae and memory factors >= 1)")
    return DriftTolerances(**values)


# =========================================================================== latency


def latency_key(info: Mapping[str, Any]) -> LatencyKey | None:
    """(model, engine, precision, shape, path) of a latency record or a benchmark's extra_info. The shape is
    the case's ``bs32`` or ``bs32-seq128`` (suite.config.LatencyShape.id); records saved before shapes existed
    carry a batch size only, which is the same ``bs32``."""
    try:
        path = str(info.get("path", "all"))
        path = path[len("latency-"):] if path.startswith("latency-") else path
        shape = str(info.get("shape") or f"bs{int(info['batch_size'])}")
        return (str(info["model"]), str(info["engine"]), str(info["precision"]), shape, path)
    except (KeyError, TypeError, ValueError):
        return None


def key_label(key: LatencyKey) -> str:
    model, engine, precision, shape, path = key
    return f"{model}-{engine}-{precision}-{shape}-{path}"


@dataclass(frozen=True)
class LatencyBaseline:
    """One or more saved runs. ``samples[key]`` holds one list of per-round seconds per run that has
    the case (newest last); ``environment`` and ``datetime`` are the newest run's; ``fingerprints`` each run's
    (``saved_fingerprint``, as ``sources``), for the difference that opens the report."""

    sources: tuple[Path, ...]
    environment: dict[str, Any]
    datetime: str | None
    samples: dict[LatencyKey, list[list[float]]]
    interference: dict[LatencyKey, float]
    without_samples: tuple[str, ...] = ()
    fingerprints: tuple[dict[str, Any], ...] = ()
    sm_clock: dict[LatencyKey, float] = field(default_factory=dict)  # the median of the runs' median SM clocks
    #: how each run timed the case (its record's ``clock``: host timer, CUDA events, a spin ahead of a replay...);
    #: samples taken another way than the current run's are not comparable (suite/gate/latency.py)
    methods: dict[LatencyKey, tuple[str, ...]] = field(default_factory=dict)
    #: each case's (device kind, bound) as its newest run recorded them: its class for the between-night noise model
    #: (suite/gate/bound.py class_noise)
    classes: dict[LatencyKey, tuple[str, str]] = field(default_factory=dict)
    #: the hosts that measured each case (a merged night's case says its shard's host, ``extra_info.host``; else its
    #: run's ``hostname``): a baseline is keyed by GPU model and cell, never by host, so the gate says where it came
    #: from when that is not this host (suite/gate/latency.py other_host)
    hosts: dict[LatencyKey, tuple[str, ...]] = field(default_factory=dict)
    #: each run's host reference per round (``extra_info.host_ref_s``), aligned with ``samples[key]``: None for a run
    #: that has none (saved before the suite timed one); a host-bound case is paced with them (metrics/host_pace.py)
    host_refs: dict[LatencyKey, list[list[float] | None]] = field(default_factory=dict)

    @property
    def source(self) -> str:
        names = [str(p) for p in self.sources]
        return names[0] if len(names) == 1 else f"{len(names)} runs: {', '.join(names)}"


def benchmark_storage_dir(storage_option: str | None) -> Path:
    storage = storage_option or "file://./.benchmarks"
    if "://" in storage and not storage.startswith("file://"):
        raise BaselineError(f"--latency-baseline ids need a file:// benchmark storage, got {storage!r}; "
                            "pass the JSON file's path instead")
    return Path(storage.removeprefix("file://"))


def _machine_id() -> str:
    """pytest-benchmark's folder name for this machine (its utils.get_machine_id)."""
    return "-".join((platform.system(), platform.python_implementation(),
                     ".".join(platform.python_version_tuple()[:2]), platform.architecture()[0]))


def _saved_runs(storage: Path) -> list[Path]:
    """Saved runs of this machine's folder, else of the first folder that has any; oldest first."""
    folders = [storage / _machine_id()] + sorted(p for p in storage.glob("*") if p.is_dir())
    for folder in folders:
        files = sorted((f for f in folder.glob("*_*.json") if _RUN_ID.match(f.name)),
                       key=lambda f: (int(_RUN_ID.match(f.name).group(1)), f.name))  # type: ignore[union-attr]
        if files:
            return files
    return []


#: A saved run's file name: its number (pytest-benchmark counts on past 9999: 10000_x.json), then its name.
_RUN_ID = re.compile(r"^(\d{4,})_.*\.json$")


def resolve_latency_baselines(spec: str, storage: Path) -> list[Path]:
    """``--latency-baseline``: comma-separated files or saved run ids ('0003', '0003_nightly'), 'latest',
    or 'last:K' (the K newest saved runs) under the pytest-benchmark ``storage``. Oldest first."""
    paths: list[Path] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        candidate = Path(part)
        if candidate.is_file():
            paths.append(candidate)
            continue
        match = re.fullmatch(r"(?:last|latest):(\d+)", part)
        if part != "latest" and not match and not re.fullmatch(r"\d{4,}(_.*)?", part):
            raise BaselineError(f"--latency-baseline {part!r}: no such file, and not a run id (0001), "
                                "'latest' or 'last:K'")
        if match and int(match.group(1)) < 1:
            raise BaselineError(f"--latency-baseline {part!r}: K must be at least 1 (the K newest saved runs)")
        saved = _saved_runs(storage)
        if part == "latest" or match:
            chosen = saved[-(int(match.group(1)) if match else 1):] if saved else []
        else:
            chosen = [f for f in saved if f.name.startswith(part if "_" in part else part + "_")][-1:]
        if not chosen:
            raise BaselineError(f"--latency-baseline {part!r}: no saved pytest-benchmark run under {storage} "
                                "(save one with --benchmark-save NAME or --benchmark-autosave)")
        paths.extend(chosen)
    if not paths:
        raise BaselineError("--latency-baseline: empty")
    seen: dict[Path, int] = {}
    for path in paths:
        seen[path.resolve()] = seen.get(path.resolve(), 0) + 1
    twice = [str(p) for p, n in seen.items() if n > 1]
    if twice:
        raise BaselineError(f"--latency-baseline {spec!r} names the same run more than once ({', '.join(twice)}): "
                            "it would count as several runs and narrow the baseline's spread; name each run once")
    return paths


def _read_run(path: Path, what: str, key: str, form: str, accept_incomplete: bool) -> dict[str, Any]:
    """A saved run as a baseline reads it: its JSON, which must hold a ``key`` list (``form`` says what file that
    is), refused where the run did not end or was made with a self-test knob."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{what} {path}: cannot read JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise BaselineError(f"{what} {path}: not {form} (no '{key}' list)")
    _refuse_incomplete(path, data, accept_incomplete, what)
    return data


def _refuse_incomplete(path: Path, data: dict[str, Any], accept: bool, what: str) -> None:
    why = incompleteness(data)
    if why and not accept:
        raise BaselineError(f"{what} {path} was saved by a run that did not end ({why}): the cases it never reached "
                            "would become 'no baseline'; use a complete run, or pass --accept-incomplete-baseline")
    refuse_self_test_run(path, data, what)


def self_test_knobs(data: Mapping[str, Any]) -> dict[str, Any]:
    """The self-test knobs (--inject-slowdown, --inject-accuracy-drop) a saved run was made with: the ``suite``
    block of a pytest-benchmark file, the top level of a --suite-results file."""
    block = data.get("suite") if "benchmarks" in data else data
    knobs = block.get("self_test_knobs") if isinstance(block, Mapping) else None
    return dict(knobs) if isinstance(knobs, Mapping) else {}


def refuse_self_test_run(path: Path, data: Mapping[str, Any], what: str) -> None:
    """A run made with a self-test knob measured the knob, not the engine: as a baseline it would make a real
    slowdown read as an improvement (a 50 % injected slowdown saved, then a real +30 % read as -22 %)."""
    knobs = self_test_knobs(data)
    if knobs:
        said = ", ".join(f"{k} {v * 100:g}%" if isinstance(v, int | float) else f"{k} {v}" for k, v in knobs.items())
        raise BaselineError(f"{what} {path} was made with a self-test knob ({said}): its figures are the knob's, "
                            "not the engine's; use a run made without one")


def load_latency_baselines(paths: list[Path], accept_incomplete: bool = False) -> LatencyBaseline:
    samples: dict[LatencyKey, list[list[float]]] = {}
    interference: dict[LatencyKey, float] = {}
    clocks: dict[LatencyKey, list[float]] = {}
    methods: dict[LatencyKey, tuple[str, ...]] = {}
    classes: dict[LatencyKey, tuple[str, str]] = {}
    hosts: dict[LatencyKey, tuple[str, ...]] = {}
    host_refs: dict[LatencyKey, list[list[float] | None]] = {}
    without: list[str] = []
    environment: dict[str, Any] = {}
    fingerprints: list[dict[str, Any]] = []
    runs_seen: dict[str, Path] = {}
    when = None
    for path in paths:
        data = _read_run(Path(path), "latency baseline", "benchmarks", "a pytest-benchmark file", accept_incomplete)
        _refuse_copy(Path(path), data, runs_seen)
        run_environment = (data.get("machine_info") or {}).get("suite_environment") or {}
        run_host = run_environment.get("host_id") or run_environment.get("hostname")  # suite.environment.host_id
        for bench in data["benchmarks"]:
            extra = (bench.get("extra_info") if isinstance(bench, dict) else None) or {}
            key = latency_key(extra)
            if key is None:
                continue
            values = extra.get("samples_s")
            if not values:
                # Files saved with --benchmark-save-data hold pytest-benchmark's own per-round timings.
                values = (bench.get("stats") or {}).get("data")
            if not values:
                without.append(f"{path.name}:{bench.get('name', key_label(key))}")
                continue
            samples.setdefault(key, []).append(_samples(values, f"latency baseline {path}: {key_label(key)}"))
            refs = extra.get("host_ref_s")
            host_refs.setdefault(key, []).append(
                _samples(refs, f"latency baseline {path}: {key_label(key)}", "host_ref_s") if refs else None)
            host = extra.get("host") or run_host
            if isinstance(host, str) and host and host not in hosts.get(key, ()):
                hosts[key] = (*hosts.get(key, ()), host)
            clock = (extra.get("gpu") or {}).get("sm_clock_mhz")
            if isinstance(clock, (int, float)) and clock > 0:
                clocks.setdefault(key, []).append(float(clock))
            if isinstance(extra.get("clock"), str) and extra["clock"] not in methods.get(key, ()):
                methods[key] = (*methods.get(key, ()), extra["clock"])
            if isinstance(extra.get("bound"), str):
                classes[key] = ("cuda" if str(extra.get("device", "")).startswith("cuda") else "cpu", extra["bound"])
            gate = extra.get("gate") or {}
            if isinstance(gate.get("interference"), (int, float)):
                interference[key] = max(interference.get(key, 0.0), float(gate["interference"]))
        environment = dict((data.get("machine_info") or {}).get("suite_environment") or {})
        fingerprints.append(saved_fingerprint(data))
        when = data.get("datetime")
    return LatencyBaseline(sources=tuple(Path(p) for p in paths), environment=environment, datetime=when,
                           samples=samples, interference=interference, without_samples=tuple(without),
                           fingerprints=tuple(fingerprints),
                           sm_clock={k: float(statistics.median(v)) for k, v in clocks.items()}, methods=methods,
                           classes=classes, hosts=hosts, host_refs=host_refs)


def _refuse_copy(path: Path, data: dict[str, Any], seen: dict[str, Path]) -> None:
    """Two baseline files whose cases are the same to the last bit are one run saved twice (a copy, renamed or
    re-dated or not): as several runs they would give every case a run-to-run spread of zero, so that any move
    between nights reads as significant. Two real runs never time the same rounds."""
    cases = json.dumps(data["benchmarks"], sort_keys=True)
    if cases in seen:
        raise BaselineError(f"--latency-baseline: {path} holds the same cases and rounds as {seen[cases]}, a copy of "
                            "one run: counted twice it would make the run-to-run spread zero; name each run once")
    seen[cases] = path


def saved_fingerprint(data: Mapping[str, Any]) -> dict[str, Any]:
    """A saved run's environment as the difference compares it (metrics/environment_diff.py): its fingerprint, and
    the suite's commit and config from the run's ``suite`` block (pytest-benchmark file) or ``run`` block
    (--suite-results); a pytest-benchmark file saved before the suite recorded its commit has pytest-benchmark's
    commit_info instead. Empty where the run recorded no fingerprint (nothing to compare, not every key changed)."""
    benchmark = "benchmarks" in data
    environment = (data.get("machine_info") or {}).get("suite_environment") if benchmark else data.get("environment")
    if not isinstance(environment, Mapping) or not environment:
        return {}
    block = data.get("suite" if benchmark else "run")
    block = block if isinstance(block, Mapping) else {}
    commit = block.get("git_commit")
    info = data.get("commit_info")
    if commit is None and benchmark and isinstance(info, Mapping) and info.get("id"):
        commit = str(info["id"])[:12] + (" (uncommitted changes)" if info.get("dirty") else "")
    return {**environment, "suite_commit": commit, "suite_config": block.get("config_digest"),
            "suite_config_keys": block.get("config_keys")}


def _samples(values: Any, where: str, name: str = "samples_s") -> list[float]:
    """Per-round seconds from a baseline file: a list of positive, finite numbers, or a BaselineError."""
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in values):
        raise BaselineError(f"{where}: {name} must be a list of seconds, got {type(values).__name__} "
                            f"{str(values)[:60]!r}")
    bad = [v for v in values if not (0.0 < float(v) < float("inf"))]
    if bad:
        raise BaselineError(f"{where}: {name} holds {len(bad)} value(s) that are not positive finite seconds "
                            f"(e.g. {bad[0]!r})")
    return [float(v) for v in values]


# =========================================================================== accuracy / parity


def record_key(record: Mapping[str, Any]) -> RecordKey | None:
    """(kind, cell, dataset[, output]) of an accuracy or parity record; a generated case's key also holds its batch
    and seed (``batch 4``, ``seed 123``): its inputs, which a changed batch_sizes changes, so that a baseline
    drawn from other inputs is no counterpart."""
    kind = record.get("kind")
    if kind == "accuracy":
        return ("accuracy", str(record.get("cell")), str(record.get("dataset")))
    if kind == "parity":
        key = ("parity", str(record.get("cell")), str(record.get("dataset")), str(record.get("name")))
        if str(record.get("dataset")).startswith("generated:"):
            key += (f"batch {record.get('batch')}", f"seed {record.get('seed')}")
        return key
    return None


def case_key(key: RecordKey) -> RecordKey:
    """The case a record key belongs to, as a test id names it: (kind, cell, dataset[, output]), without a
    generated case's batch and seed."""
    return tuple(key[:4])


class RecordsByCase(dict):  # type: ignore[type-arg]
    """A baseline's records under their case (``case_key``; ``in``, ``[]`` and ``get`` take one): what the gate's
    coverage counts from test ids. ``counterpart`` looks a record up by its full record key (``record_key``: a
    generated case's batch and seed too): found only when those agree as well; one drawn at another batch or seed
    is no counterpart (not judged, no-baseline)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_key: dict[RecordKey, dict[str, Any]] = {}  # every record by its full key

    def add(self, record: dict[str, Any]) -> None:
        """A record of the baseline: under its case, and by its full key. One case may hold several records (a
        cell's generated:batches parity has one per batch): each stays its own counterpart."""
        key = record_key(record)
        if key is None:
            return
        self[case_key(key)] = record
        self.by_key[tuple(key)] = record

    def counterpart(self, key: RecordKey) -> dict[str, Any] | None:
        return self.by_key.get(tuple(key))


@dataclass(frozen=True)
class ResultsBaseline:
    source: Path
    environment: dict[str, Any]
    records: RecordsByCase = field(default_factory=RecordsByCase)
    #: ``saved_fingerprint`` of the file: for the difference that opens the report
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: cell id -> its peak GPU memory record (suite/lifetime.py): the drift gate's memory comparison, apart from
    #: the accuracy/parity cases the coverage counts
    gpu_memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: cell id -> the engine facts the baseline run recorded: the structure it is compared with (metrics/structure.py)
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: latency case (``latency_label``) -> each node's median time (us) when the run had --node-profile
    node_times: dict[str, dict[str, float]] = field(default_factory=dict)
    #: latency case -> the kernels one inference launched, with their GPU time, when the run had --kernel-profile
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)


def latency_label(record: dict[str, Any]) -> str:
    """A latency record's case as the latency gate names it: ``cell-shape-path`` (resnet50-onnxruntime-fp16-bs1-all)."""
    return f"{record.get('cell')}-{record.get('shape')}-{record.get('path')}"


def profiles_of(records: list[dict[str, Any]], field: str) -> dict[str, dict[str, Any]]:
    """One profile of a run's latency records, by case: ``node_times_us`` (--node-profile) or ``kernels``
    (--kernel-profile)."""
    return {latency_label(r): r[field] for r in records
            if isinstance(r, dict) and r.get("kind") == "latency" and isinstance(r.get(field), dict)}


def load_results_baseline(path: Path, accept_incomplete: bool = False) -> ResultsBaseline:
    data = _read_run(Path(path), "accuracy baseline", "records", "a --suite-results file", accept_incomplete)
    verdict = (data.get("verdict") or {}).get("verdict") if isinstance(data.get("verdict"), dict) else None
    if "verdict" in data and verdict != "passed" and not isinstance(data.get(ACCEPTED_KEY), dict):
        raise BaselineError(f"accuracy baseline {path}: its run's verdict was {verdict or 'missing'}, not passed: "
                            "figures that failed (or were not judged) would become the standard a later run is held "
                            "to; use the results of a run that passed (or one accepted as a baseline: "
                            "suite.results.accept_as_baseline)")
    records = RecordsByCase()
    memory: dict[str, dict[str, Any]] = {}
    for record in data["records"]:
        key = record_key(record) if isinstance(record, dict) else None
        if key is not None:
            records.add(record)
        elif isinstance(record, dict) and record.get("kind") == "gpu_memory":
            memory[str(record.get("cell"))] = record
    return ResultsBaseline(source=Path(path), environment=dict(data.get("environment") or {}), records=records,
                           gpu_memory=memory, fingerprint=saved_fingerprint(data),
                           engines={str(k): v for k, v in (data.get("engines") or {}).items() if isinstance(v, dict)},
                           node_times=profiles_of(data["records"], "node_times_us"),
                           kernels=profiles_of(data["records"], "kernels"))
