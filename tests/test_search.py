"""Beam search, exact search, sampling filters and contrastive decoding on models with known
answers: tiny tables where every output's probability can be listed by brute force."""

import itertools
import math

import pytest
import torch

from seqlab import decoding, metrics, seed_everything
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


def brute_force(model, row, max_len, unfinished=False):
    """Every output of at most max_len steps (<eos> included), with its log-probability; with
    ``unfinished``, also every output of max_len tokens cut off without <eos>."""
    vocab = model.table.shape[-1]
    words = [w for w in range(vocab) if w not in (model.bos_id, model.eos_id)]
    out = []
    for n in range(max_len + unfinished):
        for seq in itertools.product(words, repeat=n):
            lp, last = 0.0, model.bos_id
            for w in (*seq, model.eos_id) if n < max_len else seq:
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


def test_beam_covering_every_candidate_is_exact_and_beam_one_is_greedy():
    # 2 words: at most 2**3 prefixes of length 3, so at most 8 * 3 candidates per step
    model = TableLM(vocab=4, rows=3, seed=2)
    rows = torch.arange(3)
    beams = decoding.beam_search(model, rows, beam_size=24, max_len=4, n_best=3,
                                 early_stopping="never")
    for r in range(3):
        ranked = sorted(brute_force(model, r, 4, unfinished=True), key=lambda x: -x[1])
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
                 TransformerSeq2Seq(9, 8, d_model=8, num_heads=2, num_layers=1, max_len=12))
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
    out = decoding.contrastive_decoding(expert, amateur, rows, plausibility=0.1, max_len=4)
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
    scores = decoding.contrastive_scores(lp_e, torch.zeros(1, 3), plausibility=0.3)
    assert math.isinf(scores[0, 2]) and scores[0, 0] > scores[0, 1]  # outside the head: -inf


def test_degeneration_statistics():
    assert metrics.repetition_rate([[1, 2, 1, 2, 1, 2]], n=2) == pytest.approx(1 - 2 / 5)
    assert metrics.repetition_rate([[1, 2, 3, 4]], n=2) == 0.0
    assert metrics.distinct_n([[1, 2, 3], [1, 2, 4]], n=2) == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="no sequence"):
        metrics.distinct_n([[1]], n=2)
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        metrics.repetition_rate([[1, 2]], n=0)


@pytest.mark.parametrize("name", ["repetition_rate", "distinct_n", "overlap_f1"])
def test_scores_moved_to_metrics_keep_their_old_name_with_a_warning(name):
    with pytest.warns(DeprecationWarning, match=f"seqlab.metrics.{name}"):
        assert getattr(decoding, name) is getattr(metrics, name)
    with pytest.raises(AttributeError):
        decoding.no_such_name  # noqa: B018


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


class PrefixLM:
    """P(next | row, whole prefix): a fresh random distribution for every prefix, so a beam
    continued from the wrong parent's state shows. ``ties`` rounds the logits to integers
    (many equal candidates); ``eos_bias`` shifts <eos>. <bos> = 0 is never produced."""

    def __init__(self, vocab, seed, ties=False, eos_bias=0.0):
        self.vocab, self.seed, self.ties, self.eos_bias = vocab, seed, ties, eos_bias
        self.bos_id, self.eos_id = 0, 1

    def dist(self, row, prefix):
        g = torch.Generator().manual_seed(hash((self.seed, row, tuple(prefix))) % 2**31)
        logits = torch.randn(self.vocab, generator=g, dtype=torch.float64) * 2
        logits = logits.round() if self.ties else logits
        logits[1] += self.eos_bias
        logits[0] = float("-inf")
        return logits.log_softmax(-1)

    def start(self, rows):
        return {"row": rows, "prefix": torch.zeros(len(rows), 0, dtype=torch.long)}

    def step(self, state, last):
        prefix = torch.cat([state["prefix"], last[:, None]], dim=1)
        out = torch.stack([self.dist(int(r), p[1:].tolist())
                           for r, p in zip(state["row"], prefix)])
        return out, {"row": state["row"], "prefix": prefix}

    select = staticmethod(decoding.select_state)


def oracle_beam(dist, k, max_len, length_penalty, rule):
    """HF's beam search for one row, written with lists: [(tokens, logprob, score, ended)],
    best first. Ties go to the earlier beam, then the smaller token, then the older result."""
    live, final, open_ = [((), 0.0)], [], True
    for t in range(1, max_len + 1):
        cands = [(lp + s, prefix, w) for prefix, lp in live
                 for w, s in enumerate(dist(prefix).tolist())]
        ranked = sorted(cands, key=lambda c: -c[0])  # stable: beam order, then token
        if open_:
            for lp, prefix, w in ranked[:k]:
                ends = w == 1
                if lp > -math.inf and (ends or t == max_len):
                    toks = list(prefix) + ([] if ends else [w])
                    final.append((toks, lp, lp / t ** length_penalty, ends))
            final = sorted(final, key=lambda h: -h[2])[:k]
        live = [(prefix + (w,), lp) for lp, prefix, w in ranked if w != 1][:k]
        live = [(p, lp) for p, lp in live if lp > -math.inf]
        if open_:
            if not live:
                open_ = False
            elif len(final) == k:
                length = max_len if rule == "never" and length_penalty > 0 else t
                open_ = rule is not True and live[0][1] / length ** length_penalty > final[-1][2]
    return final


@pytest.mark.parametrize("rule", decoding.STOPPING_RULES)
@pytest.mark.parametrize("ties", [False, True])
def test_beam_search_follows_the_rules_in_every_corner(rule, ties):
    """Against a one-row-at-a-time oracle: budgets that cut outputs off (max_len 1-5), <eos>
    first or never, tied candidates, beams wider than the vocabulary, and batches whose rows
    finish at different steps; every n-best list, scores included."""
    cases = 0
    for seed in range(24):
        rng = torch.Generator().manual_seed(seed)
        vocab = int(torch.randint(3, 6, (1,), generator=rng))
        k = [1, 2, 3, 8][seed % 4]  # 8 > vocab: more beams than tokens
        max_len = 1 + seed % 5
        penalty = [0.0, 1.0, 2.0][seed % 3]
        model = PrefixLM(vocab, seed, ties, eos_bias=[-3.0, 0.0, 4.0][(seed // 3) % 3])
        rows = torch.arange(1 + seed % 3)
        got = decoding.beam_search(model, rows, beam_size=k, max_len=max_len, n_best=k,
                                   length_penalty=penalty, early_stopping=rule)
        for r in rows.tolist():
            want = oracle_beam(lambda p, m=model, r=r: m.dist(r, list(p)), k, max_len, penalty,
                               rule)
            assert [(h.tokens, h.finished) for h in got[r]] == [(w[0], w[3]) for w in want], (
                seed, r)
            assert [h.logprob for h in got[r]] == pytest.approx([w[1] for w in want], abs=1e-12)
            assert [h.score for h in got[r]] == pytest.approx([w[2] for w in want], abs=1e-12)
            cases += 1
    assert cases > 40


def test_live_beams_join_at_max_len_and_the_best_endings_are_kept():
    """The two cases of the bug reports, by hand. Tokens <bos> 0, <eos> 1, a 2, b 3."""
    tables = {
        # step 1: a .5, <eos> .3, b .2; after a: a .7, <eos> .3; after b: a .5, b .5
        "max_len": {(): [0, .3, .5, .2], (2,): [0, .3, .7, 0], (3,): [0, 0, .5, .5]},
        # step 1 as above; afterwards <eos> .9 (a .05, b .05)
        "n_best": {(): [0, .3, .5, .2], (2,): [0, .9, .05, .05], (3,): [0, .9, .05, .05]},
    }

    class Table:
        bos_id, eos_id = 0, 1

        def __init__(self, table):
            self.table = table

        def start(self, rows):
            return {"prefix": torch.zeros(len(rows), 0, dtype=torch.long)}

        def step(self, state, last):
            prefix = torch.cat([state["prefix"], last[:, None]], dim=1)
            probs = [self.table.get(tuple(p[1:].tolist()), [0, 1, 0, 0]) for p in prefix]
            return torch.tensor(probs, dtype=torch.float64).log(), {"prefix": prefix}

        select = staticmethod(decoding.select_state)

    model = Table(tables["max_len"])
    for penalty, score in [(0.0, math.log(0.35)), (1.0, math.log(0.35) / 2)]:
        best = decoding.beam_search(model, torch.arange(1), beam_size=2, max_len=2,
                                    length_penalty=penalty)[0][0]
        assert (best.tokens, best.finished) == ([2, 2], False)
        assert best.score == pytest.approx(score)
    hyps = decoding.beam_search(Table(tables["n_best"]), torch.arange(1), beam_size=2,
                                max_len=5, length_penalty=1.0, n_best=2)[0]
    assert [h.tokens for h in hyps] == [[2], [3]]
    assert [h.score for h in hyps] == pytest.approx([math.log(.45) / 2, math.log(.18) / 2])


def test_the_three_stopping_rules_can_return_three_outputs():
    """With length_penalty 1: True stops at the first K finished; False at the heuristic;
    "never" waits for a long output whose mean log-probability is better."""
    found = {}
    for seed in range(200):
        model = PrefixLM(5, seed, eos_bias=1.0)
        out = {rule: decoding.beam_search(model, torch.arange(1), beam_size=2, max_len=6,
                                          length_penalty=1.0, early_stopping=rule)[0][0]
               for rule in decoding.STOPPING_RULES}
        key = tuple(tuple(h.tokens) for h in out.values())
        if len(set(key)) > 1:
            found[seed] = out
            # the later the rule stops, the better (or equal) the score it returns
            assert out[True].score <= out[False].score + 1e-12
            assert out[False].score <= out["never"].score + 1e-12
    assert len(found) >= 3


def test_greedy_and_sampling_at_the_edges():
    """Greedy equals beam 1 (True) with <eos> first, at max_len and on ties; sampling at
    tau -> 0 is greedy; rows of a batch finish at different steps and stay finished."""
    for seed, ties, bias in [(0, False, 4.0), (1, True, 0.0), (2, False, -4.0), (3, True, 1.0)]:
        model = PrefixLM(6, seed, ties, bias)
        rows = torch.arange(6)
        greedy = decoding.greedy(model, rows, max_len=4)
        beam = decoding.beam_search(model, rows, beam_size=1, max_len=4)
        assert [h[0].tokens for h in beam] == greedy
        for r, out in enumerate(greedy):  # argmax with ties to the smaller id, by hand
            prefix = []
            for _ in range(4):
                w = int(model.dist(r, prefix).argmax())
                if w == 1:
                    break
                prefix.append(w)
            assert out == prefix
        cold = decoding.sample(model, rows, max_len=4, temperature=1e-4,
                               generator=torch.Generator().manual_seed(seed))
        if not ties:
            assert cold == greedy
    lengths = {len(o) for o in decoding.greedy(PrefixLM(6, 5), torch.arange(8), max_len=6)}
    assert len(lengths) > 1


def test_beam_wider_than_the_vocabulary_keeps_no_impossible_hypothesis():
    model = PrefixLM(3, 0)  # one word: a, <eos> (and <bos>, never produced)
    hyps = decoding.beam_search(model, torch.arange(2), beam_size=5, max_len=3, n_best=5,
                                early_stopping="never")
    for row in hyps:
        assert all(math.isfinite(h.logprob) for h in row)
        assert sorted(tuple(h.tokens) for h in row) == [(), (2,), (2, 2), (2, 2, 2)]
    exact = decoding.exact_search(model, torch.arange(2), max_len=3, beam_size=5)
    for r, e in enumerate(exact):
        best = max(brute_force_prefix(model, r, 3), key=lambda x: x[1])
        assert e.tokens == best[0]


def brute_force_prefix(model, row, max_len):
    """brute_force for a PrefixLM: every finished output of at most max_len steps."""
    words = [w for w in range(model.vocab) if w not in (0, 1)]
    out = []
    for n in range(max_len):
        for seq in itertools.product(words, repeat=n):
            lp = sum(model.dist(row, list(seq[:i]))[w].item()
                     for i, w in enumerate((*seq, 1)))
            out.append((list(seq), lp))
    return out


@pytest.mark.parametrize("eos_bias", [-3.0, 0.0, 5.0])
def test_exact_search_at_the_edges(eos_bias):
    """<eos> first (bias 5), rarely (bias -3), ties; max_len 1 leaves only the empty output."""
    for ties in (False, True):
        model = PrefixLM(5, 7, ties, eos_bias)
        found = decoding.exact_search(model, torch.arange(3), max_len=4)
        for r in range(3):
            best = max(brute_force_prefix(model, r, 4), key=lambda x: x[1])
            assert found[r].logprob == pytest.approx(best[1], abs=1e-9)
        assert [h.tokens for h in decoding.exact_search(model, torch.arange(3), max_len=1)] \
            == [[]] * 3


def test_contrastive_decoding_stops_at_max_len_and_eos():
    expert, amateur = PrefixLM(6, 1, eos_bias=1.0), PrefixLM(6, 2)
    rows = torch.arange(4)
    for max_len in (1, 3):
        out = decoding.contrastive_decoding(expert, amateur, rows, max_len=max_len)
        for r, hyps in enumerate(out):
            h = hyps[0]
            assert len(h.tokens) <= max_len and (h.finished or len(h.tokens) == max_len)
            # its score is the summed contrastive score of its steps, by hand
            total, prefix = 0.0, []
            for w in h.tokens + ([1] if h.finished else []):
                total += float(decoding.contrastive_scores(expert.dist(r, prefix)[None],
                                                           amateur.dist(r, prefix)[None])[0, w])
                prefix.append(w)
            assert h.logprob == pytest.approx(total, abs=1e-5)


class Finite(PrefixLM):
    """A PrefixLM that must end after 3 words: its outputs can all be listed, and sum to 1."""

    def dist(self, row, prefix):
        if len(prefix) < 3:
            return super().dist(row, prefix)
        return torch.tensor([-math.inf, 0.0] + [-math.inf] * (self.vocab - 2), dtype=torch.float64)


def f1(h, y):
    """A utility that rewards shared words and word pairs (pairs with the ends marked, so the
    order of words matters): the mean of the unigram and bigram F1."""
    def score(a, b):
        common = sum(min(a.count(g), b.count(g)) for g in set(a))
        return 2 * common / (len(a) + len(b)) if a or b else 1.0

    h2, y2 = [0, *h, 1], [0, *y, 1]
    return (score(list(h), list(y)) + score(list(zip(h2, h2[1:])), list(zip(y2, y2[1:])))) / 2


def test_mbr_against_brute_force_where_expected_utility_is_exact():
    """With every output and its probability as evidence, mbr's expectation is exact: equal to
    the sum by hand. Sampled MBR picks the same output once the samples are many."""
    agreed = 0
    for seed in range(6):
        model = Finite(5, seed)
        outputs = brute_force_prefix(model, 0, 4)
        probs = [math.exp(lp) for _, lp in outputs]
        assert sum(probs) == pytest.approx(1.0)
        seqs = [s for s, _ in outputs]
        best, expected = decoding.mbr(seqs, seqs, f1, weights=probs)
        by_hand = [sum(p * f1(h, y) for y, p in zip(seqs, probs)) for h in seqs]
        assert expected == pytest.approx(by_hand)
        assert best == max(range(len(seqs)), key=by_hand.__getitem__)
        ranked = sorted(by_hand, reverse=True)
        if ranked[0] - ranked[1] > 0.01:  # a clear winner: 3,000 samples find it
            chosen = decoding.mbr_decode(model, torch.tensor([0]), num_samples=3000, utility=f1,
                                         max_len=4, generator=torch.Generator().manual_seed(seed))
            assert chosen == [seqs[best]]
            agreed += 1
    assert agreed >= 3
    with pytest.raises(ValueError, match="weights"):
        decoding.mbr([[1]], [[1], [2]], f1, weights=[1.0])


def test_overlap_f1_by_hand_and_against_a_list_count():
    f = metrics.overlap_f1
    assert f([3, 4, 5], [3, 4, 5]) == 1.0 and f([], []) == 1.0
    assert f([3], [4]) == 0.0 and f([], [3]) == 0.0  # no bigram anywhere: unigrams alone
    # [a b a] vs [a a]: 2 clipped unigrams of 3 + 2 -> 0.8; bigrams ab, ba vs aa: 0 of 2 + 1
    assert f([3, 4, 3], [3, 3]) == pytest.approx(0.4)
    assert f([3, 4, 3], [3, 3], max_n=1) == pytest.approx(0.8)

    def by_list(h, y, n):  # shared n-grams found by crossing matches off a list
        grams = [tuple(y[i : i + n]) for i in range(len(y) - n + 1)]
        mine = [tuple(h[i : i + n]) for i in range(len(h) - n + 1)]
        shared = 0
        for g in mine:
            if g in grams:
                grams.remove(g)
                shared += 1
        return 2 * shared / (len(mine) + len(y) - n + 1)

    rng = torch.Generator().manual_seed(0)
    for _ in range(200):
        h, y = (torch.randint(2, 6, (int(torch.randint(2, 9, (1,), generator=rng)),),
                              generator=rng).tolist() for _ in range(2))
        assert f(h, y) == pytest.approx((by_list(h, y, 1) + by_list(h, y, 2)) / 2)
        assert f(h, y) == f(y, h)
    with pytest.raises(ValueError, match="max_n"):
        f([1], [1], max_n=0)
    with pytest.raises(TypeError, match="reference must be a list or tuple of tokens, got str"):
        f(["a"], "a b")  # a string would be read as characters


def test_top_k_stable_is_the_head_of_a_stable_sort():
    """Beam search takes its k best candidates without sorting whole rows; with many ties and
    -inf entries the result must still be what a stable descending sort puts first."""
    g = torch.Generator().manual_seed(0)
    for _ in range(500):
        rows, n = (int(torch.randint(1, m, (1,), generator=g)) for m in (5, 40))
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        values = torch.randint(-4, 2, (rows, n), generator=g).double()
        values[torch.rand(rows, n, generator=g) < 0.3] = float("-inf")
        expected_values, expected_index = values.sort(dim=-1, descending=True, stable=True)
        got_values, got_index = decoding._top_k_stable(values, k)
        assert torch.equal(got_values, expected_values[:, :k])
        assert torch.equal(got_index, expected_index[:, :k])
