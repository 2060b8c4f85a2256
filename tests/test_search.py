"""Beam search, exact search, sampling filters and contrastive decoding on models with known
answers: tiny tables where every output's probability can be listed by brute force."""

import itertools
import math

import pytest
import torch

from seqlab import decoding, seed_everything
from seqlab.lm import NGramLM
from seqlab.seq2seq import build_model
from seqlab.transformer import TransformerSeq2Seq


class TableLM:
    """A model written in a few lines: P(next | last token) from a fixed random table, for B
    rows, each row with its own table (so batching mistakes show)."""

    def __init__(self, vocab=5, rows=3, seed=0, eos_bias=0.0):
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(rows, vocab, vocab, generator=g) * 2
        logits[..., 1] += eos_bias
        logits[..., 0] = float("-inf")  # <bos> = 0 is never produced
        self.table = logits.log_softmax(-1)
        self.bos_id, self.eos_id = 0, 1

    def start(self, row_ids):
        return {"row": row_ids}

    def step(self, state, last):
        return self.table[state["row"], last], state

    select = staticmethod(decoding.select_state)


def brute_force(model, row, max_len):
    """Every output of at most max_len steps (<eos> included), with its log-probability."""
    vocab = model.table.shape[-1]
    words = [w for w in range(vocab) if w not in (model.bos_id, model.eos_id)]
    out = []
    for n in range(max_len):
        for seq in itertools.product(words, repeat=n):
            lp, last = 0.0, model.bos_id
            for w in (*seq, model.eos_id):
                lp += model.table[row, last, w].item()
                last = w
            out.append((list(seq), lp))
    return out


def test_exact_search_finds_the_brute_force_mode():
    model = TableLM(vocab=5, rows=4, seed=1)
    rows = torch.arange(4)
    found = decoding.exact_search(model, rows, max_len=5)
    for r in range(4):
        best = max(brute_force(model, r, 5), key=lambda x: x[1])
        assert found[r].tokens == best[0]
        assert found[r].logprob == pytest.approx(best[1], abs=1e-9)


def test_beam_covering_every_prefix_is_exact_and_beam_one_is_greedy():
    model = TableLM(vocab=4, rows=3, seed=2)  # 2 words: at most 2**3 prefixes of length 3
    rows = torch.arange(3)
    beams = decoding.beam_search(model, rows, beam_size=8, max_len=4, n_best=3)
    for r in range(3):
        ranked = sorted(brute_force(model, r, 4), key=lambda x: -x[1])
        assert [h.tokens for h in beams[r]] == [seq for seq, _ in ranked[:3]]
        assert [h.logprob for h in beams[r]] == pytest.approx([lp for _, lp in ranked[:3]])
    one = decoding.beam_search(model, rows, beam_size=1, max_len=6)
    assert [h[0].tokens for h in one] == decoding.greedy(model, rows, max_len=6)


def test_length_normalisation_changes_the_ranking_as_stated():
    model = TableLM(vocab=6, rows=6, seed=3)
    rows = torch.arange(6)
    raw = decoding.beam_search(model, rows, beam_size=4, max_len=8, n_best=4)
    norm = decoding.beam_search(model, rows, beam_size=4, max_len=8, length_penalty=1.0,
                                n_best=4)
    for hyps in norm:
        for h in hyps:
            assert h.score == pytest.approx(h.logprob / (len(h.tokens) + h.finished))
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    mean_raw = sum(len(h[0].tokens) for h in raw) / 6
    mean_norm = sum(len(h[0].tokens) for h in norm) / 6
    assert mean_norm >= mean_raw  # dividing by length favours longer outputs


def test_a_beam_that_runs_out_of_steps_is_returned_unfinished():
    model = TableLM(vocab=5, rows=1, seed=4, eos_bias=-50.0)  # <eos> almost never
    hyps = decoding.beam_search(model, torch.tensor([0]), beam_size=3, max_len=5, n_best=2)[0]
    assert all(not h.finished and len(h.tokens) == 5 for h in hyps)


def test_exact_search_says_when_its_budget_ran_out():
    model = TableLM(vocab=6, rows=2, seed=5, eos_bias=-6.0)
    with pytest.warns(RuntimeWarning, match="max_expansions"):
        found = decoding.exact_search(model, torch.arange(2), max_len=8, max_expansions=3)
    assert found == [None, None]


@pytest.mark.parametrize("make", ["ngram", "rnn", "transformer"])
def test_every_model_of_the_course_is_searched_by_the_same_code(make):
    if make == "ngram":
        lm = NGramLM(2, "add-k", k=0.1).fit([s.split() for s in
                                             ["a b c", "a b", "b c a", "c"]])
        inputs = (torch.tensor([[lm.bos_id]] * 2),)
        model = lm
    else:
        seed_everything(0)
        model = (build_model(9, 8, 2, 3, attention=True, embed_dim=8, hidden_dim=8)
                 if make == "rnn" else
                 TransformerSeq2Seq(9, 8, d_model=8, n_heads=2, n_layers=1, max_len=12))
        inputs = (torch.tensor([[5, 6, 7], [8, 5, 0]]), torch.tensor([3, 2]))
    greedy = decoding.greedy(model, *inputs, max_len=5)
    beams = decoding.beam_search(model, *inputs, beam_size=3, max_len=5)
    exact = decoding.exact_search(model, *inputs, max_len=5, max_expansions=5000)
    for g, b, e in zip(greedy, beams, exact):
        g_lp = decoding.sequence_logprob(model, *[x[:1] for x in inputs], targets=[g])
        assert b[0].logprob + 1e-6 >= g_lp.item() or len(g) == 5  # beam >= greedy
        assert e.logprob + 1e-6 >= b[0].logprob  # exact >= beam
    scored = decoding.sequence_logprob(model, *inputs, targets=[e.tokens for e in exact])
    assert scored.tolist() == pytest.approx([e.logprob for e in exact], abs=1e-5)


def test_top_k_and_top_p_filters():
    lp = torch.tensor([[0.5, 0.2, 0.2, 0.1]]).log()
    kept = decoding.top_k_filter(lp, 2).exp()[0]
    assert kept.tolist() == pytest.approx([5 / 9, 2 / 9, 2 / 9, 0.0])  # the tie is kept
    assert decoding.top_p_filter(lp, 0.5).exp()[0].tolist() == pytest.approx([1, 0, 0, 0])
    assert decoding.top_p_filter(lp, 0.6).exp()[0, 3] == 0  # 0.5 + 0.2 crosses 0.6
    assert decoding.top_p_filter(lp, 0.6).exp()[0, :3].sum() == pytest.approx(1.0)
    assert (decoding.top_p_filter(lp, 1e-9).exp() > 0).sum() == 1  # always one token
    assert decoding.top_p_filter(lp, 1.0).exp()[0].tolist() == pytest.approx(lp.exp()[0].tolist())
    for bad in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match="p must be"):
            decoding.top_p_filter(lp, bad)
    with pytest.raises(ValueError, match="k must be"):
        decoding.top_k_filter(lp, 0)


def test_sampling_frequencies_follow_the_filtered_distribution():
    class Coin:
        bos_id, eos_id = 0, 3

        def start(self, prompt):
            return {"n": torch.zeros(prompt.shape[0])}

        def step(self, state, last):
            lp = torch.tensor([0.0, 0.6, 0.3, 0.1]).log().expand(len(last), 4)
            return lp, state

        select = staticmethod(decoding.select_state)

    prompts = torch.zeros(20000, 1, dtype=torch.long)
    first = [s[0] if s else 3 for s in decoding.sample(
        Coin(), prompts, max_len=1, generator=torch.Generator().manual_seed(0))]
    freq = torch.bincount(torch.tensor(first), minlength=4).double() / len(first)
    assert freq[1:].tolist() == pytest.approx([0.6, 0.3, 0.1], abs=0.015)
    top = [s[0] for s in decoding.sample(Coin(), prompts[:5000], max_len=1, top_k=2,
                                         generator=torch.Generator().manual_seed(1))]
    assert set(top) == {1, 2} and abs(top.count(1) / 5000 - 2 / 3) < 0.02
    cold = [s[0] for s in decoding.sample(Coin(), prompts[:2000], max_len=1, temperature=0.05,
                                          generator=torch.Generator().manual_seed(2))]
    assert set(cold) == {1}  # T -> 0 is greedy


def test_contrastive_decoding_prefers_what_the_amateur_does_not_expect():
    expert, amateur = TableLM(vocab=6, rows=2, seed=6), TableLM(vocab=6, rows=2, seed=7)
    rows = torch.arange(2)
    out = decoding.contrastive_decoding(expert, amateur, rows, alpha=0.1, max_len=4)
    # greedy on the contrastive scores, by hand
    for r in range(2):
        last, tokens, total = 0, [], 0.0
        for _ in range(4):
            score = decoding.contrastive_scores(expert.table[r, last][None],
                                                amateur.table[r, last][None])[0]
            last = int(score.argmax())
            total += float(score[last])
            if last == expert.eos_id:
                break
            tokens.append(last)
        assert out[r][0].tokens == tokens and out[r][0].logprob == pytest.approx(total)
    lp_e = torch.tensor([[0.0, -1.0, -5.0]])
    scores = decoding.contrastive_scores(lp_e, torch.zeros(1, 3), alpha=0.3)
    assert math.isinf(scores[0, 2]) and scores[0, 0] > scores[0, 1]  # outside the head: -inf


def test_degeneration_statistics():
    assert decoding.repetition_rate([[1, 2, 1, 2, 1, 2]], n=2) == pytest.approx(1 - 2 / 5)
    assert decoding.repetition_rate([[1, 2, 3, 4]], n=2) == 0.0
    assert decoding.distinct_n([[1, 2, 3], [1, 2, 4]], n=2) == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="no sequence"):
        decoding.distinct_n([[1]], n=2)


def test_search_arguments_are_checked():
    model = TableLM()
    with pytest.raises(ValueError, match="beam_size"):
        decoding.beam_search(model, torch.arange(3), beam_size=0)
    with pytest.raises(ValueError, match="n_best"):
        decoding.beam_search(model, torch.arange(3), beam_size=2, n_best=3)
    with pytest.raises(TypeError, match="decoding protocol"):
        decoding.beam_search(object(), torch.arange(3), beam_size=2)
    with pytest.raises(ValueError, match="temperature"):
        decoding.sample(model, torch.arange(3), temperature=-1)


def test_exact_search_survives_batch_dependent_rounding():
    """Float32 models score a row alone and among beams with different rounding (about 1e-6
    per step); beam's score must not prune the very output it found."""

    class Rounding(TableLM):
        def step(self, state, last):  # a row alone scores 1e-6 lower than in a batch of 5+
            return self.table[state["row"], last] - 1e-6 / len(last), state

    model = Rounding(vocab=5, rows=4, seed=1)
    found = decoding.exact_search(model, torch.arange(4), max_len=5)
    for r in range(4):
        best = max(brute_force(model, r, 5), key=lambda x: x[1])
        assert found[r].tokens == best[0]


def test_when_endings_outnumber_free_slots_the_best_ones_finish():
    """Beam 2: step 1 finishes <eos> (one slot left) and keeps beams [2] and [3]; at step 2
    both beams may end, and the better ending comes from the worse beam, [3]."""
    table = {0: [0, 0.5, 0.3, 0.19, 0.01], 2: [0, 0.3, 0.25, 0.25, 0.2],
             3: [0, 0.9, 0.1 / 3, 0.1 / 3, 0.1 / 3], 4: [0, 1.0, 0, 0, 0]}

    class Ends:
        bos_id, eos_id = 0, 1

        def start(self, rows):
            return {}

        def step(self, state, last):
            return torch.tensor([table[int(t)] for t in last]).log(), state

        select = staticmethod(decoding.select_state)

    hyps = decoding.beam_search(Ends(), torch.arange(1), beam_size=2, max_len=4, n_best=2)[0]
    assert [h.tokens for h in hyps] == [[], [3]]
    assert hyps[1].logprob == pytest.approx(math.log(0.19 * 0.9))
