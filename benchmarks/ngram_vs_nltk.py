"""n-gram LMs: seqlab.lm against nltk.lm on the same text (printed ratios, never asserted).

Uses the toy language by default, or a real corpus with --corpus FILE (e.g. WikiText-2 valid).
Probabilities are compared where the two libraries' conventions match (MLE); Kneser-Ney
conventions differ (nltk: discount 0.1, no uniform floor), so only speed is compared there.

    python benchmarks/ngram_vs_nltk.py [--corpus PATH] [--sentences N] [--score N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from nltk.lm import MLE, KneserNeyInterpolated
from nltk.lm.preprocessing import pad_both_ends, padded_everygram_pipeline
from nltk.util import ngrams

from seqlab.data import load_corpus
from seqlab.lm import BOS, EOS, NGramLM


def nltk_events(sentences, n):
    """The events seqlab scores: n-1 <bos> on the left, one <eos> at the end."""
    return [list(ngrams(list(pad_both_ends(s, n, left_pad_symbol=BOS,
                                           right_pad_symbol=EOS))[: len(s) + n], n))
            for s in sentences]


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, help="a text file, one sentence per line")
    parser.add_argument("--sentences", type=int, default=20000, help="training sentences")
    parser.add_argument("--score", type=int, default=300, help="test sentences scored")
    args = parser.parse_args()
    if args.corpus:
        lines = [line.split() for line in args.corpus.read_text().splitlines() if line.strip()]
        train, test = lines[: args.sentences], lines[-args.score :]
    else:
        train = [s.split() for s in load_corpus("toy-lm")[: args.sentences]]
        test = [s.split() for s in load_corpus("toy-lm", "test")[: args.score]]
    n = 3
    vocab_text = [w for s in train for w in s] + ["<bos>", "<eos>"]
    known = set(vocab_text)  # out-of-vocabulary conventions differ: compare known words only
    events = [e for s in test for e in nltk_events([s], n)[0] if known.issuperset(e)]
    print(f"{len(train)} training sentences, {len(events)} scored trigrams")

    # MLE: same conventions, so the probabilities must agree
    ours, t_fit = timed(lambda: NGramLM(n, "mle").fit(train))
    ref = MLE(n)
    _, t_fit_ref = timed(lambda: ref.fit(nltk_events(train, n), vocabulary_text=vocab_text))
    p_ours, t_ours = timed(lambda: [ours.prob(e[-1], e[:-1]) for e in events])
    p_ref, t_ref = timed(lambda: [ref.score(e[-1], list(e[:-1])) for e in events])
    worst = max(abs(a - b) for a, b in zip(p_ours, p_ref))
    print(f"MLE   fit: ours {t_fit:.2f} s, nltk {t_fit_ref:.2f} s ({t_fit_ref / t_fit:.1f}x); "
          f"scoring: ours {t_ours:.3f} s, nltk {t_ref:.3f} s ({t_ref / t_ours:.0f}x); "
          f"max |dp| = {worst:.1e}")

    # Kneser-Ney: speed only (different discount and floor conventions)
    kn, t_fit = timed(lambda: NGramLM(n, "kneser-ney").fit(train))
    ref = KneserNeyInterpolated(n, discount=0.75)  # needs every order: nltk's own pipeline
    _, t_fit_ref = timed(lambda: ref.fit(*padded_everygram_pipeline(n, train)))
    _, t_ours = timed(lambda: [kn.prob(e[-1], e[:-1]) for e in events])
    _, t_ref = timed(lambda: [ref.score(e[-1], list(e[:-1])) for e in events])
    print(f"KN    fit: ours {t_fit:.2f} s, nltk {t_fit_ref:.2f} s ({t_fit_ref / t_fit:.1f}x); "
          f"scoring: ours {t_ours:.3f} s, nltk {t_ref:.3f} s -> {t_ref / t_ours:.0f}x "
          "(goal: >= 100x)")


if __name__ == "__main__":
    main()
