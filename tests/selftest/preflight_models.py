"""Deliberately broken tiny models and datasets, one mistake each, for tests/selftest/test_preflight.py."""

import os
import time

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


class Chatty16(Linear16):
    """A debugging print left in the forward: 300 lines on every call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(300):
            print(f"debug: forward step {i} x.shape={tuple(x.shape)}")
        return self.fc(x)


def chatty(cache=None) -> torch.nn.Module:
    return Chatty16()


def chatty_below_python(cache=None) -> torch.nn.Module:
    """Output written to the file descriptors themselves, as a C extension writes (no sys.stdout)."""
    for i in range(40):
        os.write(1, f"native: loading kernel {i}\n".encode())
    os.write(2, b"native: done\n")
    return Linear16()


def slow_linear16(cache=None) -> torch.nn.Module:
    """A factory that takes its time (weights from a slow disk, a download): 0.5 s."""
    CALLS["slow_started"] = CALLS.get("slow_started", 0) + 1
    time.sleep(0.5)
    return Linear16()


def unseeded(cache=None) -> torch.nn.Module:
    """Weights drawn afresh on every call (no seed): the digest, and so every cache key, changes each run."""
    module = Linear16()
    with torch.no_grad():
        module.fc.weight.copy_(torch.from_numpy(np.random.default_rng().standard_normal((4, 16)).astype(np.float32)))
    return module


def trains(cache) -> torch.nn.Module:
    """Trains its weights once into the cache (as fixtures/models/digits.py does), printing each epoch meanwhile."""
    def train(directory) -> None:
        for epoch in range(20):
            print(f"epoch {epoch}: loss {1 / (epoch + 1):.3f}")
        torch.save(Linear16().state_dict(), directory / "weights.pt")

    module = Linear16()
    entry = cache.get_or_build("train", {"model": "trains"}, train, label="train trains")
    module.load_state_dict(torch.load(entry / "weights.pt"))
    return module


def returns_class(cache=None):
    return Linear16  # the parentheses forgotten


def load_missing_weights(cache=None) -> torch.nn.Module:
    """Raises inside torch (load_state_dict); the user's own line is the one that called it."""
    module = Linear16()
    module.load_state_dict({})
    return module


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


# ---- forward()'s parameters against the declared inputs ----------------------------------------


class OptionalScale(Linear16):
    """forward(x, scale=None): runs on the one declared input, but has a second parameter the builds count."""

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        return self.fc(x) if scale is None else self.fc(x) * scale


def optional_scale(cache=None) -> torch.nn.Module:
    return OptionalScale()


def tiny_bert_model() -> torch.nn.Module:
    """transformers' BertModel as it comes (seeded, tiny, nothing downloaded): its forward() takes input_ids,
    attention_mask and 7 more parameters with defaults."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=64))


class ForwardRaises(Linear16):
    """Made fine, its forward raises as a model's does when its package changed under it (transformers 4.57's
    BertModel refusing minilm_l6_fused's 4-D mask): an environment's failure, found by the smoke forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("Wrong shape for input_ids (shape torch.Size([2, 16])) or attention_mask")


def forward_raises(cache=None) -> torch.nn.Module:
    return ForwardRaises()
