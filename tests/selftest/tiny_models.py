"""Tiny models for the machinery tests: fast to export, quantize and run on CPU."""

from typing import NamedTuple

import torch


class TwoInputNet(torch.nn.Module):
    """Two inputs, so the feed-dict path is exercised; conv + linear, so int8 QDQ has work to do."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8 + 3, 5)

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(image)).flatten(1)
        return self.fc(torch.cat([x, extra], dim=1))


def two_input_net(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return TwoInputNet().eval()


class ExportsWrong(TwoInputNet):
    """Behaves differently when exported: an engine built from it is 'broken' by a known amount."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        out = super().forward(image, extra)
        if torch.onnx.is_in_onnx_export():
            out = out * 1.05
        return out


def exports_wrong(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return ExportsWrong().eval()


class NotExportable(torch.nn.Module):
    """Complex eigenvalues have no ONNX translation: the exporter must fail, and say so."""

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvals(image.flatten(1)[:, :4].reshape(-1, 2, 2)).real.sum(-1)


def not_exportable(cache=None) -> torch.nn.Module:
    return NotExportable().eval()


class Data:
    """A fixtures.data.Dataset look-alike; rows from a seed, labels from the row's sum."""

    def __init__(self, rows: int = 64, seed: int = 1) -> None:
        import numpy as np

        rng = np.random.default_rng(seed)
        self.feeds = {"image": rng.uniform(0, 1, (rows, 1, 8, 8)).astype(np.float32),
                      "extra": rng.uniform(-1, 1, (rows, 3)).astype(np.float32)}
        self.labels = (self.feeds["image"].sum(axis=(1, 2, 3)) > 32).astype(np.int64)
        self.rows, self.seed = rows, seed

    def __len__(self) -> int:
        return self.rows

    def take(self, n: int) -> "Data":
        return Data(min(n, self.rows), self.seed)

    def digest(self) -> str:
        return f"tiny-{self.rows}-{self.seed}"


def tiny_data(cache=None) -> Data:
    return Data()


class TokenNet(torch.nn.Module):
    """int64 token ids (an embedding) beside a float input: integer inputs must keep their dtype on every
    engine and precision (inductor once cast them to float and failed in the embedding)."""

    VOCAB, LENGTH, FEATURES = 50, 6, 3

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(self.VOCAB, 8)
        self.fc = torch.nn.Linear(8 + self.FEATURES, 4)

    def forward(self, ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        pooled = self.embed(ids).mean(dim=1)
        return self.fc(torch.cat([pooled, features], dim=1))


def token_net(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return TokenNet().eval()


class TokenData:
    """Calibration rows for TokenNet: int64 ids within the vocabulary, float features."""

    def __init__(self, rows: int = 32, seed: int = 2) -> None:
        import numpy as np

        rng = np.random.default_rng(seed)
        self.feeds = {"ids": rng.integers(0, TokenNet.VOCAB, (rows, TokenNet.LENGTH), dtype=np.int64),
                      "features": rng.uniform(-1, 1, (rows, TokenNet.FEATURES)).astype(np.float32)}
        self.rows, self.seed = rows, seed

    def __len__(self) -> int:
        return self.rows

    def take(self, n: int) -> "TokenData":
        return TokenData(min(n, self.rows), self.seed)

    def digest(self) -> str:
        return f"tokens-{self.rows}-{self.seed}"


class MaskedNet(torch.nn.Module):
    """A bool input beside a float one: ``mask`` keeps or zeroes each feature. Bool inputs must stay bool on every
    engine and precision (the fp16/bf16 conversions and the int8 quantizer touch float tensors only)."""

    FEATURES = 6

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(self.FEATURES, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.where(mask, x, torch.zeros_like(x)))


def masked_net(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return MaskedNet().eval()


def masked_data(cache=None):
    """32 rows for MaskedNet: float features in [-1, 1], a bool mask."""
    import numpy as np

    from fixtures.data import Dataset

    rng = np.random.default_rng(5)
    return Dataset("masked", {"x": rng.uniform(-1, 1, (32, MaskedNet.FEATURES)).astype(np.float32),
                              "mask": rng.random((32, MaskedNet.FEATURES)) < 0.5})


class DictOutputNet(TwoInputNet):
    """Returns a dict whose keys come in another order than the config's outputs (logits, probs): the
    export and every engine must bind by key, not by position."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = super().forward(image, extra)
        return {"probs": torch.softmax(logits, dim=1), "logits": logits}


def dict_output_net(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return DictOutputNet().eval()


class Heads(NamedTuple):
    probs: torch.Tensor
    logits: torch.Tensor


class NamedTupleOutputNet(TwoInputNet):
    """The same outputs as DictOutputNet, as a named tuple whose fields come in the other order."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> Heads:
        logits = super().forward(image, extra)
        return Heads(probs=torch.softmax(logits, dim=1), logits=logits)


def named_tuple_output_net(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return NamedTupleOutputNet().eval()


class BatchMean(TwoInputNet):
    """A wrong model: one row for the whole batch. Parity against a reference that does the same passes;
    only the output-shape check (engines.feeds.check_outputs) sees it."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        return super().forward(image, extra).mean(0, keepdim=True)


def batch_mean(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return BatchMean().eval()


class BatchTwice(TwoInputNet):
    """A wrong model: every row twice (``torch.cat([out, out])``)."""

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        out = super().forward(image, extra)
        return torch.cat([out, out])


def batch_twice(cache=None) -> torch.nn.Module:
    torch.manual_seed(0)
    return BatchTwice().eval()
