"""seqlab.bleu against sacrebleu 2.6: identical numbers on random corpora and edge cases."""

import random

import pytest
import sacrebleu

from seqlab.bleu import (
    BLEUScore,
    bleu_tokens,
    brevity_penalty,
    closest_ref_length,
    corpus_bleu,
    from_streams,
    modified_precision,
    ngrams,
    sentence_bleu,
    to_streams,
    tokenize_13a,
)

WORDS = ["the", "The", "cat", "sat", "on", "mat", "a", "dog", ".", ",", "!", "?", "3.5",
         "1,000", "10-20", "x-ray", "&amp;", "&quot;hi&quot;", "&lt;b&gt;", "(", ")", "it's",
         "U.S.", "don't", "--", "e.g.", "$5", "100%", "é", "naïve"]


def random_sentence(rng, max_len=12):
    words = rng.choices(WORDS, k=rng.randint(0, max_len))
    text = " ".join(words)
    if rng.random() < 0.3:  # glue punctuation to words, as real text has it
        text = text.replace(" .", ".").replace(" ,", ",")
    return text


def random_corpus(seed, n=40):
    rng = random.Random(seed)
    hyps = [random_sentence(rng) for _ in range(n)]
    refs = [[random_sentence(rng) for _ in range(rng.randint(1, 4))] for _ in range(n)]
    for i in range(n):  # make matches likely: references share words with the hypothesis
        if rng.random() < 0.6 and hyps[i]:
            refs[i][0] = hyps[i] if rng.random() < 0.3 else hyps[i] + " " + refs[i][0]
    return hyps, refs


def assert_same(ours: BLEUScore, theirs, what=""):
    assert ours.score == pytest.approx(theirs.score, abs=1e-9), what
    assert ours.bp == pytest.approx(theirs.bp, abs=1e-9), what
    assert ours.sys_len == theirs.sys_len and ours.ref_len == theirs.ref_len, what
    assert ours.precisions == pytest.approx(theirs.precisions, abs=1e-9), what
    assert list(ours.counts) == pytest.approx(list(theirs.counts)), what
    assert list(ours.totals) == pytest.approx(list(theirs.totals)), what


OPTIONS = [
    {},
    {"smooth": "none"},
    {"smooth": "floor"},
    {"smooth": "floor", "smooth_value": 0.5},
    {"smooth": "add-k"},
    {"smooth": "add-k", "smooth_value": 2},
    {"tokenize": "none"},
    {"lowercase": True},
    {"use_effective_order": True},
]


def sacre_kwargs(options):
    out = {"smooth_method": options.get("smooth", "exp"),
           "smooth_value": options.get("smooth_value"),
           "tokenize": options.get("tokenize", "13a"),
           "lowercase": options.get("lowercase", False)}
    if "use_effective_order" in options:
        out["use_effective_order"] = options["use_effective_order"]
    return out


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in
                                                                  o.items()) or "defaults")
def test_corpus_bleu_equals_sacrebleu_on_random_corpora(options):
    for seed in range(25):
        hyps, refs = random_corpus(seed)
        ours = corpus_bleu(hyps, refs, **options)
        theirs = sacrebleu.corpus_bleu(hyps, to_streams(refs), **sacre_kwargs(options))
        assert_same(ours, theirs, f"seed {seed}")


def test_sentence_bleu_equals_sacrebleu():
    for seed in range(40):
        hyps, refs = random_corpus(100 + seed, n=1)
        for smooth in ("exp", "floor", "add-k", "none"):
            ours = sentence_bleu(hyps[0], refs[0], smooth=smooth)
            theirs = sacrebleu.sentence_bleu(hyps[0], refs[0], smooth_method=smooth)
            assert_same(ours, theirs, f"seed {seed} {smooth}")


EDGE_CASES = {
    "worked example": (["the cat the cat on the mat"],
                       [["the cat is on the mat", "there is a cat on the mat"]]),
    "empty hypothesis": ([""], [["the cat sat"]]),
    "all empty": (["", ""], [["a b"], ["c"]]),
    "short hypotheses": (["the cat", "a"], [["the cat sat"], ["a dog"]]),
    "zero matches": (["x y z w"], [["a b c d"]]),
    "tied closest lengths": (["a b c d e"], [["a b c d", "a b c d e f"], ]),
    "tied, shorter first": (["a b c"], [["a b c d", "a b"]]),
    "punctuation": (["Hello, world! It's 3.5 (or 1,000)."], [["Hello , world ! It's 3.5"]]),
    "numbers and dashes": (["pages 10-20, 1.5-2"], [["pages 10 - 20 , 1.5 - 2"]]),
    "html entities": (["&quot;yes&quot; &amp; no"], [['"yes" & no']]),
    "case": (["The Cat"], [["the cat"]]),
    "longer than every reference": (["a b c d e f g"], [["a b c", "a b"]]),
    "different numbers of references": (["a b c d", "e f g h"],
                                        [["a b c d"], ["e f", "e f g", "e f g h i"]]),
}


@pytest.mark.parametrize("case", EDGE_CASES)
@pytest.mark.parametrize("options", OPTIONS[:6] + [{"lowercase": True},
                                                   {"use_effective_order": True}])
def test_edge_cases_equal_sacrebleu(case, options):
    hyps, refs = EDGE_CASES[case]
    assert_same(corpus_bleu(hyps, refs, **options),
                sacrebleu.corpus_bleu(hyps, to_streams(refs), **sacre_kwargs(options)), case)


def test_the_lecture_example():
    hyp = "the cat the cat on the mat".split()
    refs = [r.split() for r in ["the cat is on the mat", "there is a cat on the mat"]]
    assert modified_precision(hyp, refs, 2) == (4, 6)  # unclipped it would be 5/6
    assert modified_precision(hyp, refs, 1) == (5, 7)
    score = corpus_bleu([" ".join(hyp)], [[" ".join(r) for r in refs]])
    assert score.score == pytest.approx(46.7138, abs=1e-4)
    assert score.counts == [5, 4, 2, 1] and score.totals == [7, 6, 5, 4]


def test_tokenizer_equals_sacrebleu():
    tokenizer = sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a()
    rng = random.Random(0)
    lines = ["the cat.", "Hello,world", "3.5 1,000 10-20 a-b", "&quot;a&quot; &amp;&lt;&gt;",
             "<skipped> x", "end-\nline", "tab\there", "U.S.A.", "(a)[b]{c}", "x--y", "100%$"]
    lines += [random_sentence(rng, 20) for _ in range(200)]
    for line in lines:
        assert tokenize_13a(line) == tokenizer(line), line
    assert bleu_tokens("The cat.", lowercase=True) == ["the", "cat", "."]
    assert bleu_tokens("the cat.", "none") == ["the", "cat."]


def test_helpers():
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert ngrams(["a"], 2) == []
    assert closest_ref_length(5, [4, 6]) == 4 and closest_ref_length(5, [7, 5]) == 5
    assert brevity_penalty(7, 7) == 1.0 and brevity_penalty(0, 3) == 0.0
    assert brevity_penalty(3, 6) == pytest.approx(2.718281828459045 ** (1 - 2))
    refs = [["a"], ["b", "c"], ["d", "e", "f"]]
    assert to_streams(refs) == [["a", "b", "d"], [None, "c", "e"], [None, None, "f"]]
    assert from_streams(to_streams(refs)) == refs


def test_bad_input():
    with pytest.raises(TypeError, match="hypotheses must be a list"):
        corpus_bleu("the cat", [["the cat"]])
    with pytest.raises(TypeError, match="wrap it"):
        corpus_bleu(["the cat"], ["the cat"])
    with pytest.raises(ValueError, match="2 hypotheses but 1 reference"):
        corpus_bleu(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="hypothesis 0 has no reference"):
        corpus_bleu(["a"], [[]])
    with pytest.raises(ValueError, match="smooth must be one of"):
        corpus_bleu(["a"], [["a"]], smooth="laplace")
    with pytest.raises(ValueError, match="tokenize must be one of"):
        corpus_bleu(["a"], [["a"]], tokenize="intl")
    with pytest.raises(ValueError, match="n must be"):
        ngrams(["a"], 0)
    with pytest.raises(ValueError, match="ref_lengths is empty"):
        closest_ref_length(3, [])
