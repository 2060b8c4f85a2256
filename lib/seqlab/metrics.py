"""Scores of generated text beside BLEU: BLEU by source length, degeneration statistics (how
repetitive, how varied) and the n-gram overlap MBR decoding uses as its utility.

They read token sequences only, never a model, so ``seqlab.decoding`` stays searches and
samplers, and the n-grams are BLEU's (``bleu.ngrams``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .bleu import corpus_bleu, ngrams
from .validate import integer


def overlap_f1(hypothesis: Sequence, reference: Sequence, max_n: int = 2) -> float:
    """A utility for MBR: the mean over n = 1..max_n of the F1 of the n-grams two outputs share,
    each counted at most as often as it occurs in both (clipped, as in BLEU). Orders that
    neither output is long enough for are left out, so equal outputs score 1 (two empty ones
    too) and outputs with no word in common 0. Unlike sentence BLEU it is symmetric and needs
    no smoothing for short outputs."""
    for name, tokens in (("hypothesis", hypothesis), ("reference", reference)):
        if isinstance(tokens, str) or not isinstance(tokens, Sequence):
            raise TypeError(f"{name} must be a list or tuple of tokens, got "
                            f"{type(tokens).__name__} (split a sentence into words first)")
    f1 = []
    for n in range(1, integer("max_n", max_n, 1) + 1):
        h, r = Counter(ngrams(hypothesis, n)), Counter(ngrams(reference, n))
        if h or r:
            f1.append(2 * sum((h & r).values()) / (h.total() + r.total()))
    return sum(f1) / len(f1) if f1 else 1.0


def repetition_rate(sequences: Sequence[Sequence], n: int = 2) -> float:
    """Mean over sequences of 1 - unique n-grams / n-grams (rep-n, Welleck et al. 2020):
    0 when no n-gram of a sequence repeats, near 1 for a loop. Sequences shorter than n skip."""
    rates = [1 - len(set(g)) / len(g) for s in sequences if (g := ngrams(s, integer("n", n, 1)))]
    if not rates:
        raise ValueError(f"no sequence has {n} tokens or more")
    return sum(rates) / len(rates)


def distinct_n(sequences: Sequence[Sequence], n: int = 2) -> float:
    """Distinct n-grams / all n-grams over all sequences together (Li et al. 2016)."""
    counts = Counter(g for s in sequences for g in ngrams(s, integer("n", n, 1)))
    if not counts:
        raise ValueError(f"no sequence has {n} tokens or more")
    return len(counts) / sum(counts.values())


def bleu_by_length(sources: list[str], outputs: list[str], references: list[list[str]],
                   buckets: dict[str, tuple[int, int]]) -> dict[str, float]:
    """Corpus BLEU of the sentences whose source length (in words) falls in each bucket."""
    scores = {}
    for label, (low, high) in buckets.items():
        idx = [i for i, s in enumerate(sources) if low <= len(s.split()) <= high]
        if idx:
            scores[label] = corpus_bleu([outputs[i] for i in idx],
                                        [references[i] for i in idx]).score
    return scores
