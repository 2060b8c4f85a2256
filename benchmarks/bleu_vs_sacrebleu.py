"""Corpus BLEU on 10,000 sentence pairs: seqlab.bleu against sacrebleu in the same process.

Prints both scores (they must be identical) and the speed ratio (goal: at least 1.5x).
Each run tokenizes afresh: the 13a tokenizer's cache is cleared between repetitions, and
sacrebleu's is bypassed by building a new BLEU object each time.

    python benchmarks/bleu_vs_sacrebleu.py [--pairs N] [--repeats R]
"""

from __future__ import annotations

import argparse
import time

import sacrebleu

from seqlab.bleu import corpus_bleu, to_streams, tokenize_13a
from seqlab.data.toy import ToyTranslation


def best_of(repeats, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pairs = ToyTranslation().sample(args.pairs, seed=0)
    # system output: the canonical reference with every 7th word dropped, punctuation added
    hyps = [" ".join(w for i, w in enumerate(p.references[0].split()) if i % 7 != 3) + "."
            for p in pairs]
    refs = [[r + "." for r in p.references] for p in pairs]
    streams = to_streams(refs)

    def ours():
        tokenize_13a.cache_clear()
        return corpus_bleu(hyps, refs)

    def theirs():
        return sacrebleu.BLEU().corpus_score(hyps, streams)

    a, t_ours = best_of(args.repeats, ours)
    b, t_theirs = best_of(args.repeats, theirs)
    assert abs(a.score - b.score) < 1e-9 and a.counts == b.counts and a.totals == b.totals
    n_refs = sum(map(len, refs))
    print(f"{args.pairs} hypotheses, {n_refs} references: BLEU ours {a.score:.6f}, "
          f"sacrebleu {b.score:.6f} (identical)")
    print(f"time: ours {t_ours:.3f} s, sacrebleu {t_theirs:.3f} s -> "
          f"{t_theirs / t_ours:.2f}x sacrebleu's speed (goal: >= 1.5x)")


if __name__ == "__main__":
    main()
