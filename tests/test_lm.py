import math
import random
from collections import Counter

import numpy as np
import pytest
import torch

from seqlab import seed_everything
from seqlab.lm import (
    BOS,
    EOS,
    SMOOTHINGS,
    FeedForwardLM,
    NGramLM,
    feedforward_logprobs,
    feedforward_loss,
    ngram_windows,
    perplexity,
)
from seqlab.train import fit

CORPUS = [s.split() for s in ["the cat sat", "the dog sat", "a cat ran", "the cat ran down"]]


def random_corpus(seed, n_sent=30, vocab=8):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    return [rng.choices(words, k=rng.randint(0, 6)) for _ in range(n_sent)]


# ------------------------------------------------------------------ perplexity
def test_perplexity_three_ways_agree():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.01, 1.0, size=50)
    ln = perplexity(np.log(p))
    log2 = 2 ** (-np.mean(np.log2(p)))
    root = np.prod(1 / p) ** (1 / len(p))
    assert ln == pytest.approx(log2, rel=1e-12) and ln == pytest.approx(root, rel=1e-9)


def test_branching_factor_examples():
    # ten equally likely digits -> 10
    assert perplexity([math.log(0.1)] * 1000) == pytest.approx(10.0)
    # operator, sales, support 1/4 each; 30,000 names share the last 1/4 (a test set with those
    # frequencies): perplexity = 4**(3/4) * 120000**(1/4), about 53
    test_set = [math.log(1 / 4)] * 3 * 30000 + [math.log(1 / 120000)] * 30000
    assert perplexity(test_set) == pytest.approx(4**0.75 * 120000**0.25, rel=1e-9)
    assert round(perplexity(test_set)) == 53


def test_perplexity_edge_cases():
    assert perplexity([math.log(0.25)] * 4) == pytest.approx(4.0)
    assert perplexity(torch.log(torch.tensor([0.5, 0.5]))) == pytest.approx(2.0)
    assert perplexity([0.0, -math.inf]) == math.inf
    with pytest.raises(ValueError, match="empty"):
        perplexity([])
    with pytest.raises(ValueError, match="<= 0"):
        perplexity([0.1, -1.0])
    with pytest.raises(ValueError, match="NaN"):
        perplexity([float("nan")])
    with pytest.raises(TypeError, match="sequence of numbers"):
        perplexity(["a"])


# ------------------------------------------------------------------ n-gram models
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_history_gives_a_distribution(smoothing, n):
    for seed in range(3):
        lm = NGramLM(n, smoothing, k=0.5).fit(random_corpus(seed))
        histories = [(), ("w1",), ("w2", "w3"), ("<bos>", "w0"), ("never", "seen"), ("w9", "w1")]
        for h in histories:
            probs = np.array([lm.prob(w, h) for w in lm.vocab])
            np.testing.assert_allclose(lm.distribution(h), probs, rtol=1e-12, atol=1e-15)
            seen = lm._history(h) in lm._tables[n]
            if smoothing == "mle" and not seen:
                assert probs.sum() == 0.0
            else:
                assert probs.sum() == pytest.approx(1.0, abs=1e-12)
            if smoothing != "mle":
                assert (probs > 0).all()


def test_vocab_padding_and_unknown_words():
    lm = NGramLM(2, "mle").fit(CORPUS)
    assert set(lm.vocab) == {"the", "cat", "sat", "dog", "a", "ran", "down", "<unk>", "<eos>"}
    assert "<bos>" not in lm.vocab
    assert lm.prob("the", ()) == pytest.approx(3 / 4)  # history <bos>: 3 of 4 sentences
    assert lm.prob("<eos>", ("sat",)) == 1.0
    assert lm.prob("zebra", ("the",)) == lm.prob("<unk>", ("the",)) == 0.0
    assert lm.sentence_logprob(["the", "cat", "sat"]) == pytest.approx(
        math.log(3 / 4 * 2 / 3 * 1 / 3 * 1.0)
    )
    assert len(lm.token_logprobs([])) == 1  # the empty sentence still predicts <eos>
    assert lm.prob("<eos>", ()) == 0.0


def test_mle_equals_count_ratios_and_nltk():
    from nltk.lm import MLE
    from nltk.lm.preprocessing import pad_both_ends
    from nltk.util import ngrams

    corpus = random_corpus(5, n_sent=40)
    for n in (2, 3):
        ours = NGramLM(n, "mle").fit(corpus)
        # nltk pads both ends with n-1 markers; only the first <eos> is a predicted event here
        train = [list(ngrams(list(pad_both_ends(s, n, left_pad_symbol=BOS,
                                                right_pad_symbol=EOS))[: len(s) + n], n))
                 for s in corpus]
        ref = MLE(n)
        ref.fit(train, vocabulary_text=[w for s in corpus for w in s] + ["<bos>", "<eos>"])
        for history in [("w1",) * (n - 1), ("<bos>",) * (n - 1), ("w3", "w4")[: n - 1]]:
            for w in ours.vocab[:-2] + ["<eos>"]:
                assert ours.prob(w, history) == pytest.approx(ref.score(w, list(history)),
                                                              abs=1e-12)


def test_add_k_formula_and_k_zero_is_mle():
    lm = NGramLM(2, "add-k", k=0.5).fit(CORPUS)
    v = len(lm.vocab)
    assert lm.prob("cat", ("the",)) == pytest.approx((2 + 0.5) / (3 + 0.5 * v))
    assert lm.prob("dog", ("ran",)) == pytest.approx(0.5 / (2 + 0.5 * v))  # "ran" seen twice
    assert lm.prob("cat", ("zebra",)) == pytest.approx(1 / v)  # unseen history: uniform
    zero, mle = NGramLM(2, "add-k", k=0).fit(CORPUS), NGramLM(2, "mle").fit(CORPUS)
    for w in mle.vocab:
        assert zero.prob(w, ("the",)) == mle.prob(w, ("the",))


def test_kneser_ney_worked_example():
    """Bigram KN by hand: P(w|h) = max(c(h,w)-d,0)/c(h) + d*N1+(h .)/c(h) * P_cont(w), and
    P_cont(w) = max(N1+(. w)-d,0)/N1+(. .) + d*T/N1+(. .) * 1/|V|."""
    d = 0.75
    lm = NGramLM(2, "kneser-ney", discount=d).fit(CORPUS)
    v = len(lm.vocab)
    bigram_types = {(a, b) for s in CORPUS for a, b in zip(["<bos>", *s], [*s, "<eos>"])}
    n_types = len(bigram_types)
    cont = {w: sum(1 for _, b in bigram_types if b == w) for w in lm.vocab}
    t = sum(1 for c in cont.values() if c > 0)

    def p_cont(w):
        return max(cont[w] - d, 0) / n_types + d * t / n_types / v

    # history "the": seen 3 times, followed by cat (2) and dog (1)
    expected = (2 - d) / 3 + d * 2 / 3 * p_cont("cat")
    assert lm.prob("cat", ("the",)) == pytest.approx(expected, rel=1e-12)
    assert lm.prob("ran", ("the",)) == pytest.approx(d * 2 / 3 * p_cont("ran"), rel=1e-12)
    # continuation: "sat" follows two different words, "down" one
    assert cont["sat"] == 2 and cont["down"] == 1


def test_kneser_ney_uses_continuation_counts():
    """'francisco' is frequent but only ever follows 'san': in a new history KN prefers a word
    seen after many different words, while interpolated unigram counts prefer 'francisco'."""
    corpus = [["san", "francisco"]] * 20 + [[w, "glasses"] for w in "a b c d e f".split()]
    kn = NGramLM(2, "kneser-ney").fit(corpus)
    jm = NGramLM(2, "interpolated").fit(corpus)
    assert kn.prob("glasses", ("zebra",)) > kn.prob("francisco", ("zebra",))
    assert jm.prob("glasses", ("zebra",)) < jm.prob("francisco", ("zebra",))


def test_estimated_discounts():
    corpus = random_corpus(2, n_sent=60)
    lm = NGramLM(3, "kneser-ney", discount="auto").fit(corpus)
    trigrams = Counter(
        tuple(p[i : i + 3]) for s in corpus for p in [["<bos>", "<bos>", *s, "<eos>"]]
        for i in range(len(p) - 2)
    )
    n1 = sum(c == 1 for c in trigrams.values())
    n2 = sum(c == 2 for c in trigrams.values())
    assert lm._discounts[3] == pytest.approx((n1 / (n1 + 2 * n2),) * 3)
    for h in [(), ("w1", "w2"), ("never", "seen")]:
        assert sum(lm.prob(w, h) for w in lm.vocab) == pytest.approx(1.0, abs=1e-12)


def test_modified_kneser_ney_discounts_and_normalisation():
    """Chen & Goodman: Y = n1/(n1 + 2 n2), d_k = k - (k+1) Y n_{k+1}/n_k for k = 1, 2, 3+."""
    corpus = random_corpus(3, n_sent=200)
    lm = NGramLM(3, "kneser-ney", discount="modified").fit(corpus)
    trigrams = Counter(
        tuple(p[i : i + 3]) for s in corpus for p in [["<bos>", "<bos>", *s, "<eos>"]]
        for i in range(len(p) - 2)
    )
    n = [sum(c == k for c in trigrams.values()) for k in range(5)]
    y = n[1] / (n[1] + 2 * n[2])
    assert lm._discounts[3] == pytest.approx(
        (1 - 2 * y * n[2] / n[1], 2 - 3 * y * n[3] / n[2], 3 - 4 * y * n[4] / n[3]))
    assert lm._discounts[3][0] < lm._discounts[3][1] < lm._discounts[3][2]
    for h in [(), ("w1", "w2"), ("w3",), ("never", "seen")]:
        assert sum(lm.prob(w, h) for w in lm.vocab) == pytest.approx(1.0, abs=1e-12)
        assert lm.distribution(h) == pytest.approx([lm.prob(w, h) for w in lm.vocab], rel=1e-12)
    with pytest.raises(ValueError, match="'modified'"):
        NGramLM(2, "kneser-ney", discount="modifed")


def test_interpolation_weights():
    lm = NGramLM(2, "interpolated", lambdas=(0.6, 0.9)).fit(CORPUS)
    v = len(lm.vocab)
    unigram = 0.9 * 3 / 17 + 0.1 / v  # "cat": 3 of 17 predicted tokens
    assert lm.prob("cat", ("the",)) == pytest.approx(0.6 * 2 / 3 + 0.4 * unigram)
    assert lm.prob("cat", ("zebra",)) == pytest.approx(unigram)  # unseen history: lower order


def test_more_context_lowers_perplexity_on_the_toy_language():
    from seqlab.data import load_corpus

    train = [s.split() for s in load_corpus("toy-lm")[:8000]]
    test = [s.split() for s in load_corpus("toy-lm", "test")[:1000]]
    ppl = [NGramLM(n, "kneser-ney").fit(train).perplexity(test) for n in (1, 2, 3)]
    assert ppl[0] > ppl[1] > ppl[2]


def test_generate_is_seeded_and_stops():
    lm = NGramLM(2, "kneser-ney").fit(CORPUS)
    assert lm.generate(seed=3) == lm.generate(seed=3)
    assert all(w in lm.vocab and w != "<eos>" for w in lm.generate(seed=3, max_len=5))
    assert len(lm.generate(seed=1, max_len=4)) <= 4
    assert NGramLM(2, "mle").fit(CORPUS).generate(context=["zebra"]) == []


def test_bad_input():
    with pytest.raises(ValueError, match="n must be"):
        NGramLM(0)
    with pytest.raises(ValueError, match="smoothing must be one of"):
        NGramLM(2, "laplace")
    with pytest.raises(ValueError, match="k must be"):
        NGramLM(2, "add-k", k=-1)
    with pytest.raises(ValueError, match="discount"):
        NGramLM(2, "kneser-ney", discount=1.5)
    with pytest.raises(ValueError, match="lambdas"):
        NGramLM(2, "interpolated", lambdas=(0.5,))
    with pytest.raises(RuntimeError, match="call fit"):
        NGramLM(2).prob("a", ())
    with pytest.raises(TypeError, match="list of token lists"):
        NGramLM(2).fit("the cat sat")
    with pytest.raises(TypeError, match="each sentence must be a list"):
        NGramLM(2).fit(["the cat sat"])
    lm = NGramLM(2).fit(CORPUS)
    with pytest.raises(ValueError, match="never predicted"):
        lm.prob("<bos>", ())
    with pytest.raises(TypeError, match="context must be a tuple"):
        lm.prob("cat", "the")


# ------------------------------------------------------------------ feed-forward LM
def test_windows_match_the_ngram_events():
    contexts, targets = ngram_windows([[5, 6], []], context_size=2, bos_id=1, eos_id=2)
    assert contexts.tolist() == [[1, 1], [1, 5], [5, 6], [1, 1]]
    assert targets.tolist() == [5, 6, 2, 2]


def test_feedforward_lm_shapes_and_errors():
    model = FeedForwardLM(vocab_size=11, context_size=3, direct=True)
    assert model(torch.zeros(4, 3, dtype=torch.long)).shape == (4, 11)
    with pytest.raises(ValueError, match=r"shape \[batch, 3\]"):
        model(torch.zeros(4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="vocab_size"):
        FeedForwardLM(0, 2)


def test_feedforward_lm_learns_the_toy_language():
    from seqlab.data import Vocab, load_corpus

    seed_everything(0)
    train = [s.split() for s in load_corpus("toy-lm")[:3000]]
    test = [s.split() for s in load_corpus("toy-lm", "test")[:500]]
    vocab = Vocab.build(train)
    ids = [vocab.encode(s) for s in train]
    contexts, targets = ngram_windows(ids, 2, vocab.bos_id, vocab.eos_id)
    batches = [(contexts[i : i + 256], targets[i : i + 256]) for i in range(0, len(targets), 256)]
    model = FeedForwardLM(len(vocab), 2, embed_dim=16, hidden_dim=64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    fit(model, opt, batches, feedforward_loss, epochs=3, device=torch.device("cpu"),
        progress=False)
    tc, tt = ngram_windows([vocab.encode(s) for s in test], 2, vocab.bos_id, vocab.eos_id)
    lps = feedforward_logprobs(model, tc, tt)
    manual = model(tc).log_softmax(-1)[torch.arange(len(tt)), tt]
    torch.testing.assert_close(lps, manual.detach())
    unigram = NGramLM(1, "add-k").fit(train).perplexity(test)
    assert perplexity(lps) < 0.6 * unigram
    sample = model.sample(seed=4)
    assert sample == model.sample(seed=4) and len(sample) <= 30
    assert vocab.eos_id not in sample
