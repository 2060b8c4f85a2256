import math
from collections import Counter, defaultdict
from itertools import product

import pytest

from seqlab.data.toy import (
    ToyLanguage,
    ToyTranslation,
    addition_task,
    copy_task,
    reverse_task,
    sort_task,
)

LANG = ToyLanguage()


def test_sampling_is_deterministic_by_seed():
    assert LANG.sample(50, seed=3) == LANG.sample(50, seed=3)
    assert LANG.sample(50, seed=3) != LANG.sample(50, seed=4)


def test_every_sample_has_a_finite_logprob():
    for sentence in LANG.sample(2000, seed=0):
        assert math.isfinite(LANG.logprob(sentence)), sentence


@pytest.mark.parametrize(
    "sentence",
    [
        "",
        "the cat sleep",  # agreement broken
        "the cats sleeps",
        "the cat that the dogs see sleep",  # long-range agreement broken
        "the cat that the dogs sees sleeps",  # inner agreement broken
        "a cats sleep",  # determiner disagrees
        "the cat sleeps today today",
        "the cat sees the dog that the birds see",  # objects carry no clause
        "cat sleeps",
        "a old cat sleeps",  # "a" before a vowel is spelt "an"
        "an cat sleeps",
        "an cats sleep",
        "the cat that the dog that the bird that the boy sees chases sees runs",  # too deep
    ],
)
def test_impossible_strings_get_minus_infinity(sentence):
    assert LANG.logprob(sentence) == -math.inf


def test_an_before_a_vowel_is_the_same_choice_as_a():
    sentences = LANG.sample(3000, seed=0)
    assert any(" an old " in f" {s} " for s in sentences)
    assert not any(" a old " in f" {s} " or " an " + w in f" {s} " for s in sentences
                   for w in ("small", "happy", "big", "quiet", "cat"))
    assert LANG.logprob("an old cat sleeps") == pytest.approx(
        LANG.logprob("a small cat sleeps"), rel=1e-12)  # one surface rule, same probability
    sources = [p.source for p in ToyTranslation().sample(2000, seed=0)]
    assert any(" an old " in f" {s} " for s in sources)
    assert not any(" a old " in f" {s} " or " an " + w in f" {s} " for s in sources
                   for w in ("small", "big", "black", "house", "car"))
    old = next(p for p in ToyTranslation().sample(2000, seed=0) if p.source.startswith("an old "))
    assert old.references[0].split()[0] in ("un", "une")


def test_a_worked_example_by_hand():
    # number 1/2, det 1/3, no adj .7, noun 1/6, no clause .5, intransitive .5 * 1/4, no adverb .7
    p = 0.5 * (1 / 3) * 0.7 * (1 / 6) * 0.5 * 0.5 * 0.25 * 0.7
    assert LANG.logprob("the cat sleeps") == pytest.approx(math.log(p), rel=1e-12)


def test_three_word_sentences_exactly_by_enumeration_and_by_sampling():
    """Enumerate every 3-word string: the mass is the grammar's P(Det Noun Vi), and sampled
    frequencies of each sentence agree with exp(logprob) (chi-square test)."""
    vocab = LANG.vocab
    mass = {}
    for words in product(vocab, repeat=3):
        lp = LANG.logprob(" ".join(words))
        if lp > -math.inf:
            mass[" ".join(words)] = math.exp(lp)
    expected_total = 0.7 * 0.5 * 0.5 * 0.7  # no adj, no clause, intransitive, no adverb
    assert len(mass) == 2 * 3 * 6 * 4
    assert sum(mass.values()) == pytest.approx(expected_total, rel=1e-12)

    n = 60000
    counts = Counter(s for s in LANG.sample(n, seed=7) if len(s.split()) == 3)
    assert set(counts) <= set(mass)
    chi2 = sum((counts.get(s, 0) - n * p) ** 2 / (n * p) for s, p in mass.items())
    dof = len(mass) - 1
    assert chi2 < dof + 5 * math.sqrt(2 * dof), chi2  # about a 5-sigma bound
    assert sum(counts.values()) / n == pytest.approx(expected_total, abs=4 * math.sqrt(0.12 / n))


def test_exact_entropy_matches_monte_carlo():
    h, tokens = LANG.entropy()
    sample = LANG.sample(40000, seed=11)
    mc_h = -sum(LANG.logprob(s) for s in sample) / len(sample)
    mc_tokens = sum(len(s.split()) + 1 for s in sample) / len(sample)
    assert mc_h == pytest.approx(h, rel=0.01)
    assert mc_tokens == pytest.approx(tokens, rel=0.01)
    assert LANG.perplexity_floor() == pytest.approx(math.exp(h / tokens))
    assert 4 < LANG.perplexity_floor() < 8


def test_agreement_is_out_of_a_trigrams_reach():
    """In sentences with a relative clause, the two words before the main verb say nothing
    about its number, yet the subject noun decides it completely."""
    by_context, by_subject = defaultdict(Counter), defaultdict(Counter)
    plural_verbs = {"sleep", "run", "sing", "wait"}
    for s in LANG.sample(30000, seed=5):
        w = s.split()
        if "that" not in w or w[-1] not in {"sleeps", "runs", "sings", "waits", *plural_verbs}:
            continue
        if w.count("that") != 1:
            continue
        verb_plural = w[-1] in plural_verbs
        by_context[tuple(w[-3:-1])][verb_plural] += 1
        by_subject[w[w.index("that") - 1]][verb_plural] += 1
    # the subject determines the verb's number
    assert all(len(c) == 1 for c in by_subject.values())
    # the trigram context does not: overall about half the time either way
    mixed = sum(min(c.values()) if len(c) == 2 else 0 for c in by_context.values())
    total = sum(sum(c.values()) for c in by_context.values())
    assert total > 1000 and mixed / total > 0.35


def test_main_verb_position():
    assert LANG.main_verb("the cat that the dogs see sleeps quietly") == (6, "sg")
    assert LANG.main_verb("some cats like a dog") == (2, "pl")
    assert LANG.main_verb("the cat that the dogs see sleep") is None
    for s in LANG.sample(300, seed=9):
        i, number = LANG.main_verb(s)
        assert s.split()[i] in LANG.verbs(number)
    with pytest.raises(ValueError, match="number must be"):
        LANG.verbs("dual")


@pytest.mark.parametrize("bad", [-1, 1.5, "3"])
def test_bad_sample_sizes(bad):
    with pytest.raises((ValueError, TypeError), match="n must be"):
        LANG.sample(bad)
    with pytest.raises((ValueError, TypeError), match="n must be"):
        ToyTranslation().sample(bad)


def test_bad_grammar_parameters():
    with pytest.raises(ValueError, match="p_adj"):
        ToyLanguage(p_adj=1.5)
    with pytest.raises(TypeError, match="sentence"):
        LANG.logprob(["the", "cat"])


MT = ToyTranslation()
PAIRS = MT.sample(3000, seed=0)


def test_translation_is_deterministic_and_long_enough():
    assert MT.sample(20, seed=1) == MT.sample(20, seed=1)
    lengths = [len(p.source.split()) for p in PAIRS]
    assert min(lengths) == 3 and max(lengths) >= 40
    several = sum(len(p.references) >= 2 for p in PAIRS) / len(PAIRS)
    assert several > 0.5
    for p in PAIRS:
        assert len(set(p.references)) == len(p.references)
        assert all(len(r.split()) == len(p.source.split()) for r in p.references)


def test_alignment_is_a_permutation_that_moves_adjectives_after_nouns():
    adjectives = {"black", "green", "small", "big", "old", "pretty"}
    for p in PAIRS[:300]:
        src, tgt = p.source.split(), p.references[0].split()
        assert sorted(s for s, _ in p.alignment) == list(range(len(src)))
        assert sorted(t for _, t in p.alignment) == list(range(len(tgt)))
        for s, t in p.alignment:
            if src[s] in adjectives:
                assert t == s + 1  # the adjective follows its noun in the target
            elif s > 0 and src[s - 1] in adjectives:
                assert t == s - 1


def test_worked_translation_with_agreement_and_synonyms():
    pair = next(p for p in PAIRS if "big cars" in p.source)
    assert "voitures grandes" in pair.references[0]
    assert any("autos grosses" in r for r in pair.references)
    # agreement: feminine nouns take la/une, masculine le/un
    for p in PAIRS[:500]:
        words = p.references[0].split()
        for det, noun in zip(words, words[1:]):
            if det in ("la", "une"):
                assert noun in {"maison", "voiture", "auto", "fille", "fleur", "table"}
            if det in ("le", "un"):
                assert noun in {"chat", "chien", "garçon", "livre", "arbre"}


def test_source_nouns():
    nouns = MT.source_nouns()
    assert {"cat", "cats", "house", "houses"} <= nouns and "big" not in nouns


def test_algorithmic_tasks():
    for src, tgt in copy_task(20, seed=1):
        assert src == tgt
    for src, tgt in reverse_task(20, seed=1):
        assert tgt.split() == src.split()[::-1]
    for src, tgt in sort_task(20, seed=1, min_len=3, max_len=5):
        assert tgt.split() == sorted(src.split()) and 3 <= len(src.split()) <= 5
    for src, tgt in addition_task(50, seed=2):
        a, plus, b = src.split()
        assert plus == "+" and int(tgt) == int(a) + int(b)
    assert addition_task(5, seed=9) == addition_task(5, seed=9)
    with pytest.raises(ValueError, match="min_len"):
        copy_task(3, min_len=5, max_len=2)
