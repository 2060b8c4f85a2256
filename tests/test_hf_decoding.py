"""seqlab.decoding against Hugging Face ``generate`` and its logits warpers, on the same weights.

Tiny random ``GPT2LMHeadModel``s built from a config (nothing is downloaded) are wrapped in the
decoding protocol by ``decoding.from_hf``, which reads them through their key/value cache.
Where both claim the same algorithm, outputs and scores agree to 1e-5; every difference that
remains is a documented design choice of seqlab, asserted below as such.
"""

import math

import pytest
import torch
from transformers import (
    GenerationConfig,
    GPT2Config,
    GPT2LMHeadModel,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from seqlab import decoding

BOS, EOS = 0, 1


def tiny_gpt2(seed, vocab=12, eos_bias=0.0, dtype=torch.float32):
    """Weights drawn wide (initializer_range 0.5), so distributions are peaked and varied;
    ``eos_bias`` scales <eos>'s output embedding to make endings likelier."""
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab, n_positions=64, n_embd=16, n_layer=2, n_head=2,
                        bos_token_id=BOS, eos_token_id=EOS, initializer_range=0.5)
    model = GPT2LMHeadModel(config).eval().to(dtype)
    with torch.no_grad():
        model.transformer.wte.weight[EOS] *= 1 + eos_bias
    return model


def prompts(seed, batch=3, length=3, vocab=12):
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(2, vocab, (batch, length - 1), generator=g)
    return torch.cat([torch.full((batch, 1), BOS), body], dim=1)


def generate(model, prompt, max_len, **options):
    """HF's generate with nothing but the options given (no default top-k 50, no min length)."""
    options = {"do_sample": False, "num_beams": 1, "top_k": None, **options}
    config = GenerationConfig(max_new_tokens=max_len, bos_token_id=BOS, eos_token_id=EOS,
                              pad_token_id=EOS, return_dict_in_generate=True, output_scores=True,
                              **options)
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    outputs = []
    for row in out.sequences[:, prompt.shape[1]:].tolist():
        outputs.append((row[: row.index(EOS)], True) if EOS in row else (row, False))
    return outputs, out


def test_the_adapter_reads_the_cache_like_a_full_pass():
    for dtype, tol in [(torch.float32, 1e-5), (torch.float64, 1e-12)]:
        model = tiny_gpt2(0, dtype=dtype)
        lm = decoding.from_hf(model)
        ids = prompts(1, batch=2, length=6)
        with torch.no_grad():
            full = model(ids).logits.log_softmax(-1)
            state = lm.start(ids[:, :2])
            for t in range(1, 6):
                lp, state = lm.step(state, ids[:, t])
                assert lp.dtype == dtype
                torch.testing.assert_close(lp, full[:, t], atol=tol, rtol=0)
        scored = decoding.sequence_logprob(lm, ids[:, :1], targets=ids[:, 1:].tolist())
        expected = full[:, :-1].gather(-1, ids[:, 1:, None]).sum((1, 2)) \
            + model(ids).logits.log_softmax(-1)[:, -1, EOS].detach()
        torch.testing.assert_close(scored, expected.double().detach(), atol=tol * 10, rtol=0)
    with pytest.raises(TypeError, match="Hugging Face"):
        decoding.from_hf(object())
    with pytest.raises(ValueError, match="begin with <bos>"):
        decoding.greedy(lm, torch.tensor([[3, 4]]))


@pytest.mark.parametrize("seed", range(4))
def test_greedy_equals_generate(seed):
    model = tiny_gpt2(seed, eos_bias=[0.0, 1.0][seed % 2])
    prompt = prompts(seed, batch=4)
    want, _ = generate(model, prompt, 8)
    got = decoding.greedy(decoding.from_hf(model), prompt, max_len=8)
    assert got == [tokens for tokens, _ in want]


def hf_beams(model, prompt, k, max_len, rule, penalty, n):
    """generate's n-best lists, one prompt row at a time: (tokens, finished, score) each."""
    rows = []
    for i in range(prompt.shape[0]):
        outputs, out = generate(model, prompt[i : i + 1], max_len, num_beams=k,
                                num_return_sequences=n, early_stopping=rule,
                                length_penalty=penalty)
        rows.append([(t, f, s) for (t, f), s in zip(outputs, out.sequences_scores.tolist())])
    return rows


@pytest.mark.parametrize("rule", decoding.STOPPING_RULES)
@pytest.mark.parametrize("k", [2, 4])
def test_beam_search_equals_generate(rule, k):
    """Every n-best list (num_return_sequences = k) and its scores, for length penalties 0, 1
    and 2, with budgets that cut outputs off and models that end early or late."""
    compared = finished = unfinished = 0
    for seed in range(6):
        model = tiny_gpt2(10 + seed, eos_bias=[0.0, 1.5][seed % 2])
        lm = decoding.from_hf(model)
        prompt = prompts(seed, batch=3)
        for penalty in (0.0, 1.0, 2.0):
            max_len = 3 + seed % 4
            want = hf_beams(model, prompt, k, max_len, rule, penalty, k)
            got = decoding.beam_search(lm, prompt, beam_size=k, max_len=max_len, n_best=k,
                                       length_penalty=penalty, early_stopping=rule)
            for g, w in zip(got, want):
                assert [(h.tokens, h.finished) for h in g] == [(t, f) for t, f, _ in w], (
                    seed, penalty)
                assert [h.score for h in g] == pytest.approx([s for _, _, s in w], abs=1e-5)
                compared += 1
                finished += sum(h.finished for h in g)
                unfinished += sum(not h.finished for h in g)
    assert compared == 54 and finished > 20 and unfinished > 20


def test_beam_one_is_greedy_and_hf_never_runs_a_beam_of_one():
    """generate with num_beams=1 is greedy decoding whatever early_stopping says. seqlab's beam
    of 1 is greedy under True and False; under "never" with a length penalty > 0 it goes on
    after greedy's <eos> while a live prefix could still score better at max_len: a documented
    difference, never a worse result."""
    differs = 0
    for seed in range(8):
        model = tiny_gpt2(seed, eos_bias=1.0)
        lm, prompt = decoding.from_hf(model), prompts(seed)
        want, _ = generate(model, prompt, 6)
        for rule in decoding.STOPPING_RULES:
            got = decoding.beam_search(lm, prompt, beam_size=1, max_len=6, length_penalty=1.0,
                                       early_stopping=rule)
            if rule == "never":
                greedy_scores = decoding.sequence_logprob(lm, prompt, targets=[
                    t for t, _ in want])
                for h, (tokens, done), lp in zip(got, want, greedy_scores.tolist()):
                    if h[0].tokens != tokens:
                        differs += 1
                        greedy_score = lp / (len(tokens) + 1) if done else None
                        assert greedy_score is None or h[0].score >= greedy_score - 1e-6
            else:
                assert [h[0].tokens for h in got] == [t for t, _ in want]
    assert differs > 0


def test_ties_and_impossible_beams_are_documented_differences():
    """Two choices of seqlab's, shown on one model each: (1) a beam wider than what the
    vocabulary can fill: HF fills it with beams scored -1e9 and may return them; seqlab never
    keeps a hypothesis of probability 0. (2) Equal scores: seqlab breaks ties by beam, then
    token id, deterministically."""
    model = tiny_gpt2(3, vocab=3)  # <bos>, <eos> and 1 word: 3 candidates at step 1
    lm, prompt = decoding.from_hf(model), prompts(3, batch=1, length=2, vocab=3)
    want = hf_beams(model, prompt, 4, 1, True, 1.0, 4)[0]
    got = decoding.beam_search(lm, prompt, beam_size=4, max_len=1, n_best=4, length_penalty=1.0)
    assert len(got[0]) == 3 and all(math.isfinite(h.score) for h in got[0])
    assert len(want) == 4 and want[-1][2] < -1e8  # HF returned an impossible beam
    assert [(h.tokens, h.finished) for h in got[0]] == [(t, f) for t, f, _ in want[:3]]

    class Tied:  # every token equally likely: every candidate ties
        bos_id, eos_id = BOS, EOS

        def start(self, rows):
            return {}

        def step(self, state, last):
            return torch.full((len(last), 5), -math.log(4)).index_fill(1, torch.tensor([0]),
                                                                       float("-inf")), state

        select = staticmethod(decoding.select_state)

    hyps = decoding.beam_search(Tied(), torch.arange(1), beam_size=2, max_len=2, n_best=2)[0]
    assert [h.tokens for h in hyps] == [[], [2]]  # <eos> (id 1) first, then the smallest word


def reference_warp(logits, temperature=1.0, top_k=None, top_p=None, min_p=None, typical_p=None,
                   min_tokens_to_keep=1):
    """HF's warpers in generate's order, then log_softmax."""
    warpers = [TemperatureLogitsWarper(temperature)]
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k, min_tokens_to_keep=min_tokens_to_keep))
    if top_p is not None:
        warpers.append(TopPLogitsWarper(top_p, min_tokens_to_keep=min_tokens_to_keep))
    if min_p is not None:
        warpers.append(MinPLogitsWarper(min_p, min_tokens_to_keep=min_tokens_to_keep))
    if typical_p is not None:
        warpers.append(TypicalLogitsWarper(typical_p, min_tokens_to_keep=min_tokens_to_keep))
    for warp in warpers:
        logits = warp(None, logits)
    return logits.log_softmax(-1)


def has_ties(logits):
    return any(len(set(row)) < len(row) for row in logits.tolist())


def test_filters_equal_hfs_warpers_on_random_logits():
    """Temperature, top-k, top-p, min-p and typical filtering, alone and chained, with
    min_tokens_to_keep 1-3: the same tokens kept and the same log-probs (untied rows)."""
    checked = 0
    for seed in range(60):
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(4, 2 + seed % 9, generator=g) * 3
        if has_ties(logits):
            continue
        knobs = {"temperature": [0.5, 1.0, 1.7][seed % 3], "top_k": [None, 1, 3, 20][seed % 4],
                 "top_p": [None, 0.3, 0.9, 1.0][(seed // 2) % 4],
                 "min_p": [None, 0.05, 0.5][(seed // 3) % 3],
                 "typical_p": [None, 0.2, 0.95][(seed // 5) % 3]}
        want = reference_warp(logits, **knobs)
        got = decoding.sampling_distribution(logits.log_softmax(-1), **knobs)
        assert torch.equal(got.isfinite(), want.isfinite()), (seed, knobs)
        torch.testing.assert_close(got[want.isfinite()], want[want.isfinite()], atol=1e-5,
                                   rtol=0)
        for m in (2, 3):
            for name, ours, theirs in [
                    ("top_p", decoding.top_p_filter(logits, 0.1, m),
                     TopPLogitsWarper(0.1, min_tokens_to_keep=m)),
                    ("min_p", decoding.min_p_filter(logits, 0.9, m),
                     MinPLogitsWarper(0.9, min_tokens_to_keep=m)),
                    ("typical", decoding.typical_filter(logits, 0.1, m),
                     TypicalLogitsWarper(0.1, min_tokens_to_keep=m))]:
                assert torch.equal(ours.isfinite(), theirs(None, logits).isfinite()), (seed, name)
        checked += 1
    assert checked > 40


def test_top_p_of_one_keeps_every_token_like_hf():
    logits = torch.tensor([[0.0, -20.0, -20.0]])
    ours = decoding.top_p_filter(logits.log_softmax(-1), 1.0)
    assert ours.isfinite().all()
    assert torch.equal(ours.isfinite(), TopPLogitsWarper(1.0)(None, logits).isfinite())


def test_ties_at_the_cut_are_all_kept():
    """A documented difference: where several tokens tie with the last one a filter keeps,
    seqlab keeps them all (top-k's rule, for top-p, min-p and typical too); HF keeps the ones
    its sort puts first and may drop the others."""
    logits = torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0]])
    ours = decoding.top_p_filter(logits.log_softmax(-1), 0.6).isfinite()[0].tolist()
    theirs = TopPLogitsWarper(0.6)(None, logits).isfinite()[0].tolist()
    assert ours == [True, True, True, True, False]
    assert sum(theirs) < sum(ours) and all(o or not t for o, t in zip(ours, theirs))
    # top-k keeps ties in both
    assert torch.equal(decoding.top_k_filter(logits.log_softmax(-1), 2).isfinite(),
                       TopKLogitsWarper(2)(None, logits).isfinite())


def chi_square_p_value(counts, probs):
    """P(X >= statistic) for X ~ chi-square with (cells - 1) degrees of freedom, cells of
    expected count < 5 pooled (torch's regularised incomplete gamma: no table needed)."""
    expected = probs * counts.sum()
    keep = expected >= 5
    observed = torch.cat([counts[keep], counts[~keep].sum(0, keepdim=True)])
    expected = torch.cat([expected[keep], expected[~keep].sum(0, keepdim=True)])
    observed, expected = observed[expected > 0], expected[expected > 0]
    stat = ((observed - expected) ** 2 / expected).sum()
    df = len(observed) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2))


@pytest.mark.parametrize("knobs", [{}, {"temperature": 0.7}, {"top_k": 3}, {"top_p": 0.8},
                                   {"min_p": 0.2}, {"typical_p": 0.9},
                                   {"temperature": 1.5, "top_k": 5, "top_p": 0.9}])
def test_sampling_frequencies_match_hf_and_the_exact_distribution(knobs):
    """Outputs of two tokens drawn 4,000 times by seqlab and by generate: both sets of counts
    pass a chi-square test against the exact filtered distribution of outputs (computed from
    the model's log-probs through HF's warpers), at level 0.001 each."""
    model = tiny_gpt2(21, vocab=8)
    lm, prompt = decoding.from_hf(model), prompts(5, batch=1, length=2, vocab=8)
    n, vocab = 4000, 8
    with torch.no_grad():  # the exact distribution of (first, second) token pairs
        first = reference_warp(model(prompt).logits[:, -1], **knobs)[0].exp()
        pairs = torch.cat([prompt.expand(vocab, -1), torch.arange(vocab)[:, None]], dim=1)
        second = reference_warp(model(pairs).logits[:, -1], **knobs).exp()
    exact = (first[:, None] * second).flatten()
    exact[EOS * vocab : EOS * vocab + vocab] = 0  # after <eos> nothing is drawn:
    exact[EOS * vocab] = first[EOS]  # the pair (<eos>, <eos>) stands for "ended at once"

    def counts(rows):
        index = [(r + [EOS, EOS])[0] * vocab + (r + [EOS, EOS])[1] if r else EOS * vocab
                 for r in rows]
        return torch.bincount(torch.tensor(index), minlength=vocab * vocab).double()

    torch.manual_seed(0)
    ours = decoding.sample(lm, prompt, max_len=2, num_samples=n,
                           generator=torch.Generator().manual_seed(1), **knobs)
    torch.manual_seed(2)
    theirs, _ = generate(model, prompt.expand(n, -1), 2, do_sample=True, **knobs)
    for name, rows in [("seqlab", ours), ("HF", [t for t, _ in theirs])]:
        c = counts(rows)
        assert not (c[exact == 0] > 0).any(), f"{name} drew a filtered-out output"
        assert chi_square_p_value(c, exact) > 1e-3, (name, knobs)
