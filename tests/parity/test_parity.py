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

from metrics import compare_outputs
from suite import verdict
from suite.inputs import generated_example, synthetic_feed

pytestmark = pytest.mark.parity


def _judge(suite, cell, feed, source, dataset, gate, request, **extra):
    model = suite.model(cell.model)
    reference = suite.run_batched(suite.reference_cell(cell.model), feed)
    outputs = suite.run_batched(cell, feed)
    reports = compare_outputs(reference, outputs, model.tolerance(cell.precision))
    failures = "\n".join(f"{cell.id} on {source}: {r.explain()}" for r in reports.values() if not r.passed)
    localization = None
    if _localize(request, cell, model, failures):
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
    assert not failures, failures
    gate.check()  # --accuracy-baseline: isclose/MAE drift against the baseline run


def _localize(request, cell, model, failures):
    """Localize every failing cell, or every cell with --localize; a failure that is the cell's declared known
    failure is already explained (docs/localization.md has its table), so it is not localized again."""
    if request.config.getoption("--localize"):
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
