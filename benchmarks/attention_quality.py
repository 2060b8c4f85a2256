"""Quality goals of lectures 03/04 on the toy translation task (printed, never asserted).

Goals: with attention, BLEU >= 90 on held-out pairs within 5 minutes of CPU training; without
attention, the longest length bucket at least 20 BLEU below the shortest; with attention, that
drop under 10. Both models train for the same wall-clock budget (or step count, if reached first).

    python benchmarks/attention_quality.py [--minutes 5] [--steps 3000] [--score additive]
"""

from __future__ import annotations

import argparse
import time

import torch

from seqlab import metrics, seed_everything, seq2seq
from seqlab.bleu import corpus_bleu
from seqlab.data import Vocab
from seqlab.data.toy import ToyTranslation
from seqlab.train import fit

BUCKETS = {"3-10": (3, 10), "11-20": (11, 20), "21-30": (21, 30), "31-45": (31, 45)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0, help="training budget per model")
    parser.add_argument("--steps", type=int, default=3000, help="at most this many steps")
    parser.add_argument("--score", default="additive")
    args = parser.parse_args()
    mt = ToyTranslation()
    train, test = mt.sample(20000, seed=10), mt.sample(2000, seed=12)
    src_vocab = Vocab.build([p.source.split() for p in train])
    tgt_vocab = Vocab.build([p.references[0].split() for p in train])
    ids = [(src_vocab.encode(p.source.split()), tgt_vocab.encode(p.references[0].split()))
           for p in train]
    for attention in (True, False):
        seed_everything(0)
        model = seq2seq.build_model(len(src_vocab), len(tgt_vocab), tgt_vocab.bos_id,
                                    tgt_vocab.eos_id, attention=attention, score=args.score)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        batches = seq2seq.curriculum_batches(ids, 32, args.steps, 12, 45, tgt_vocab.bos_id,
                                             tgt_vocab.eos_id)
        start, done = time.perf_counter(), 0
        while done < args.steps and time.perf_counter() - start < 60 * args.minutes:
            chunk = batches[done : done + 100]
            fit(model, optimizer, chunk, seq2seq.seq2seq_loss, clip=1.0, progress=False,
                device=torch.device("cpu"))
            done += len(chunk)
        seconds = time.perf_counter() - start
        outputs = seq2seq.translate(model, [p.source for p in test], src_vocab, tgt_vocab)
        refs = [p.references for p in test]
        overall = corpus_bleu(outputs, refs).score
        curve = metrics.bleu_by_length([p.source for p in test], outputs, refs, BUCKETS)
        drop = curve["3-10"] - curve["31-45"]
        name = f"with {args.score} attention" if attention else "without attention"
        print(f"{name}: {done} steps in {seconds:.0f} s, held-out BLEU {overall:.1f}, by length "
              f"{ {k: round(v, 1) for k, v in curve.items()} }, drop {drop:.1f}")


if __name__ == "__main__":
    main()
