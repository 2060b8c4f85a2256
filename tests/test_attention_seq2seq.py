import random

import pytest
import torch
import torch.nn.functional as F

from seqlab.attention import (
    AdditiveScore,
    BilinearScore,
    attend,
    causal_mask,
    dot_score,
    make_score,
    masked_softmax,
    scaled_dot_product_attention,
    scaled_dot_score,
)
from seqlab.data import Vocab
from seqlab.data.toy import ToyTranslation
from seqlab.experiments import LENGTH_BUCKETS, LENGTH_CHECKS, length_experiment
from seqlab.rnn import RNNConfig
from seqlab.seq2seq import (
    AttentionDecoder,
    Decoder,
    Encoder,
    Seq2Seq,
    curriculum_batches,
    seq2seq_batch,
    seq2seq_loss,
    translate,
)


# ------------------------------------------------------------------ attention
@pytest.mark.parametrize("seed", range(12))
def test_sdpa_equals_torch(seed):
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    batch = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
    T, S, d, dv = (rng.randint(1, 6) for _ in range(4))
    q = torch.randn(*batch, T, d, generator=g, dtype=torch.float64)
    k = torch.randn(*batch, S, d, generator=g, dtype=torch.float64)
    v = torch.randn(*batch, S, dv, generator=g, dtype=torch.float64)
    masks = [None, torch.rand(*batch, T, S, generator=g) > 0.4,  # with fully masked rows
             torch.rand(T, S, generator=g) > 0.3,  # broadcast over the batch
             torch.randn(T, S, generator=g, dtype=torch.float64)]  # float: added
    for mask in masks:
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)
        assert not torch.isnan(weights).any()
    if T == S:
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T))
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)


def test_fully_masked_rows_give_zeros_not_nan():
    scores = torch.randn(2, 3)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    weights = masked_softmax(scores, mask)
    assert weights[1].eq(0).all() and weights[0].sum().item() == pytest.approx(1.0)
    assert weights[0, 1] == 0


def test_sdpa_shape_errors_name_the_shapes():
    q, k, v = torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(2, 5, 6)
    with pytest.raises(ValueError, match=r"query \(2, 3, 4\), key \(2, 5, 3\)"):
        scaled_dot_product_attention(q, torch.zeros(2, 5, 3), v)
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="query must be a torch.Tensor"):
        scaled_dot_product_attention([[1.0]], k, v)


def test_score_functions_by_their_formulas():
    g = torch.Generator().manual_seed(0)
    s, h = torch.randn(2, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    torch.testing.assert_close(dot_score(s, h), (h @ s[:, :, None]).squeeze(-1))
    torch.testing.assert_close(scaled_dot_score(s, h), dot_score(s, h) / 2)
    bil = BilinearScore(4, 4)
    torch.testing.assert_close(bil(s, h), torch.einsum("bq,qk,bsk->bs", s, bil.W.weight, h))
    add = AdditiveScore(4, 4, 3)
    manual = torch.stack([torch.stack([add.v.weight[0] @ torch.tanh(add.W.weight @ s[b]
                                                                    + add.U.weight @ h[b, i])
                                       for i in range(5)]) for b in range(2)])
    torch.testing.assert_close(add(s, h), manual)
    # all steps at once equals step by step
    states = torch.randn(2, 3, 4, generator=g)
    for score in (dot_score, bil, add):
        torch.testing.assert_close(score(states, h),
                                   torch.stack([score(states[:, t], h) for t in range(3)], 1))
    with pytest.raises(ValueError, match="score must be one of"):
        make_score("cosine", 4, 4)
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        make_score("dot", 4, 5)


def test_attend_returns_the_weighted_average():
    g = torch.Generator().manual_seed(1)
    s, h = torch.randn(2, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    context, weights = attend(s, h, h, "dot", mask)
    assert weights[1, 2:].eq(0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))
    torch.testing.assert_close(context, (weights[:, :, None] * h).sum(1))
    with pytest.raises(ValueError, match="mask must have shape"):
        attend(s, h, h, "dot", mask[:, :3])


# ------------------------------------------------------------------ seq2seq
def small_model(attention: bool, cell="gru", bidirectional=False):
    torch.manual_seed(0)
    enc = Encoder(20, embed_dim=8, hidden_dim=16, cell=cell, bidirectional=bidirectional)
    sizes = RNNConfig(embed_dim=8, hidden_dim=16, cell=cell)
    dec = (AttentionDecoder(25, enc.output_dim, sizes, score="additive") if attention
           else Decoder(25, sizes))
    return Seq2Seq(enc, dec, bos_id=2, eos_id=3)


@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("cell, bidirectional", [("gru", False), ("lstm", True)])
def test_padding_does_not_change_results(attention, cell, bidirectional):
    model = small_model(attention, cell, bidirectional).eval()
    alone = seq2seq_batch([([5, 6, 7], [8, 9])], 2, 3)
    padded = seq2seq_batch([([5, 6, 7], [8, 9]), ([5, 6, 7, 8, 9, 10], [11, 12, 13, 14])], 2, 3)
    with torch.no_grad():
        a = model(*alone[:3])[0]
        b = model(*padded[:3])[0, : a.shape[0]]
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # the loss ignores padded target positions: mean over the 3 real tokens of sentence 1
    loss_alone = seq2seq_loss(model, alone).mean.item()
    assert loss_alone == pytest.approx(
        F.cross_entropy(a, alone[3][0], reduction="mean").item(), rel=1e-5)


@pytest.mark.parametrize("attention", [False, True])
def test_step_interface_matches_teacher_forcing(attention):
    model = small_model(attention).eval()
    src, lengths, tgt_in, _ = seq2seq_batch([([5, 6, 7], [8, 9, 10]), ([5, 6], [11, 12, 13])],
                                            2, 3)
    with torch.no_grad():
        full = model(src, lengths, tgt_in).log_softmax(-1)
        state = model.start(src, lengths)
        for t in range(tgt_in.shape[1]):
            log_probs, state = model.step(state, tgt_in[:, t])
            torch.testing.assert_close(log_probs, full[:, t], rtol=1e-5, atol=1e-6)
        # select reorders rows consistently
        state = model.start(src, lengths)
        swapped = model.select(state, torch.tensor([1, 0]))
        lp, _ = model.step(swapped, tgt_in[:, 0])
        torch.testing.assert_close(lp, full[[1, 0], 0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="teacher_forcing"):
        model(src, lengths, tgt_in, teacher_forcing=1.5)
    model(src, lengths, tgt_in, teacher_forcing=0.5)  # scheduled sampling path runs


def test_alignment_agreement():
    from seqlab.seq2seq import alignment_agreement

    weights = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.2, 0.8], [0.1, 0.8, 0.1]])
    assert alignment_agreement([weights], [[(0, 0), (2, 1), (1, 2)]]) == 1.0
    assert alignment_agreement([weights], [[(0, 0), (1, 1), (2, 2)]]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="no aligned"):
        alignment_agreement([weights], [[]])


def test_greedy_stops_at_eos_and_learns_to_copy():
    pairs = ToyTranslation(max_clauses=1).sample(400, seed=0)
    sv = Vocab.build([p.source.split() for p in pairs])
    tv = Vocab.build([p.references[0].split() for p in pairs])
    ids = [(sv.encode(p.source.split()), tv.encode(p.references[0].split())) for p in pairs]
    torch.manual_seed(0)
    enc = Encoder(len(sv), embed_dim=32, hidden_dim=64)
    model = Seq2Seq(enc, AttentionDecoder(len(tv), enc.output_dim, enc.config, score="dot"),
                    tv.bos_id, tv.eos_id)
    from seqlab.train import fit

    batches = curriculum_batches(ids, 32, 300, 3, 7, tv.bos_id, tv.eos_id)
    assert all(b[1].eq(b[1][0]).all() for b in batches)  # same-length sources: no padding
    fit(model, torch.optim.Adam(model.parameters(), lr=1e-2), batches, seq2seq_loss,
        clip=1.0, progress=False, device=torch.device("cpu"))
    outputs = translate(model, [p.source for p in pairs[:50]], sv, tv)
    correct = sum(o in p.references for o, p in zip(outputs, pairs[:50]))
    assert correct >= 40
    src, lengths, *_ = seq2seq_batch(ids[:4], tv.bos_id, tv.eos_id)
    out, attention = model.greedy(src, lengths, max_len=3)
    assert all(len(o) <= 3 and tv.eos_id not in o for o in out)
    assert attention.shape[0] == 4 and attention.shape[2] == src.shape[1]


def test_length_experiment_trains_both_models_on_the_same_steps():
    result = length_experiment(steps=12, embed_dim=8, hidden_dim=16, n_test=20,
                                       progress=False)
    assert [len(result.histories[a].step_loss) for a in (True, False)] == [12, 12]
    assert all(list(curve) == list(LENGTH_BUCKETS) for curve in result.curves.values())
    assert result.drops == {a: c["3-10"] - c["31-45"] for a, c in result.curves.items()}
    assert [result.models[a].decoder.uses_attention for a in (True, False)] == [True, False]
    with pytest.raises(ValueError, match="steps must be an int >= 1, got 0"):
        length_experiment(steps=0, embed_dim=8, hidden_dim=16, n_test=20)


def test_lecture_checks_say_what_holds_and_what_is_nearest_to_failing():
    numbers = {"drop with": 3.0, "kept without": 0.7, "gap at 31-45": 60.0}
    assert [str(c) for c in LENGTH_CHECKS if not c.holds(numbers[c.key])] == ["kept without < 0.5"]
    assert LENGTH_CHECKS[0].worst([1.0, 9.5]) == 9.5 and LENGTH_CHECKS[2].worst([55, 70]) == 55


@pytest.mark.parametrize("name,where", [("length_experiment", "experiments"),
                                        ("LENGTH_SETUPS", "experiments"),
                                        ("bleu_by_length", "metrics")])
def test_moved_names_still_import_from_seq2seq_with_a_warning(name, where):
    import importlib

    from seqlab import seq2seq

    with pytest.warns(DeprecationWarning, match=f"seqlab.{where}.{name}"):
        assert getattr(seq2seq, name) is getattr(importlib.import_module(f"seqlab.{where}"), name)


def test_one_mistake_changes_one_gold_word_into_the_models_own_guess():
    """The mistaken input differs from the gold input at exactly one position k per sentence
    (1 <= k < n), holds the likeliest word there other than the gold one and the special tokens,
    and the losses are the mean negative log-probabilities of the gold word at position k and of
    those after it."""
    from seqlab.seq2seq import build_model, one_mistake

    torch.manual_seed(0)
    pairs = [([3, 4, 5], [4, 5, 6, 7]), ([5, 6], [6, 7, 8]), ([4, 4, 5, 6], [5, 9])]
    batch = seq2seq_batch(pairs, bos_id=1, eos_id=2)
    model = build_model(10, 10, bos_id=1, eos_id=2, attention=False)
    seen = []
    forward = model.forward
    model.forward = lambda src, lengths, tgt_in: seen.append(tgt_in) or forward(src, lengths,
                                                                               tgt_in)
    out = one_mistake(model, batch, seed=3)
    gold, mistaken = seen
    assert torch.equal(gold, batch[2])
    diff = (gold != mistaken).nonzero().tolist()
    assert [row for row, _ in diff] == [0, 1, 2]
    log_probs = forward(*batch[:3]).log_softmax(-1)
    nll, after = [], []
    for row, k in diff:
        n = len(pairs[row][1])
        assert 1 <= k < n
        guess = log_probs[row, k - 1].clone()
        guess[[int(gold[row, k]), 0, 1, 2]] = -torch.inf  # the gold word, <pad>, <bos>, <eos>
        assert mistaken[row, k] == guess.argmax()
        nll.append(-log_probs[row, k, batch[3][row, k]])
        after += [-log_probs[row, t, batch[3][row, t]] for t in range(k + 1, n + 1)]
    assert out["next word, clean"] == pytest.approx(torch.stack(nll).mean().item(), rel=1e-5)
    assert out["words after the next, clean"] == pytest.approx(
        torch.stack(after).mean().item(), rel=1e-5)
    with pytest.raises(ValueError, match="at least 2 words"):
        one_mistake(model, seq2seq_batch([([3], [4])], 1, 2))
