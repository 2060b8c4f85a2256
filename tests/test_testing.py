"""autograder.testing, the helpers hidden tests import: every reference answer it computes
against seqlab, torch or sacrebleu, its fixtures against the library's decoders, and the rule
that only hidden blocks import it."""

import math
import random

import nbformat
import numpy as np
import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from torch import nn

from autograder import testing
from autograder.authoring.release import regions
from autograder.course import assignments, source_notebook
from seqlab import decoding
from seqlab.rnn import NumpyRNNLM


@pytest.mark.parametrize("assignment", assignments())
def test_only_hidden_blocks_import_it(assignment):
    """Students run the visible tests in their own kernel, where the module does not exist."""
    _, public = regions(nbformat.read(source_notebook(assignment), as_version=4))
    assert not [line for line in public if "autograder.testing" in line]


# ------------------------------------------------------------------------------------ 02
def test_rnn_forward_equals_the_librarys_rnn():
    for seed in range(5):
        rng = np.random.default_rng(seed)
        V, D, H, T = (int(v) for v in rng.integers(1, 7, size=4))
        lm = NumpyRNNLM(V, D, H, seed=seed)
        params = {**lm.params, "V": lm.params["Vout"]}
        ids, targets, h0 = rng.integers(0, V, T), rng.integers(0, V, T), rng.normal(size=H)
        hs, probs, loss = testing.rnn_forward(params, ids, targets, h0)
        expected, cache = lm.forward(ids[None], targets[None], h0[None])
        assert loss == pytest.approx(expected, rel=1e-12)
        np.testing.assert_allclose(hs, np.stack(cache["hs"])[:, 0], rtol=1e-12)
        np.testing.assert_allclose(probs, np.stack(cache["probs"])[:, 0], rtol=1e-12)


# ------------------------------------------------------------------------------------ 05
def random_masks(lead, T, S, g):
    """None, a [T, S] mask, a [..., 1, S] key-padding mask and a full one with an empty row."""
    full = torch.rand(*lead, T, S, generator=g) > 0.4
    full[..., 0, :] = False
    return [None, torch.rand(T, S, generator=g) > 0.3, torch.rand(*lead, 1, S, generator=g) > 0.3,
            full]


def torch_attention(q, k, v, mask):
    """torch's SDPA, with zeros where a query may attend nowhere (torch gives NaN there)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is None:
        return out, weights
    nowhere = ~torch.broadcast_to(mask, scores.shape).any(-1, keepdim=True)
    return out.masked_fill(nowhere, 0.0), weights.masked_fill(nowhere, 0.0)


def test_attention_oracle_and_reference_part_equal_torch():
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        lead = [int(n) for n in torch.randint(1, 4, (seed % 3,), generator=g)]
        T, S, d, dv = (int(n) for n in torch.randint(1, 6, (4,), generator=g))
        q, k = (torch.randn(*lead, n, d, generator=g, dtype=torch.float64) for n in (T, S))
        v = torch.randn(*lead, S, dv, generator=g, dtype=torch.float64)
        for mask in random_masks(lead, T, S, g):
            want = torch_attention(q, k, v, mask)
            for got in (testing.attention_loops(q, k, v, mask), testing.attention(q, k, v, mask)):
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def torch_mha(q, kv, Ws, n_heads, mask):
    """nn.MultiheadAttention with these weights; ``mask`` (True = may attend) as its masks."""
    layer = nn.MultiheadAttention(q.shape[-1], n_heads, bias=False, batch_first=True).double()
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.cat(Ws[:3]))
        layer.out_proj.weight.copy_(Ws[3])
        if mask is None:
            return layer(q, kv, kv)
        if mask.dim() == 3:  # [B, 1, S]: a key-padding mask
            return layer(q, kv, kv, key_padding_mask=~mask[:, 0])
        return layer(q, kv, kv, attn_mask=~mask)


def test_multi_head_attention_oracle_and_reference_part_equal_torch():
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        B, T, S, h, d_k = (int(n) for n in torch.randint(1, 5, (5,), generator=g))
        q = torch.randn(B, T, h * d_k, generator=g, dtype=torch.float64)
        kv = torch.randn(B, S, h * d_k, generator=g, dtype=torch.float64)
        Ws = [torch.randn(h * d_k, h * d_k, generator=g, dtype=torch.float64) for _ in range(4)]
        masks = [None, torch.rand(T, S, generator=g) > 0.3, torch.rand(B, 1, S, generator=g) > 0.3]
        for mask in masks:
            if mask is not None:
                mask[..., 0] = True  # torch gives NaN for a query that may attend nowhere
            want = torch_mha(q, kv, Ws, h, mask)
            for got in (testing.multi_head_attention_loops(q, kv, kv, *Ws, h, mask),
                        testing.multi_head_attention(q, kv, kv, *Ws, h, mask)):
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_split_and_merge_heads_are_inverse_and_keep_features_together():
    x = torch.arange(24.0).reshape(1, 3, 8)
    heads = testing.split_heads(x, 2)
    torch.testing.assert_close(heads, x.reshape(1, 3, 2, 4).transpose(1, 2))
    torch.testing.assert_close(testing.merge_heads(heads), x)


def test_reference_parts_refuse_what_would_cost_the_grader():
    with pytest.raises(TypeError, match="at most 100000 elements"):
        testing.merge_heads(torch.zeros(2, 2, 200, 200))
    with pytest.raises(TypeError, match="torch.Tensor"):
        testing.attention([[1.0]], torch.zeros(1, 1), torch.zeros(1, 1))
    with pytest.raises(ValueError, match="n_heads should be an int"):
        testing.split_heads(torch.zeros(1, 2, 4), 5)
    with pytest.raises(ValueError, match="too large"):
        big = torch.zeros(300, 300, 1)
        testing.attention(big, big, big)


# ------------------------------------------------------------------------------------ 06
def protocol_cases(n):
    for seed in range(n):
        rng = random.Random(seed)
        vocab, max_len = rng.randint(3, 6), rng.randint(1, 6)
        model, dist, rows = testing.random_model(seed, vocab, eos_bias=rng.choice([-2.0, 0.0, 1.0]))
        inputs = [rng.randrange(1000) for _ in range(rng.randint(1, 3))]
        yield rng, vocab, max_len, model, dist, rows, inputs


def test_greedy_oracle_equals_the_librarys_greedy():
    for _, _, max_len, model, dist, _, inputs in protocol_cases(20):
        assert decoding.greedy(model, torch.tensor(inputs), max_len=max_len) == [
            testing.oracle_greedy(dist, s, max_len) for s in inputs]


def test_check_outputs_says_what_differs():
    testing.check_outputs([[2, 3], []], [[2, 3], []], "greedy")
    with pytest.raises(AssertionError, match=r"row 1 of 2: got \[2\], expected \[\] \(hint"):
        testing.check_outputs([[2, 3], [2]], [[2, 3], []], "greedy", " (hint)")
    with pytest.raises(AssertionError, match="a list of int"):
        testing.check_outputs([torch.tensor([2])], [[2]], "greedy")
    with pytest.raises(AssertionError, match="should not contain <bos> or <eos>"):
        testing.check_outputs([[2, testing.EOS]], [[2]], "greedy")
    with pytest.raises(AssertionError, match="a list of 2 outputs"):
        testing.check_outputs([[2]], [[2], [3]], "greedy")


def test_beam_oracle_equals_the_librarys_beam_search_and_the_model_counts_its_rows():
    for rng, _, max_len, model, dist, rows, inputs in protocol_cases(40):
        k, beta = rng.randint(1, 4), rng.choice([0.0, 0.5, 1.0, 2.0])
        got = decoding.beam_search(model, torch.tensor(inputs), beam_size=k, max_len=max_len,
                                   length_penalty=beta)
        for (best, *_), source in zip(got, inputs):
            tokens, logprob = testing.oracle_beam(dist, source, k, max_len, beta)
            assert best.tokens == tokens
            assert best.logprob == pytest.approx(logprob, rel=1e-12, abs=1e-12)
        assert 0 < sum(rows) <= k * max_len * len(inputs)  # K rows per input per step


def test_exhaustive_oracle_equals_exact_search_and_the_widest_beam():
    for seed in range(12):
        words, max_len = [(2, 4), (3, 3), (4, 2)][seed % 3]
        model, dist, _ = testing.random_model(seed, words + 2, eos_bias=random.Random(seed)
                                              .uniform(-1.0, 1.0))
        exact = decoding.exact_search(model, torch.tensor([seed]), max_len=max_len)[0]
        tokens, logprob = testing.oracle_exhaustive(dist, seed, words + 2, max_len, 0.0)
        if len(tokens) < max_len:  # it finished with <eos>: exact search's answer
            assert (tokens, logprob) == (exact.tokens, pytest.approx(exact.logprob, abs=1e-12))
        else:  # cut off at max_len, which exact search does not consider
            assert logprob >= exact.logprob
        k = words ** (max_len - 1) * (words + 1)  # a beam that holds every prefix
        for alpha in (0.0, 0.5, 1.0):
            tokens, logprob = testing.oracle_exhaustive(dist, seed, words + 2, max_len, alpha)
            beam = testing.oracle_beam(dist, seed, k, max_len, alpha)
            assert beam[0] == tokens and beam[1] == pytest.approx(logprob, abs=1e-12)


def test_the_model_stops_a_search_past_its_row_budget():
    model, _, rows = testing.random_model(0, 10, max_rows=5)
    state = model.start(torch.tensor([1, 2]))
    _, state = model.step(state, torch.tensor([0, 0]))
    state = model.select(state, torch.tensor([0, 0, 1, 1]))
    with pytest.raises(AssertionError, match=r"asked for 6 rows in 2 calls .* more than the 5"):
        model.step(state, torch.tensor([2, 3, 2, 3]))
    assert rows == [2, 4]
    with pytest.raises(ValueError, match="3 tokens for a state of 4 rows"):
        model.step(state, torch.tensor([2, 3, 2]))
    with pytest.raises(TypeError, match="LongTensor"):
        model.step(state, torch.zeros(4))


def test_the_model_gives_a_continued_row_its_own_prefix():
    """A decoder that forgets model.select gets other numbers: every prefix has its own."""
    model, dist, _ = testing.random_model(3, 6)
    state = model.select(model.start(torch.tensor([7])), torch.tensor([0, 0]))
    log_probs, state = model.step(state, torch.tensor([0, 0]))
    log_probs, _ = model.step(state, torch.tensor([2, 3]))
    assert log_probs[0].tolist() == dist(7, (0, 2)) and log_probs[1].tolist() == dist(7, (0, 3))
    assert log_probs[0].tolist() != log_probs[1].tolist()
    assert all(math.isclose(math.fsum(math.exp(v) for v in row), 1.0) for row in log_probs.tolist())


def test_broken_rule_names_rule_3_and_check_beams_says_what_differs():
    for seed in range(200):  # a case where cutting nothing off at max_len changes the answer
        model, dist, _ = testing.random_model(seed, 4, eos_bias=-2.0)
        right = testing.oracle_beam(dist, 5, 2, 2, 0.0)
        wrong = testing.oracle_beam(dist, 5, 2, 2, 0.0, "no_cut_off")
        if wrong is not None and wrong[0] != right[0]:
            break
    assert "rule 3" in testing.broken_rule(wrong[0], dist, 5, 2, 2, 0.0)
    assert testing.broken_rule(right[0], dist, 5, 2, 2, 0.0) == ""
    testing.check_beams([(list(right[0]), right[1])], [right], "ok")
    with pytest.raises(AssertionError, match=r"row 0: got .*rule 3"):
        testing.check_beams([(wrong[0], wrong[1])], [right], "beam",
                            lambda row, tokens: testing.broken_rule(tokens, dist, 5, 2, 2, 0.0))
    with pytest.raises(AssertionError, match="tokens should be a list of int"):
        testing.check_beams([(torch.tensor(right[0]), right[1])], [right], "beam")
    with pytest.raises(AssertionError, match="should be a float"):
        testing.check_beams([(right[0], torch.tensor(right[1]))], [right], "beam")


# ------------------------------------------------------------------------------------ 07
def test_bleu_parts_give_sacrebleus_statistics():
    for seed in range(20):
        rng = random.Random(seed)
        hyps = [rng.choices("abcdefg", k=rng.randint(0, 12)) for _ in range(rng.randint(1, 8))]
        refs = [[h[: rng.randint(0, len(h))] + rng.choices("abcdefg", k=rng.randint(0, 6))
                 for _ in range(rng.randint(1, 3))] for h in hyps]
        streams = [[" ".join(r[i]) if i < len(r) else None for r in refs]
                   for i in range(max(map(len, refs)))]
        stats = sacrebleu.corpus_bleu([" ".join(h) for h in hyps], streams, tokenize="none",
                                      smooth_method="none")
        for n in range(1, 5):
            matches, totals = zip(*(testing.modified_precision(h, r, n)
                                    for h, r in zip(hyps, refs)))
            assert (sum(matches), sum(totals)) == (stats.counts[n - 1], stats.totals[n - 1])
        bp = testing.brevity_penalty(stats.sys_len, stats.ref_len)
        assert bp == pytest.approx(stats.bp, rel=1e-12)


def test_bleu_parts_check_their_arguments():
    assert testing.ngrams(("a", "b", "c"), 2) == [("a", "b"), ("b", "c")]
    assert testing.max_ref_counts([["a", "a"], ["a", "b", "a", "a"]], 1) == {("a",): 3, ("b",): 1}
    with pytest.raises(TypeError, match="list of tokens"):
        testing.ngrams("abc", 2)
    with pytest.raises(TypeError, match="list of references"):
        testing.max_ref_counts("abc", 1)
    with pytest.raises(TypeError, match="two numbers"):
        testing.brevity_penalty("3", 4)


# ------------------------------------------------------------------------------------ 08
def test_masked_calls_mask_tokens_with_a_seeded_generator_and_checks_its_types():
    def draws(ids, special_ids, mask_id, vocab_size, generator, p=0.15):
        return ids.masked_fill(torch.rand(ids.shape, generator=generator) < p, mask_id), ids

    ids = torch.randint(7, 20, (4, 9), generator=torch.Generator().manual_seed(0))
    first = testing.masked(draws, ids, [0, 4], 4, 20, 3, ("seqlab",), p=0.5)
    again = testing.masked(draws, ids, [0, 4], 4, 20, 3, ("seqlab",), p=0.5)
    assert torch.equal(first[0], again[0]) and (first[0] == 4).any()
    with pytest.raises(AssertionError, match="two LongTensors of shape"):
        testing.masked(lambda *a, **k: (ids.float(), ids), ids, [0], 4, 20, 0, ())
    with pytest.raises(AssertionError, match="a tuple"):
        testing.masked(lambda *a, **k: [ids, ids], ids, [0], 4, 20, 0, ())
