"""The MiniLM fixture is the real all-MiniLM-L6-v2: its embeddings match what is published for it and what
sentence-transformers computes, its pooling is the mean the model card describes, and its parity data are real
sentences tokenised by its own tokenizer."""

from pathlib import Path

import numpy as np
import pytest
import torch

from fixtures.data import minilm_files, sentences
from fixtures.models import minilm
from suite.config import load_config

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]

# sbert.net's usage example for all-MiniLM-L6-v2 (sentence-transformers docs, "Usage"): model.similarity of
# these three sentences prints [[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]].
PUBLISHED = (["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."],
             np.array([[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]]))


@pytest.fixture(scope="module")
def model():
    return minilm.minilm_l6()


def _embed(module, texts):
    feeds = sentences.tokenize(texts)
    with torch.inference_mode():
        return module(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])).numpy()


def test_published_similarities(model):
    texts, published = PUBLISHED
    emb = _embed(model, texts)
    np.testing.assert_allclose(emb @ emb.T, published, atol=5e-5)  # printed to 4 decimals


def test_embeddings_are_unit_norm_and_the_mean_of_the_kept_tokens(model):
    """The head is the model card's: the mean of BertModel's token states over the mask, then L2 normalised;
    recomputed here in numpy from the encoder's own outputs."""
    texts = list(sentences.split("parity")[:12])
    feeds = sentences.tokenize(texts)
    ids, mask = torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])
    assert (mask.sum(1) < mask.shape[1]).any(), "the rows must be padded for this test to mean anything"
    with torch.inference_mode():
        states = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state.numpy().astype(np.float64)
        emb = model(ids, mask).numpy()
    m = feeds["attention_mask"][..., None].astype(np.float64)
    mean = (states * m).sum(1) / m.sum(1)
    expected = mean / np.linalg.norm(mean, axis=1, keepdims=True)
    np.testing.assert_allclose(emb, expected, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-6)


def test_agrees_with_sentence_transformers(model):
    """sentence-transformers (installed with the model's wheel) loads the same directory by its own code."""
    st = pytest.importorskip("sentence_transformers")
    texts = list(sentences.split("parity")[:16])
    reference = st.SentenceTransformer(str(minilm_files.model_dir()), device="cpu").encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(_embed(model, texts), reference, atol=2e-6)


def test_eager_variant_computes_the_same_embeddings(model):
    texts = list(sentences.split("parity")[:8])
    np.testing.assert_allclose(_embed(minilm.minilm_l6_eager(), texts), _embed(model, texts), atol=2e-6)


def test_head_is_checked_against_the_models_config(monkeypatch):
    monkeypatch.setattr(minilm, "read_json", lambda name: {"pooling_mode_cls_token": True,
                                                           "pooling_mode_mean_tokens": False}
                        if name == "1_Pooling/config.json" else
                        [{"idx": i, "type": t} for i, t in enumerate(minilm.EXPECTED_MODULES)])
    with pytest.raises(ValueError, match=r"enables \['pooling_mode_cls_token'\]; this module implements mean"):
        minilm._check_head()


def test_sentences_are_real_varied_and_split_without_overlap():
    parity, calibration = sentences.split("parity"), sentences.split("calibration")
    assert len(parity) + len(calibration) == sentences.CORPUS_SIZE and not set(parity) & set(calibration)
    assert 200 <= len(parity) and 60 <= len(calibration)
    words = [len(s.split()) for s in parity]
    assert min(words) <= 6 and max(words) >= 35  # short and long sentences both
    assert sum(s in parity for s in sentences.sklearn_sentences()) >= 40  # both sources present
    assert all(not sentences._CODE.search(s) for s in parity)


def test_dataset_feeds_are_valid_tokens_padded_at_the_end():
    data = sentences.sentences_parity()
    ids, mask = data.feeds["input_ids"], data.feeds["attention_mask"]
    assert ids.dtype == mask.dtype == np.int64 and ids.shape == mask.shape
    assert ids.min() >= 0 and ids.max() < minilm_files.vocab_size()
    lengths = mask.sum(1)
    assert lengths.min() >= 3  # [CLS] a token [SEP] at the least: never an all-zero row
    assert np.array_equal(mask, (np.arange(mask.shape[1]) < lengths[:, None]).astype(np.int64))  # 1s then 0s
    tok = minilm_files.tokenizer()
    assert (ids[mask == 0] == tok.token_to_id("[PAD]")).all()
    assert (ids[:, 0] == tok.token_to_id("[CLS]")).all()
    assert (ids[np.arange(len(ids)), lengths - 1] == tok.token_to_id("[SEP]")).all()
    assert sentences.MIN_LENGTH <= ids.shape[1] <= minilm_files.max_seq_length()
    assert data.digest() == sentences.sentences_parity().digest()


def test_shipped_configs_fit_the_model_and_data():
    """The axes and inputs in both configs agree with the model's vocabulary, max_seq_length and data."""
    for name in ("suite.toml", "suite-gpu.toml"):
        config = load_config(ROOT / name)
        for model in (m for m in config.models.values() if m.factory.startswith("fixtures.models.minilm:")):
            ids = next(i for i in model.inputs if i.name == "input_ids")
            assert ids.high == minilm_files.vocab_size() - 1 and ids.low == 0, (name, model.name)
            seq = ids.axis("seq")
            assert seq.min == sentences.MIN_LENGTH and seq.max == minilm_files.max_seq_length(), (name, model.name)
            assert model.attention_mask is not None and model.attention_mask.name == "attention_mask"
