"""--rebuild-check N: each selected engine built N times from scratch (suite/checks/rebuild.py). Reports whether the
artifacts are byte-identical and the outputs on the parity data bitwise identical, with each build's size
and layers. Two builds of one engine that disagree beyond the tolerance the cell is judged with fail: the
nightly comparison would be measuring the build. Collected only with --rebuild-check."""

import pytest

from core.inputs import synthetic_feed
from suite.checks.rebuild import build_once, compare_builds, describe
from suite.options import options_of
from suite.session import SuiteSession

pytestmark = [pytest.mark.parity, pytest.mark.rebuild]


def test_rebuild_check(cell, suite, engine_for, request):
    n = options_of(request.config).rebuild_check
    model = suite.model(cell.model)
    engine_for(cell)  # a cell that cannot run here is said so once, not N times
    if model.parity_dataset:
        feed = suite.dataset(model.parity_dataset).take(min(model.parity_samples, 16)).feeds
    else:
        feed = synthetic_feed(model.inputs, min(8, model.profile.max_batch), "uniform", seed=7)
    builds = [build_once(lambda cache: SuiteSession(suite.config, cache, suite.device), cell, suite.cache, feed, i)
              for i in range(n)]
    summary = compare_builds(builds)
    suite.record("rebuild", cell, **summary)
    print(describe(cell.id, summary))
    tolerance = model.tolerance(cell.precision)
    limit = tolerance.atol + tolerance.rtol * max(float(abs(v).max()) for v in builds[0].outputs.values())
    assert summary["max_abs_difference"] <= limit, (
        f"{cell.id}: {n} builds of the same engine disagree by up to {summary['max_abs_difference']:.3g} "
        f"(beyond the cell's own tolerance, {limit:.3g}): {describe(cell.id, summary)}")
