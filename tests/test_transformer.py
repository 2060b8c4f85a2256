"""The Transformer from scratch against torch's own modules, and its decoding cache."""

import math

import pytest
import torch
from torch import nn

from seqlab import decoding, seed_everything
from seqlab.attention import causal_mask
from seqlab.seq2seq import seq2seq_batch, seq2seq_loss
from seqlab.transformer import (
    EncoderLayer,
    MultiHeadAttention,
    TransformerLM,
    TransformerSeq2Seq,
    position_shift_matrix,
    sinusoidal_positions,
)


def torch_mha(d=12, h=3, bias=True, batch_first=True):
    seed_everything(0)
    mha = nn.MultiheadAttention(d, h, bias=bias, batch_first=batch_first).double()
    with torch.no_grad():  # torch zero-initialises biases; make them count
        for p in mha.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return mha.eval()


@pytest.mark.parametrize("bias", [True, False])
def test_multi_head_attention_equals_torch_with_padding_and_causal_masks(bias):
    mha = torch_mha(bias=bias)
    ours = MultiHeadAttention.from_torch(mha).eval()
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 5, 12, generator=g, dtype=torch.float64)
    kv = torch.randn(2, 7, 12, generator=g, dtype=torch.float64)
    lengths = torch.tensor([7, 4])
    real = torch.arange(7)[None] < lengths[:, None]  # [B, S], True on real keys
    out, w = ours(q, kv, kv, mask=real[:, None, None, :])
    ref_out, ref_w = mha(q, kv, kv, key_padding_mask=~real)  # torch: True = blocked
    torch.testing.assert_close(out, ref_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(w, ref_w, atol=1e-10, rtol=1e-10)
    x = kv
    causal = causal_mask(7)
    out, w = ours(x, x, x, mask=causal)
    ref_out, ref_w = mha(x, x, x, attn_mask=~causal)
    torch.testing.assert_close(out, ref_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(w, ref_w, atol=1e-10, rtol=1e-10)
    # both at once, broadcast to [B, heads, T, S]
    both = causal[None, None] & real[:, None, None, :]
    out, _ = ours(x, x, x, mask=both)
    ref_out, _ = mha(x, x, x, attn_mask=~causal, key_padding_mask=~real)
    real_rows = real[:, :, None]  # padded query rows are NaN-free in ours only
    torch.testing.assert_close(out * real_rows, ref_out.nan_to_num() * real_rows, atol=1e-10,
                               rtol=1e-10)


def test_from_torch_handles_sequence_first_modules_and_rejects_others():
    mha = torch_mha(batch_first=False)
    ours = MultiHeadAttention.from_torch(mha)
    x = torch.randn(4, 2, 12, dtype=torch.float64)  # [T, B, d] for torch
    torch.testing.assert_close(ours(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1))[0],
                               mha(x, x, x)[0].transpose(0, 1), atol=1e-10, rtol=1e-10)
    with pytest.raises(TypeError, match="MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))


def test_fused_path_equals_the_readable_path():
    seed_everything(2)
    mha = MultiHeadAttention(16, 4).eval()
    x, mem = torch.randn(3, 6, 16), torch.randn(3, 9, 16)
    for mask in (None, causal_mask(6)[:, :6], torch.rand(3, 1, 6, 9) > 0.3):
        key = x if mask is not None and mask.shape[-1] == 6 else mem
        slow, weights = mha(x, key, key, mask)
        fast, none = mha(x, key, key, mask, need_weights=False)
        assert none is None and weights.shape == (3, 6, key.shape[1])
        torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


def test_bad_shapes_and_masks_are_named():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match="query must be"):
        mha(torch.randn(2, 3, 6), x, x)
    with pytest.raises(ValueError, match="share the batch"):
        mha(x, torch.randn(2, 4, 8), x)
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(x, x, x, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        mha(x, x, x, mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="norm"):
        EncoderLayer(8, 2, norm="middle")
    with pytest.raises(ValueError, match="even"):
        sinusoidal_positions(4, 5)
    lm = TransformerLM(11, d_model=8, num_heads=2, num_layers=1, max_len=4)
    with pytest.raises(ValueError, match="max_len=4"):
        lm(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens must be"):
        lm(torch.zeros(5))


def test_sinusoids_and_the_shift_matrix():
    pe = sinusoidal_positions(50, 16, dtype=torch.float64)
    assert pe[3, 4] == pytest.approx(math.sin(3 / 10000 ** (4 / 16)))
    assert pe[3, 5] == pytest.approx(math.cos(3 / 10000 ** (4 / 16)))
    for k in (1, 3, 7):
        m = position_shift_matrix(k, 16)
        shifted = pe[k:] @ m.T  # row pos + k, mapped back
        assert (shifted - pe[: 50 - k]).abs().max() < 1e-12
    assert torch.allclose(position_shift_matrix(0, 16), torch.eye(16, dtype=torch.float64))


def _copy_encoder_layer(ours: EncoderLayer, ref: nn.TransformerEncoderLayer) -> None:
    ours.self_attn.load_state_dict(MultiHeadAttention.from_torch(ref.self_attn).state_dict())
    with torch.no_grad():
        for a, b in [(ours.ffn.linear1, ref.linear1), (ours.ffn.linear2, ref.linear2),
                     (ours.attn_block.ln, ref.norm1), (ours.ffn_block.ln, ref.norm2)]:
            a.weight.copy_(b.weight)
            a.bias.copy_(b.bias)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_encoder_layer_equals_torch_and_the_hand_computation(norm):
    seed_everything(3)
    ref = nn.TransformerEncoderLayer(8, 2, dim_feedforward=32, dropout=0.0, batch_first=True,
                                     norm_first=norm == "pre").double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ours = EncoderLayer(8, 2, d_ff=32, norm=norm).double().eval()
    _copy_encoder_layer(ours, ref)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    got = ours(x, causal_mask(5))[0]
    torch.testing.assert_close(got, ref(x, src_mask=~causal_mask(5)), atol=1e-10, rtol=1e-10)

    # by hand, from the equations of the lecture
    def ln(z, mod):
        mu, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
        return (z - mu) / torch.sqrt(var + mod.eps) * mod.weight + mod.bias

    def attn(z):
        return ours.self_attn(z, z, z, causal_mask(5))[0]

    def ffn(z):
        return torch.relu(z @ ref.linear1.weight.T + ref.linear1.bias) @ ref.linear2.weight.T \
            + ref.linear2.bias

    if norm == "pre":
        h = x + attn(ln(x, ref.norm1))
        expected = h + ffn(ln(h, ref.norm2))
    else:
        h = ln(x + attn(x), ref.norm1)
        expected = ln(h + ffn(h), ref.norm2)
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-10)


def small_lm(norm="pre", positions="sinusoidal"):
    seed_everything(4)
    return TransformerLM(17, d_model=16, num_heads=4, num_layers=2, max_len=32, norm=norm,
                         positions=positions).eval()


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_causal_mask_leaks_nothing(norm):
    lm = small_lm(norm)
    tokens = torch.randint(4, 17, (2, 10))
    base = lm(tokens)
    for t in (0, 4, 8):
        changed = tokens.clone()
        changed[:, t + 1 :] = torch.randint(4, 17, changed[:, t + 1 :].shape)
        torch.testing.assert_close(lm(changed)[:, : t + 1], base[:, : t + 1])
        assert not torch.allclose(lm(changed)[:, t + 1 :], base[:, t + 1 :])


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_cached_decoding_equals_recomputation_for_the_lm(positions):
    lm = small_lm(positions=positions)
    seq = torch.cat([torch.full((3, 1), lm.bos_id), torch.randint(4, 17, (3, 8))], dim=1)
    with torch.no_grad():
        full = lm(seq).log_softmax(-1)
        state = lm.start(seq[:, :3])  # a prompt of three tokens
        token = state["next_token"]
        for t in range(2, 8):
            lp, state = lm.step(state, token)
            torch.testing.assert_close(lp, full[:, t], atol=1e-5, rtol=1e-5)
            token = seq[:, t + 1]
    got = decoding.sequence_logprob(lm, seq[:, :1], targets=seq[:, 1:].tolist())
    expected = full[:, :-1].gather(2, seq[:, 1:, None]).squeeze(2).double().sum(1) + \
        lm(seq).log_softmax(-1)[:, -1, lm.eos_id].double()
    torch.testing.assert_close(got, expected.detach(), atol=1e-4, rtol=1e-5)


def toy_transformer_seq2seq(norm="pre"):
    seed_everything(5)
    return TransformerSeq2Seq(15, 13, d_model=16, num_heads=2, num_layers=2, max_len=20,
                              norm=norm).eval()


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_cached_decoding_equals_recomputation_for_seq2seq(norm):
    model = toy_transformer_seq2seq(norm)
    src, lengths = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]]), torch.tensor([4, 2])
    ids = decoding.greedy(model, src, lengths, max_len=6)
    for i, out in enumerate(ids):
        logits = model(src[i : i + 1], lengths[i : i + 1], torch.tensor([[model.bos_id, *out]]))
        expected = logits.argmax(-1)[0].tolist()
        assert expected[: len(out)] == out
    targets = [[4, 5, 6], [7]]
    batch = seq2seq_batch([(s[:n].tolist(), t) for s, n, t in zip(src, lengths, targets)],
                          model.bos_id, model.eos_id)
    with torch.no_grad():
        loss, count = seq2seq_loss(model, batch)  # the RNN loss serves the Transformer too
    assert count == 6
    got = decoding.sequence_logprob(model, src, lengths, targets=targets)
    assert -got.sum().item() / 6 == pytest.approx(loss.item(), rel=1e-5)


def test_padding_changes_nothing_for_the_real_source_tokens():
    model = toy_transformer_seq2seq()
    tgt = torch.tensor([[2, 4, 5]])
    short = model(torch.tensor([[5, 6, 7]]), torch.tensor([3]), tgt)
    padded = model(torch.tensor([[5, 6, 7, 0, 0]]), torch.tensor([3]), tgt)
    torch.testing.assert_close(short, padded, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="teacher forcing"):
        model(torch.tensor([[5]]), torch.tensor([1]), tgt, teacher_forcing=0.5)


def test_attention_weights_come_back_for_plots():
    model = toy_transformer_seq2seq()
    logits, weights = model(torch.tensor([[5, 6, 7, 0]]), torch.tensor([3]),
                            torch.tensor([[2, 4]]), return_attention=True)
    assert len(weights) == 2 and weights[-1].shape == (1, 2, 4)
    torch.testing.assert_close(weights[-1].sum(-1), torch.ones(1, 2))
    assert (weights[-1][..., 3] == 0).all()  # padding gets no attention
    _, lm_weights = small_lm()(torch.tensor([[2, 5, 6]]), return_attention=True)
    assert torch.equal(lm_weights[0][0] > 0, causal_mask(3))
