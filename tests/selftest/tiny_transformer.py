"""A tiny BERT sentence encoder (seeded random weights, no files): the MiniLM fixture's architecture and head at a
size whose export, fusion and sessions take a second, for the self-tests of two dynamic axes and fusion."""

from __future__ import annotations

import torch

from core.inputs import AxisRange, InputSpec
from fixtures.models.minilm import SentenceEmbedding

VOCAB = 100
SEQ = (("seq", AxisRange(4, 12, 24)),)
INPUTS = (InputSpec("input_ids", ("seq",), "int64", 0, VOCAB - 1, SEQ),
          InputSpec("attention_mask", ("seq",), "int64", 0, 1, SEQ, "attention_mask"))
OUTPUTS = ("sentence_embedding",)


def _bert(attention: str) -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, attn_implementation=attention)
    return SentenceEmbedding(BertModel(config, add_pooling_layer=False), additive_mask=attention == "eager").eval()


def tiny_bert() -> torch.nn.Module:
    return _bert("sdpa")


def tiny_bert_eager() -> torch.nn.Module:
    return _bert("eager")


class NoAttention(torch.nn.Module):
    """Embedding, mean pooling: a sentence encoder ONNX Runtime's BERT optimizer finds no attention in."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, 16)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).to(torch.float32)
        return (self.embed(input_ids) * mask).sum(1) / mask.sum(1)


def no_attention() -> torch.nn.Module:
    return NoAttention().eval()


def sentences(cache=None) -> object:
    """32 'sentences' of 12 positions for the encoders above: ids within the vocabulary, each row's mask 1s then 0s
    (a tokenizer's padding), so that tests/parity/test_embeddings.py has real rows to re-pad."""
    from core.inputs import synthetic_feed
    from fixtures.data import Dataset

    return Dataset("tiny_sentences", synthetic_feed(INPUTS, 32, "uniform", seed=1, dims={"seq": 12}))
