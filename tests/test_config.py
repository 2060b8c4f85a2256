"""One way to size a model: TransformerConfig for the three Transformer models, RNNConfig for the
RNN ones, with the calls of before the change still accepted (and warned about) where saved
lectures use them."""

import dataclasses
import re
import warnings

import pytest
import torch

from seqlab import seed_everything
from seqlab.mlm import BertModel
from seqlab.rnn import RNNConfig, RNNLanguageModel
from seqlab.seq2seq import AttentionDecoder, Encoder, build_model
from seqlab.transformer import (
    Embedding,
    MultiHeadAttention,
    TransformerConfig,
    TransformerLM,
    TransformerSeq2Seq,
)

SMALL = TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=12)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def built(make):
    seed_everything(0)
    return make()


@pytest.mark.parametrize(("field", "value", "error", "says"), [
    ("d_model", 0, ValueError, "d_model must be an int >= 1, got 0"),
    ("num_heads", 3, ValueError, "d_model must be divisible by num_heads, got d_model=16"),
    ("num_layers", 1.5, TypeError, "num_layers must be an int >= 1, got float 1.5"),
    ("d_ff", 0, ValueError, "d_ff must be an int >= 1"),
    ("dropout", 1.0, ValueError, "dropout must be a number in [0, 1)"),
    ("norm", "middle", ValueError, "norm must be 'pre' or 'post', got 'middle'"),
    ("positions", "rotary", ValueError, "positions must be 'sinusoidal' or 'learned'"),
])
def test_a_bad_size_is_named_with_its_value(field, value, error, says):
    with pytest.raises(error, match=re.escape(says)):
        dataclasses.replace(SMALL, **{field: value})


def test_a_config_and_keywords_build_the_same_model():
    by_config = built(lambda: TransformerLM(20, SMALL))
    by_name = built(lambda: TransformerLM(20, d_model=16, num_heads=2, num_layers=1,
                                          max_len=12))
    assert by_config.config == by_name.config == SMALL
    assert same_weights(by_config, by_name)
    wider = TransformerLM(20, SMALL, num_layers=3)  # a keyword replaces one field
    assert wider.config == dataclasses.replace(SMALL, num_layers=3) and len(wider.layers) == 3
    with pytest.raises(TypeError, match="unexpected keyword.*'layers'"):
        TransformerLM(20, layers=3)


def test_each_model_keeps_its_own_defaults():
    assert TransformerLM(20).config == TransformerConfig()
    assert TransformerSeq2Seq(20, 21).config.max_len == 128
    bert = BertModel(20).config
    assert (bert.max_len, bert.dropout, bert.positions) == (128, 0.1, "learned")


def test_the_three_transformers_share_one_embedding_block():
    models = [TransformerLM(20, SMALL), TransformerSeq2Seq(20, 21, SMALL), BertModel(20, SMALL)]
    blocks = [m for model in models for m in model.modules() if isinstance(m, Embedding)]
    assert len(blocks) == 4  # the LM's, the encoder's and decoder's, BERT's
    assert [b.segments is not None for b in blocks] == [False, False, False, True]


@pytest.mark.parametrize(("old", "new"), [
    (lambda: TransformerLM(20, d_model=16, n_heads=2, n_layers=1, max_len=12),
     lambda: TransformerLM(20, SMALL)),
    (lambda: TransformerLM(20, 16, 2, 1, max_len=12),  # lecture 05's character GPT, as saved
     lambda: TransformerLM(20, SMALL)),
    (lambda: TransformerSeq2Seq(20, 21, d_model=16, n_heads=2, n_layers=1, max_len=12),
     lambda: TransformerSeq2Seq(20, 21, SMALL)),
    (lambda: BertModel(20, 16, 2, 1, max_len=12, dropout=0.0),  # lecture 08, as saved
     lambda: BertModel(20, d_model=16, num_heads=2, num_layers=1, max_len=12, dropout=0.0)),
    (lambda: MultiHeadAttention(d_model=16, n_heads=2), lambda: MultiHeadAttention(16, 2)),
])
def test_calls_from_before_the_rename_build_the_same_model_and_warn(old, new):
    with pytest.warns(DeprecationWarning, match="will be removed") as caught:
        before = built(old)
    assert all(w.filename == __file__ for w in caught)  # the warning points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        after = built(new)
    assert same_weights(before, after)


def test_a_size_given_twice_is_refused():
    with pytest.raises(TypeError, match="both n_heads= and num_heads="):
        TransformerLM(20, n_heads=2, num_heads=2)
    with pytest.raises(TypeError, match=r"\['d_model'\] both by position and by name"), \
            pytest.warns(DeprecationWarning):
        TransformerLM(20, 16, d_model=16)
    with pytest.raises(TypeError, match="at most 8 sizes by position"):
        TransformerLM(20, 16, 2, 1, 12, "pre", 0.0, None, "sinusoidal", 0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        MultiHeadAttention(16, 2, heads=2)


# ---------------------------------------------------------------------- the RNN family
def test_the_rnn_models_are_sized_by_one_rnn_config():
    sizes = RNNConfig(embed_dim=8, hidden_dim=16, cell="gru")
    lm = built(lambda: RNNLanguageModel(20, sizes))
    assert same_weights(lm, built(lambda: RNNLanguageModel(20, embed_dim=8, hidden_dim=16,
                                                           cell="gru")))
    model = build_model(20, 21, 1, 2, attention=True, config=sizes)
    assert model.encoder.config == model.decoder.config == sizes
    assert RNNLanguageModel(20).config.cell == "lstm" and Encoder(20).config.cell == "gru"
    with pytest.raises(ValueError, match="cell must be one of"):
        RNNConfig(cell="transformer")
    with pytest.raises(ValueError, match=r"cell must be one of \['gru', 'lstm'\] in an enc"):
        Encoder(20, cell="rnn")
    with pytest.raises(ValueError, match="Decoder is one RNN layer without dropout; got "
                                         "num_layers=2"):
        build_model(20, 21, 1, 2, attention=False, num_layers=2)


@pytest.mark.parametrize(("old", "new"), [
    (lambda: RNNLanguageModel(20, 8, 16, cell="gru"),  # lecture 02, as saved
     lambda: RNNLanguageModel(20, embed_dim=8, hidden_dim=16, cell="gru")),
    (lambda: Encoder(20, 8, 16, cell="lstm"), lambda: Encoder(20, embed_dim=8, hidden_dim=16,
                                                              cell="lstm")),
    (lambda: AttentionDecoder(21, 16, 8, 16, score="dot"),
     lambda: AttentionDecoder(21, 16, embed_dim=8, hidden_dim=16, score="dot")),
])
def test_rnn_sizes_by_position_still_work_and_warn(old, new):
    with pytest.warns(DeprecationWarning, match="will be removed") as caught:
        before = built(old)
    assert all(w.filename == __file__ for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert same_weights(before, built(new))
