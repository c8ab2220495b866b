"""What a run collects: what the user left out by request is deselected, the cells that cannot run here by design are
left out with one line per reason, and so are the checks that could only end not judged in this run (a model's
accuracy check without labels, latency cases with nothing to judge them against), so that a CPU run's verdict is
mostly judgements (issue 47); the rest is put in run order; and which configured models the collected tests
exercise."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from engines import get_backend
from suite import options
from suite.config import ModelConfig
from suite.hooks import census_record
from suite.lifetime import HARNESS_TEST, cell_of, model_of_nodeid, run_order
from suite.session import Cell
from suite.state import NOT_COLLECTED_KEY, RUN_KEY, suite_session

_ROOT = Path(__file__).resolve().parent.parent.parent


#: Why the harness-overhead check cannot run off CUDA (also its skip where --overhead-model asks for it anyway).
HARNESS_ON_CPU = "the harness-overhead check compares CUDA-event loops; run with --device cuda:N"

#: The padding-invariance check (tests/parity/test_embeddings.py) and why it is left out for other models' cells.
PADDING_TEST = "test_embeddings.py::test_padding_does_not_change_embeddings["
PADDING_NOT_EMBEDDING = ("not sentence-embedding models (an input with role = \"attention_mask\" and a "
                         "parity_dataset): the padding-invariance check has nothing to pad")

#: The accuracy check of a model without labels (its one ``test_top1_top5[MODEL]``, not judged: no-data), left out.
NO_LABELS = ("declare no accuracy_dataset (labelled rows): top-1/top-5 has nothing to count, their engines are judged "
             "by parity; naming tests/accuracy or -m accuracy reports them (not judged, no-data)")

#: The latency cases of a run that neither judges nor keeps their times, left out (latency_unjudged).
LATENCY_UNJUDGED = ("latency cases with nothing to judge them against (no --latency-baseline or "
                    "--benchmark-compare-fail, nothing saved): --benchmark-autosave times them and keeps the run for "
                    "a later --latency-baseline last:K")

#: Options with which a run judges latency cases, keeps their times, or asks for latency by name: with any of them the
#: cases are collected (fields of suite/options.py's SuiteOptions: pytest-benchmark's options and the suite's own).
_LATENCY_WANTED = ("latency_baseline", "benchmark_compare_fail", "benchmark_save", "benchmark_autosave",
                   "benchmark_json", "benchmark_disable", "latency_rounds", "latency_batch_sizes",
                   "latency_paths", "node_profile", "kernel_profile", "inject_slowdown")

#: pytest-benchmark's --benchmark-only / --benchmark-skip mark what they leave out with these skips.
_BENCHMARK_FILTERS = ("Skipping non-benchmark (--benchmark-only active).",
                      "Skipping benchmark (--benchmark-skip active).")


def embedding_model_reason(model: ModelConfig) -> str | None:
    """Why ``model`` is not a sentence-embedding model the padding-invariance check can judge, or None."""
    if model.attention_mask is None:
        return f"{model.name} declares no input with role = \"attention_mask\": not a sentence-embedding model"
    if model.parity_dataset is None:
        return f"{model.name} declares no parity_dataset: no real sentences to pad"
    return None


def latency_unjudged(config: pytest.Config) -> bool:
    """Whether this run's latency cases could only end not judged (no-baseline) and leave nothing behind: no
    --latency-baseline or --benchmark-compare-fail judges them, no --benchmark-save, -autosave or -json keeps their
    times, and no latency option asks for them. Timed and thrown away, they were 34 of the CPU tier's 125 checks,
    each 'not judged (no-baseline)' (issue 47)."""
    given = options.options_of(config)
    return not any(getattr(given, name) for name in _LATENCY_WANTED)


def asked_for(config: pytest.Config, path: Path, marker: str) -> bool:
    """Whether the command line asks by name for the checks of tests/MARKER at ``path`` (a test file, or that
    folder): ``-m`` naming the marker, or an argument at or below the folder that holds ``path`` (a test id, its
    file, the folder). pytest's default testpaths name nothing."""
    if re.search(rf"\b{marker}\b", options.options_of(config).markexpr):
        return True
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return False
    folder = _ROOT / "tests" / marker
    return any(arg.is_relative_to(folder) and path.resolve().is_relative_to(arg) for arg in _arg_paths(config))


def _arg_paths(config: pytest.Config) -> list[Path]:
    """The command line's test paths (a test id's file), resolved from where pytest was started."""
    return [(config.invocation_params.dir / arg.partition("::")[0]).resolve() for arg in config.args]


def unlabelled_model(item: pytest.Item) -> str | None:
    """The model of an accuracy check without labels (``test_top1_top5[MODEL]``, its cell None:
    suite/hooks/parametrize.py), or None."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return item.callspec.id if "accuracy_cell" in params and params["accuracy_cell"] is None else None  # type: ignore[attr-defined]


def cannot_run_here(config: pytest.Config) -> dict[Cell, str]:
    """The selected cells that cannot run on this run's device by design, each with the engine's own reason
    (its ``unsupported_reason``: TensorRT or TF32 on a CPU, torch int8), which are not collected: on a CPU a
    config's GPU cells would otherwise be dozens of 'not judged' skips burying the judgements. A missing library
    or device (``skip_reason``: unavailable) is never left out: that is a broken machine, not a design. Nor are the
    cells whose precision census, recorded by an earlier run under this run's key (suite/hooks/census_record.py), says
    they compute nothing, or almost nothing, in their precision here: every check of theirs would end 'not judged
    (precision-not-run)'.

    Never hidden: a cell whose engine is named by --engines or whose precision is named by --precisions is
    collected and reported as before (not judged, or failed where required); so are all the cells of a required
    engine none of whose cells can run here, so that the run fails naming why (_required_engines_judged)."""
    session, state = suite_session(config), config.stash[RUN_KEY]
    given = options.options_of(config)
    named = set(options.split_list(given.engines) or ()) | set(options.split_list(given.precisions) or ())
    cells = session.cells()
    census = census_record.precision_not_run(session)
    out: dict[Cell, str] = {}
    for cell in cells:
        if cell.engine in named or cell.precision in named:
            continue
        reason = get_backend(cell.engine).unsupported_reason(session.request(cell)) or census.get(cell)
        if reason:
            out[cell] = reason
    for engine in state.required_engines:
        if all(c in out for c in cells if c.engine == engine):
            out = {c: r for c, r in out.items() if c.engine != engine}
    return out


def select_and_order(config: pytest.Config, items: list[pytest.Item]) -> None:
    """What the user left out by request is deselected, not skipped (a skip is a check not judged): the rebuild
    check unless asked for (--rebuild-check N >= 2), and what --benchmark-only or --benchmark-skip leave out
    (after pytest-benchmark has marked it: the hook is trylast), as -m and -k would. The rest runs a model, and
    within it a cell, at a time (suite/lifetime.py)."""
    n = options.options_of(config).rebuild_check
    if n and n < 2:
        raise pytest.UsageError(f"--rebuild-check {n}: at least 2 builds are needed to compare")

    def left_out(item: pytest.Item) -> bool:
        if not n and item.get_closest_marker("rebuild"):
            return True
        return any(m.kwargs.get("reason", m.args[0] if m.args else None) in _BENCHMARK_FILTERS
                   for m in item.iter_markers("skip"))

    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (dropped if left_out(item) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    leave_out_what_cannot_run_here(config, items)
    run_order(items, suite_session(config), options.overhead_model(config))  # engines live only as long as their tests


def leave_out_what_cannot_run_here(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the checks of cells that cannot run on this device (cannot_run_here), unless named on the command
    line by their id, the GPU-only harness-overhead check off CUDA (harness_left_out), the padding-invariance
    check of models that are not sentence-embedding models (the config says so), and, unless asked for by name
    (asked_for), the accuracy check of models without labels and latency cases nothing judges or keeps
    (latency_unjudged); remember them for the summary."""
    impossible, harness = cannot_run_here(config), harness_left_out(config)
    session, unjudged = suite_session(config), latency_unjudged(config)
    left: dict[str, tuple[list[str], int]] = {}
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        cell = cell_of(item)
        if harness and HARNESS_TEST in item.nodeid.replace("\\", "/"):
            reason, what = HARNESS_ON_CPU, "test_harness_overhead"
        elif cell is not None and cell in impossible and not named_on_command_line(config, item):
            reason, what = impossible[cell], cell.id
        elif (cell is not None and PADDING_TEST in item.nodeid.replace("\\", "/")
              and embedding_model_reason(session.model(cell.model)) and not named_on_command_line(config, item)):
            reason, what = PADDING_NOT_EMBEDDING, cell.model
        elif unlabelled_model(item) and not asked_for(config, Path(item.path), "accuracy"):
            reason, what = NO_LABELS, unlabelled_model(item)
        elif (cell is not None and unjudged and "latency_case" in item.callspec.params  # type: ignore[attr-defined]
              and not asked_for(config, Path(item.path), "latency")):
            reason, what = LATENCY_UNJUDGED, cell.model
        else:
            kept.append(item)
            continue
        dropped.append(item)
        names, n = left.get(reason, ([], 0))
        left[reason] = (names if what in names else [*names, what], n + 1)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    config.stash[NOT_COLLECTED_KEY] = left


def not_collected_lines(config: pytest.Config) -> list[str]:
    """The summary's lines on what was not collected because it cannot run here: one per reason, with how many
    checks of which cells (an xdist controller, which collects nothing, has its workers' deselection: the same
    cells, from the same rule; it names the cells without a count of checks)."""
    left = config.stash.get(NOT_COLLECTED_KEY, None)
    if left is None and options.options_of(config).numprocesses:
        left = {}
        for cell, reason in cannot_run_here(config).items():
            left.setdefault(reason, ([], 0))[0].append(cell.id)
        harness = _ROOT / "tests" / "latency" / HARNESS_TEST.partition("::")[0]
        args = _arg_paths(config)
        if harness_left_out(config) and any(harness.is_relative_to(arg) for arg in args):  # it was selected
            left[HARNESS_ON_CPU] = (["test_harness_overhead"], 0)
        padding = _ROOT / "tests" / "parity" / PADDING_TEST.partition("::")[0]
        models = suite_session(config).config.models.values()
        others = [m.name for m in models if embedding_model_reason(m)]
        if others and any(padding.is_relative_to(arg) for arg in args):
            left[PADDING_NOT_EMBEDDING] = (others, 0)
        accuracy = _ROOT / "tests" / "accuracy" / "test_accuracy.py"
        unlabelled = [m.name for m in models if m.accuracy_dataset is None]
        if unlabelled and any(accuracy.is_relative_to(arg) for arg in args) and not asked_for(config, accuracy,
                                                                                              "accuracy"):
            left[NO_LABELS] = (unlabelled, 0)
        latency = _ROOT / "tests" / "latency" / "test_latency.py"
        if (latency_unjudged(config) and any(latency.is_relative_to(arg) for arg in args)
                and not asked_for(config, latency, "latency")):
            left[LATENCY_UNJUDGED] = ([m.name for m in models], 0)
    if not left:
        return []
    head = (f"not collected, as they cannot run on {suite_session(config).device} or be judged in this run (naming "
            "their engine with --engines or precision with --precisions, or --overhead-model, has them reported "
            "instead):")
    return [head, *(f"  {count_text(n)}{some_names(names)}: {reason}" for reason, (names, n) in left.items())]


def count_text(n: int) -> str:
    return "" if not n else "1 check of " if n == 1 else f"{n} checks of "


def named_on_command_line(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether a positional argument names this very test (``FILE::test[params]``)."""
    return any(name == item.name and (config.invocation_params.dir / path).resolve() == Path(item.path).resolve()
               for path, _, name in (arg.partition("::") for arg in config.args))


def harness_left_out(config: pytest.Config) -> bool:
    """The harness-overhead check times CUDA events: off CUDA it is left out, unless asked for by --overhead-model
    or by naming its file (then each case is reported: not judged, unsupported)."""
    named = any(Path(arg.partition("::")[0]).name == HARNESS_TEST.partition("::")[0] for arg in config.args)
    return not (suite_session(config).device.startswith("cuda") or named or options.options_of(config).overhead_model)


def some_names(names: list[str], shown: int = 4) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def models_of(nodeids: list[str], models: Any, overhead_model: str | None = None) -> list[str]:
    """The configured models that these test ids exercise (suite.lifetime.model_of_nodeid: ids start with the
    model's name, Cell.id). The harness-overhead check's ids name a batch and a path, not a model: it uses
    ``overhead_model`` (given: the --overhead-model option, or the first configured model)."""
    names = list(models)
    used = {model_of_nodeid(nodeid, names, overhead_model) for nodeid in nodeids}
    return [n for n in models if n in used]
