"""Padding must not change a sentence's embedding: mask handling, a real engine bug class (fused attention that
reads padded keys, a mask lost in a graph rewrite, fp16 masks that overflow into NaN).

For each cell of a sentence-embedding model, hypothesis draws real sentences from the model's parity data, two
padded lengths inside the profile's sequence range, and what fills the padded positions (the tokenizer's [PAD],
random valid ids, or the sentence repeated: the mask alone must hide them). The engine runs the same sentences at
both lengths, and its two embeddings must agree within the precision's parity tolerance (metrics.compare_outputs:
isclose, cosine, worst row, retrieval agreement; NaN/Inf fail).

A sentence-embedding model, for this test, is one that declares an input with ``role = "attention_mask"`` (the
padding is defined by it) and a ``parity_dataset`` (real sentences to re-pad); every output must then have one
row per sentence (a pooled output). Other models' cells are not collected (suite/hooks/collection.py, one summary line),
unless named by their id: then they are skipped as not judged ("no-data").

Deterministic: ``derandomize=True`` draws the same examples every run, and there is no shrinking (each example
runs an engine twice; the failure message names the rows, lengths and filler that reproduce it).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from metrics import compare_outputs
from suite import verdict
from suite.hooks.collection import embedding_model_reason

pytestmark = pytest.mark.parity

MAX_ROWS = 8  # sentences per example: enough for a batch with mixed lengths, cheap on a CPU
EXAMPLES = 6
FILLERS = ("pad", "random", "repeat")


def repad(feeds, inputs, mask_name, rows, length, filler, rng):
    """The chosen rows at ``length`` positions: each row's tokens (where its mask is 1) kept, the rest of the
    sequence axis filled by ``filler`` in every input but the mask, whose padding is 0."""
    mask_spec = next(s for s in inputs if s.name == mask_name)
    axis = mask_spec.shape[-1]
    lengths = np.asarray(feeds[mask_name])[rows].sum(axis=1)
    out = {}
    for spec in inputs:
        source = np.asarray(feeds[spec.name])[rows]
        if axis not in spec.shape:
            out[spec.name] = np.ascontiguousarray(source)
            continue
        if spec.shape.index(axis) != len(spec.shape) - 1:
            raise ValueError(f"input {spec.name!r}: the sequence axis {axis!r} must be its last axis to re-pad")
        array = np.zeros((len(rows), *source.shape[1:-1], length), dtype=source.dtype)
        for i, n in enumerate(lengths):
            real = source[i, ..., :n]
            array[i, ..., :n] = real
            if spec.name == mask_name or n == length:
                continue
            if filler == "pad":
                pad = source[i, ..., n] if n < source.shape[-1] else 0
                array[i, ..., n:] = pad[..., None] if np.ndim(pad) else pad
            elif filler == "random":
                lo, hi = int(np.ceil(spec.low)), int(np.floor(spec.high))
                array[i, ..., n:] = rng.integers(lo, hi, size=array[i, ..., n:].shape, endpoint=True)
            else:  # the sentence again, as often as it fits
                array[i, ..., n:] = np.resize(real, (*real.shape[:-1], length - n))
        out[spec.name] = array
    return out


def test_padding_does_not_change_embeddings(cell, suite, engine_for):
    model = suite.model(cell.model)
    reason = embedding_model_reason(model)
    if reason:
        verdict.skip("no-data", reason)
    runner = engine_for(cell).runner
    data = suite.dataset(model.parity_dataset)
    mask = model.attention_mask
    feeds = data.feeds
    seq = mask.axis(mask.shape[-1])
    real = np.asarray(feeds[mask.name]).sum(axis=1)
    fits = [int(i) for i in np.flatnonzero(real < seq.max)]  # rows that can be padded at least once more
    profile = model.profile
    tolerance = model.tolerance(cell.precision)
    most = min(MAX_ROWS, profile.max_batch, len(fits))
    if most < max(1, profile.min_batch):
        verdict.skip("no-data", f"{model.parity_dataset}: {len(fits)} rows shorter than {seq.max} tokens; the "
                                f"profile's smallest batch is {profile.min_batch}")

    @st.composite
    def cases(draw):
        count = draw(st.integers(max(1, profile.min_batch), most), label="rows")
        rows = draw(st.lists(st.sampled_from(fits), min_size=count, max_size=count, unique=True),
                    label="row indices")
        short = draw(st.integers(max(seq.min, int(real[rows].max())), seq.max - 1), label="shorter length")
        long = draw(st.integers(short + 1, seq.max), label="longer length")
        filler = draw(st.sampled_from(FILLERS), label="filler")
        return sorted(rows), short, long, filler, draw(st.integers(0, 2**31 - 1), label="seed")

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(case=cases())
    def check(case):
        rows, short, long, filler, seed = case
        rng = np.random.default_rng(seed)
        at_short = runner.infer(repad(feeds, model.inputs, mask.name, rows, short, "pad", rng))
        at_long = runner.infer(repad(feeds, model.inputs, mask.name, rows, long, filler, rng))
        where = (f"{cell.id}: rows {rows} of {model.parity_dataset} padded to {short} ([PAD]) and to {long} "
                 f"({filler}, seed {seed})")
        shapes = {n: (np.shape(at_short[n]), np.shape(at_long[n])) for n in at_short}
        token_level = {n: s for n, s in shapes.items() if s[0] != s[1]}
        assert not token_level, (f"{where}: outputs {token_level} change shape with the sequence length; this test "
                                 "compares pooled (one row per sentence) outputs")
        reports = compare_outputs(at_short, at_long, tolerance)
        for report in reports.values():
            suite.record("padding", cell, dataset=model.parity_dataset, rows=rows, lengths=[short, long],
                         filler=filler, seed=seed, **report.as_dict())
        failures = "\n".join(f"{where}: {r.explain()}" for r in reports.values() if not r.passed)
        assert not failures, failures

    check()
