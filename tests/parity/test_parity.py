"""Agreement with the PyTorch fp32 reference on the same inputs: rows of the model's dataset, and generated
batches in several value distributions within the shape profile.

Generated inputs are deterministic per case: the batch and seed of ``...[cell-distribution]`` come from a
hash of the model and distribution, so the same case sees the same inputs whatever else pytest collects
(``-k``, ``--lf``, xdist), every engine of a model sees the same ones, and a failing example is simply
there again on the next run. Their figures are recorded like dataset parity (data set
``generated:<distribution>``), drift-gated with ``--accuracy-baseline`` and shown in the report, so a
model without a data set (most users' own models) still has drift protection.
"""

import pytest

from core.inputs import generated_example, synthetic_feed
from metrics import compare_outputs
from suite import verdict
from suite.options import options_of
from suite.session import REFERENCE_ENGINE, REFERENCE_PRECISION

pytestmark = pytest.mark.parity


def _judge(suite, cell, feed, source, dataset, gate, request, **extra):
    model = suite.model(cell.model)
    reference = suite.run_batched(suite.reference_cell(cell.model), feed)
    outputs = suite.run_batched(cell, feed)
    reports = compare_outputs(reference, outputs, model.tolerance(cell.precision))
    failures = "\n".join(f"{cell.id} on {source}: {r.explain()}" for r in reports.values() if not r.passed)
    unstable = failures and _reference_disagrees(suite, cell, feed, reference, source)
    localization = None
    if not unstable and _localize(request, cell, model, failures):
        try:
            localization = suite.localize(cell, feed, reference, outputs)
        except Exception as exc:  # a crash of the diagnosis must not replace the failure it was to explain
            if not failures:
                raise
            failures += f"\nlocalization could not run: {type(exc).__name__}: {exc}"
        else:
            failures += f"\n{localization.table()}" if failures else ""
    for report in reports.values():
        loc = {} if localization is None else {"localization": localization.as_dict()}
        suite.record("parity", cell, dataset=dataset, **extra, **report.as_dict(), **loc)
    if unstable:
        pytest.fail(unstable, pytrace=False)
    assert not failures, failures
    gate.check()  # --accuracy-baseline: isclose/MAE drift against the baseline run


def _reference_disagrees(suite, cell, feed, reference, source):
    """When a cell fails: the fp32 reference run again on the same inputs. A reference that disagrees with itself
    (dropout left on, sampling in forward) would have the engine blamed for its noise (issue 43); the check fails
    as the reference's problem instead, a plain failure no known failure of the engine absorbs. None when it
    agrees with itself within the fp32 tolerance (only run on a failure: a passing cell costs nothing more)."""
    again = suite.run_batched(suite.reference_cell(cell.model), feed)
    tolerance = suite.model(cell.model).tolerance(REFERENCE_PRECISION)
    moved = [r for r in compare_outputs(reference, again, tolerance).values() if not r.passed]
    if not moved:
        return None
    return (f"{cell.id} on {source}: not judged against the reference, which disagrees with itself: the fp32 "
            f"reference ({REFERENCE_ENGINE}) run twice on the same inputs gave other outputs "
            f"({'; '.join(f'output {r.name!r}: {r.failures[0]}' for r in moved)}); the model is not deterministic "
            "in eval mode (dropout with training=True, random sampling in forward()): fix the model, not the engine")


def _localize(request, cell, model, failures):
    """Localize every failing cell, or every cell with --localize; a failure that is the cell's declared known
    failure is already explained (docs/localization.md has its table), so it is not localized again."""
    if options_of(request.config).localize:
        return True
    if not failures:
        return False
    known = model.known_failures.get(f"{cell.engine}-{cell.precision}")
    return not (known is not None and known.covers("parity", failures))


def test_parity_on_dataset(cell, suite, engine_for, gate, request):
    model = suite.model(cell.model)
    engine_for(cell)
    if model.parity_dataset is None:
        verdict.skip("no-data", f"{model.name} declares no parity_dataset; generated inputs are tested separately")
    data = suite.dataset(model.parity_dataset).take(model.parity_samples)
    _judge(suite, cell, data.feeds, f"{model.parity_dataset}[:{len(data)}]", model.parity_dataset, gate, request)


def test_parity_on_generated_inputs(cell, distribution, suite, engine_for, gate, request):
    model = suite.model(cell.model)
    engine_for(cell)
    batch, seed = generated_example(model, distribution)
    feed = synthetic_feed(model.inputs, batch, distribution, seed)
    _judge(suite, cell, feed, f"{distribution} inputs (batch {batch}, seed {seed})", f"generated:{distribution}",
           gate, request, batch=batch, seed=seed)


def engine_batches(suite, model, latency_batch_sizes=None):
    """The batches a cell of ``model`` is compared at in ``test_parity_at_every_engine_batch``: every configured
    batch size with the profile's smallest, opt and largest, every latency batch (``--latency-batch-sizes`` too),
    and the chunk sizes dataset feeds come in (``run_batched`` cuts them at the largest batch): for a
    ``static_batch`` model each is an engine of its own, and a dynamic engine may be wrong at one batch alone."""
    profile = model.profile
    batches = {*model.batch_sizes, profile.min_batch, profile.opt_batch, profile.max_batch}
    batches |= {shape.batch for shape in model.latency_shapes}
    if latency_batch_sizes:
        batches |= {int(b) for b in str(latency_batch_sizes).split(",") if b.strip()}
    rows = [len(suite.dataset(model.accuracy_dataset))] if model.accuracy_dataset else []
    if model.parity_dataset:
        rows.append(len(suite.dataset(model.parity_dataset).take(model.parity_samples)))
    for n in rows:
        batches |= {min(n, profile.max_batch), n % profile.max_batch} - {0}
    return sorted(b for b in batches if profile.min_batch <= b <= profile.max_batch)


def compared_batches(suite, model, runner, latency_batch_sizes=None):
    """``engine_batches``, and every batch a static-batch runner has built an engine for so far."""
    return sorted(set(engine_batches(suite, model, latency_batch_sizes)) | set(getattr(runner, "built", ())))


def test_parity_at_every_engine_batch(cell, suite, engine_for, gate, request):
    """Every engine the suite builds is compared with the reference, not only timed (issue 23): a static_batch cell's
    engine at each batch it meets, and a dynamic engine at its smallest, opt and largest batch and every other
    configured one. Dataset parity takes ``parity_samples`` rows and generated parity stops at batch 32, so a
    batch-256 engine, or a dynamic one wrong at batch >= 48 alone, was never compared. Inputs: 'uniform' generated
    rows, seeded by the batch, each named axis at its opt. A static cell is also compared at every batch it has
    built so far (the padding-invariance test builds engines at the row counts it draws); latency cases compare
    their own calls (tests/latency). Records: data set ``generated:batches``, one per batch and output."""
    model = suite.model(cell.model)
    runner = engine_for(cell).runner
    failures = []
    for batch in compared_batches(suite, model, runner, options_of(request.config).latency_batch_sizes):
        feed = synthetic_feed(model.inputs, batch, "uniform", seed=batch)
        reference = suite.run_batched(suite.reference_cell(cell.model), feed)
        outputs = suite.run_batched(cell, feed)
        source = f"batch {batch} (uniform inputs, seed {batch})"
        reports = compare_outputs(reference, outputs, model.tolerance(cell.precision)).values()
        for report in reports:
            suite.record("parity", cell, dataset="generated:batches", batch=batch, seed=batch, **report.as_dict())
            if not report.passed:
                failures.append(f"{cell.id} at {source}: {report.explain()}")
        unstable = not all(r.passed for r in reports) and _reference_disagrees(suite, cell, feed, reference, source)
        if unstable:
            pytest.fail(unstable, pytrace=False)
    assert not failures, "\n".join(failures)
    gate.check()  # --accuracy-baseline: isclose/MAE drift, per batch (a record's key holds its batch and seed)
