"""Deliberately broken tiny models and datasets, one mistake each, for tests/selftest/test_preflight.py."""

import numpy as np
import torch

from fixtures.data import Dataset

#: How many times a factory or a forward ran: the cache and reuse tests count them.
CALLS = {"factory": 0, "forward": 0}


class Linear16(torch.nn.Module):
    """Linear(16, 4): the config must declare ``shape = [16]``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS["forward"] += 1
        return self.fc(x)


def linear16(cache=None) -> torch.nn.Module:
    CALLS["factory"] += 1
    return Linear16()


def linear16_no_args() -> torch.nn.Module:
    """The zero-argument form ``def make(): return Net()``."""
    CALLS["factory"] += 1
    return Linear16()


def two_params(cache, size):
    return Linear16()


def raises(cache=None):
    raise FileNotFoundError("loading weights for linear16\nweights.pt: no such file in the package")


def not_a_module(cache=None):
    return {"fc.weight": torch.zeros(4, 16)}


class TwoOutputs(Linear16):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.fc(x)
        return y, y.softmax(-1)


def two_outputs(cache=None) -> torch.nn.Module:
    return TwoOutputs()


class DictOutputs(Linear16):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.fc(x)
        return {"probs": y.softmax(-1), "embedding": y}


def dict_outputs(cache=None) -> torch.nn.Module:
    return DictOutputs()


class NoBatchAxis(Linear16):
    """Averages over the batch: the output has lost its batch axis."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).mean(0)


def no_batch_axis(cache=None) -> torch.nn.Module:
    return NoBatchAxis()


class IntEmbedding(torch.nn.Module):
    """Token ids in [0, 9]: an id outside the declared range would fail the embedding lookup."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids).sum(1)


def int_embedding(cache=None) -> torch.nn.Module:
    return IntEmbedding()


# ---- datasets -----------------------------------------------------------------------------------


def _rows(n: int = 8, width: int = 16) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, (n, width)).astype(np.float32)


def data_ok(cache=None) -> Dataset:
    return Dataset("ok", {"x": _rows()}, labels=np.arange(8) % 4)


def data_unlabelled(cache=None) -> Dataset:
    return Dataset("unlabelled", {"x": _rows()})


def data_raises(cache=None) -> Dataset:
    raise RuntimeError("downloading the data set\nno network at run time")


def data_wrong_name(cache=None) -> Dataset:
    return Dataset("wrong_name", {"image": _rows()}, labels=np.zeros(8, dtype=np.int64))


def data_wrong_shape(cache=None) -> Dataset:
    return Dataset("wrong_shape", {"x": _rows(width=10)}, labels=np.zeros(8, dtype=np.int64))


class LooseData:
    """A dataset look-alike that does not validate itself (fixtures.data.Dataset would refuse this)."""

    def __init__(self) -> None:
        self.feeds = {"x": _rows()}
        self.labels = np.zeros(7, dtype=np.int64)

    def __len__(self) -> int:
        return 8

    def digest(self) -> str:
        return "loose"


def data_label_mismatch(cache=None) -> LooseData:
    return LooseData()


def data_not_a_dataset(cache=None) -> list:
    return [_rows()]
