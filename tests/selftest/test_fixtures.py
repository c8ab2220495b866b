"""Self-tests of ``fixtures``: the data are what they claim, trained weights are good and cached.

Why: every accuracy and parity verdict of the suite rests on these models and data; a broken split,
a mis-normalised photo or a wrongly padded EfficientNet would make every later verdict meaningless.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from core.cache import ArtifactCache
from fixtures.data import Dataset, concatenate, photos
from fixtures.data import digits as digits_data

pytestmark = pytest.mark.selftest


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> ArtifactCache:
    return ArtifactCache(tmp_path_factory.mktemp("fixture-cache"))


@pytest.fixture(scope="module")
def digits_cnn(cache: ArtifactCache) -> torch.nn.Module:
    from fixtures.models.digits import digits_cnn

    return digits_cnn(cache)


# -- Dataset ----------------------------------------------------------------------------------------


def _tiny(**overrides: object) -> Dataset:
    kwargs: dict = {
        "name": "tiny",
        "feeds": {"x": np.arange(12, dtype=np.float32).reshape(4, 3)},
        "labels": np.array([0, 1, 0, 1]),
    }
    kwargs.update(overrides)
    return Dataset(**kwargs)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"feeds": {}}, "no feeds"),
        ({"feeds": {"x": np.zeros((0, 3), np.float32)}, "labels": None}, "empty"),
        ({"feeds": {"x": np.zeros((4, 3)), "y": np.zeros((3, 3))}}, "different lengths"),
        ({"feeds": {"x": np.float32(1.0)}, "labels": None}, "batch axis"),
        ({"labels": np.zeros((4, 1), np.int64)}, "1-D"),
        ({"labels": np.zeros(4, np.float32)}, "integers"),
        ({"labels": np.zeros(5, np.int64)}, "5 labels for 4 rows"),
    ],
)
def test_dataset_rejects_malformed(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _tiny(**overrides)


def test_dataset_take_batches_and_readonly() -> None:
    ds = _tiny()
    assert len(ds) == 4 and ds.labels is not None and ds.labels.dtype == np.int64
    assert len(ds.take(2)) == 2 and ds.take(10) is ds
    assert np.array_equal(ds.take(2).feeds["x"], ds.feeds["x"][:2])
    sizes = [len(b["x"]) for b in ds.batches(3)]
    assert sizes == [3, 1]
    with pytest.raises(ValueError):
        ds.feeds["x"][0, 0] = 5.0  # shared data must not be mutable through a dataset
    with pytest.raises(ValueError):
        ds.take(0)


def test_digest_tracks_content_not_name() -> None:
    base = _tiny()
    assert base.digest() == _tiny(name="renamed").digest()
    changed = np.arange(12, dtype=np.float32).reshape(4, 3)
    changed[2, 1] += 1e-3
    assert _tiny(feeds={"x": changed}).digest() != base.digest()
    assert _tiny(labels=np.array([0, 1, 1, 1])).digest() != base.digest()
    assert _tiny(labels=None).digest() != base.digest()
    assert _tiny(feeds={"x": np.arange(12, dtype=np.float64).reshape(4, 3)}).digest() != base.digest()
    assert _tiny(feeds={"y": np.arange(12, dtype=np.float32).reshape(4, 3)}).digest() != base.digest()
    assert _tiny(feeds={"x": np.arange(12, dtype=np.float32).reshape(4, 3, 1)}).digest() != base.digest()


def test_concatenate() -> None:
    both = concatenate("both", [_tiny(), _tiny()])
    assert len(both) == 8 and both.labels is not None and list(both.labels) == [0, 1, 0, 1] * 2
    with pytest.raises(ValueError):
        concatenate("mixed", [_tiny(), _tiny(labels=None)])


# -- digits -----------------------------------------------------------------------------------------


def test_digits_splits_disjoint_stratified_deterministic() -> None:
    splits = digits_data.split_indices()
    again = digits_data.split_indices.__wrapped__()  # recomputed, not the memoised object
    for name in digits_data.SPLITS:
        assert np.array_equal(splits[name], again[name])
    train, cal, test = (set(splits[n].tolist()) for n in ("train", "calibration", "test"))
    assert not (train & cal) and not (train & test) and not (cal & test)
    assert len(train | cal | test) == 1797
    sizes = {n: len(digits_data._digits(n)) for n in digits_data.SPLITS}
    assert sizes == {"train": 1079, "calibration": 179, "test": 539}
    for ds in (digits_data.digits_train(), digits_data.digits_calibration(), digits_data.digits_test()):
        x = ds.feeds["image"]
        assert x.dtype == np.float32 and x.shape[1:] == (1, 28, 28)
        assert 0.0 <= x.min() and x.max() <= 1.0
        assert ds.labels is not None and set(np.unique(ds.labels).tolist()) == set(range(10))
        counts = np.bincount(ds.labels, minlength=10)
        assert counts.max() - counts.min() <= max(3, 0.1 * counts.mean())


def test_digit_pairs_balanced_correct_and_within_split() -> None:
    labels = digits_data._split("test")[1]
    left, right, same = digits_data.make_pairs(labels, 400, seed=3)
    assert np.array_equal(same, (labels[left] == labels[right]).astype(np.int64))
    assert same.sum() == 200 and not np.any((left == right) & (same == 1))
    left2, _, _ = digits_data.make_pairs(labels, 400, seed=3)
    assert np.array_equal(left, left2)
    pairs = digits_data.digit_pairs_test()
    assert set(pairs.input_names) == {"left", "right"} and pairs.labels is not None
    assert abs(pairs.labels.mean() - 0.5) < 0.01
    # Every image of a test pair is a test image (row-for-row identical to one of them).
    test_images = {img.tobytes() for img in digits_data.digits_test().feeds["image"]}
    for feed in ("left", "right"):
        assert all(img.tobytes() in test_images for img in pairs.feeds[feed][:100])


def test_digits_cnn_accuracy_and_cache_hit(cache: ArtifactCache, digits_cnn: torch.nn.Module) -> None:
    from fixtures.models.digits import accuracy
    from fixtures.models.digits import digits_cnn as factory

    assert not digits_cnn.training
    acc = accuracy(digits_cnn, digits_data.digits_test())
    assert acc >= 0.95, f"held-out top-1 {acc:.3f}"
    hits, builds = cache.stats.hits, cache.stats.builds
    again = factory(cache)
    assert cache.stats.hits == hits + 1 and cache.stats.builds == builds
    for (k, a), (_, b) in zip(digits_cnn.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


# -- photos -----------------------------------------------------------------------------------------


def test_photos_normalised_and_not_constant() -> None:
    for ds in (photos.photos_imagenet(), photos.synthetic_imagenet()):
        x = ds.feeds["image"]
        assert x.dtype == np.float32 and x.shape[1:] == (3, 224, 224) and ds.labels is None
        lo, hi = photos.VALUE_RANGE
        assert lo - 1e-6 <= x.min() and x.max() <= hi + 1e-6
        per_image_std = x.reshape(len(x), -1).std(axis=1)
        assert per_image_std.min() > 0.05
        assert len({row.tobytes() for row in x}) == len(x)
    assert len(photos.synthetic_imagenet()) == 64
    assert len(photos.imagenet_eval()) == len(photos.photos_imagenet()) + 64


def test_efficientnet_lite0_pretrained_recognises_photos() -> None:
    from fixtures.models.efficientnet_lite0 import EfficientNetLite0, efficientnet_lite0, weights_path

    state = torch.load(weights_path(), map_location="cpu", weights_only=True)
    assert set(state) == set(EfficientNetLite0().state_dict())  # names match the checkpoint one-to-one
    model = efficientnet_lite0(None)
    assert not model.training
    names = photos.photo_names()
    x = photos.photos_imagenet().feeds["image"]
    with torch.no_grad():
        probs = model(torch.from_numpy(np.array(x))).softmax(1)
    top5 = probs.topk(5).indices
    chelsea, coffee = names.index("chelsea"), names.index("coffee")
    assert photos.CAT_CLASSES & set(top5[chelsea].tolist())
    cat_mass = float(probs[chelsea, sorted(photos.CAT_CLASSES)].sum())
    assert cat_mass > 0.5, f"chelsea: only {cat_mass:.2f} probability on cat classes, top-5 {top5[chelsea]}"
    assert int(top5[coffee, 0]) in photos.COFFEE_CLASSES


def test_seeded_resnet18_is_not_degenerate(cache: ArtifactCache) -> None:
    from fixtures.models.vision import resnet18

    model = resnet18(cache)
    x = torch.from_numpy(np.array(photos.imagenet_eval().take(24).feeds["image"]))
    with torch.no_grad():
        logits = model(x)
    assert torch.isfinite(logits).all()
    assert float(logits.std(dim=1).min()) > 0.05
    assert float((logits[0] - logits[1]).abs().max()) > 1e-3
    assert len(set(logits.argmax(1).tolist())) > 1


def test_factories_module_paths_resolve() -> None:
    """The config names factories as ``module:function``; the names the lead uses must exist."""
    import importlib

    for ref in (
        "fixtures.models.digits:digits_cnn",
        "fixtures.models.digits:digits_siamese",
        "fixtures.models.efficientnet_lite0:efficientnet_lite0",
        "fixtures.models.vision:resnet18",
        "fixtures.models.vision:mobilenet_v2",
        "fixtures.models.vision:resnet50",
        "fixtures.data.digits:digits_train",
        "fixtures.data.digits:digits_calibration",
        "fixtures.data.digits:digits_test",
        "fixtures.data.digits:digit_pairs_calibration",
        "fixtures.data.digits:digit_pairs_test",
        "fixtures.data.photos:photos_imagenet",
        "fixtures.data.photos:synthetic_imagenet",
        "fixtures.data.photos:imagenet_eval",
    ):
        module, _, attr = ref.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), ref


def test_cache_dir_is_used(cache: ArtifactCache, digits_cnn: torch.nn.Module) -> None:
    entries = list(Path(cache.root, "weights").iterdir())
    assert any((e / "state_dict.pt").is_file() and (e / "manifest.json").is_file() for e in entries)
