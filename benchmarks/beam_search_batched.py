"""Batched beam search against the same ``decoding.beam_search`` run one sentence at a time
(printed, never asserted).

A toy translator (lecture 06's: GRU encoder-decoder with dot attention on one- and two-clause
``ToyTranslation`` pairs) is trained briefly with a fixed seed, then 256 held-out sentences are
decoded with beam size 5: once as one batch (every sentence and every beam in one tensor per
step), once as 256 calls with a batch of one. Prints the speed-up and how many outputs differ.
The speed-up is given in wall time and in CPU time of this process; on a shared machine the
second is the steadier one (with one thread on a CPU it is the work done).

The two runs do the same arithmetic on differently shaped tensors, so float32 rounding may
differ by about 1e-6 per step; an output that differs is reported with the gap between the two
runs' scores, so a tie broken by rounding can be told from a real discrepancy.

    python benchmarks/beam_search_batched.py [--sentences 256] [--beam 5] [--train-steps 200]
        [--threads N] [--repeats 3] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from seqlab import decoding, get_device, seed_everything, seq2seq
from seqlab.data import Vocab, pad_batch
from seqlab.data.toy import ToyTranslation
from seqlab.train import fit


def build(train_steps: int, device: torch.device):
    mt = ToyTranslation(max_clauses=2)
    train = mt.sample(20000, seed=10)
    src_vocab = Vocab.build([p.source.split() for p in train])
    tgt_vocab = Vocab.build([r.split() for p in train for r in p.references])
    pick = random.Random(0)
    ids = [(src_vocab.encode(p.source.split()), tgt_vocab.encode(pick.choice(p.references).split()))
           for p in train]
    seed_everything(0)
    model = seq2seq.build_model(len(src_vocab), len(tgt_vocab), tgt_vocab.bos_id,
                                tgt_vocab.eos_id, attention=True, score="dot", embed_dim=32,
                                hidden_dim=64).to(device)
    if train_steps:
        batches = seq2seq.curriculum_batches(ids, 32, train_steps, 8, 15, tgt_vocab.bos_id,
                                             tgt_vocab.eos_id)
        fit(model, torch.optim.Adam(model.parameters(), lr=1e-2), batches,
            seq2seq.seq2seq_loss, clip=1.0, device=device, progress=False)
    return mt, src_vocab, model.eval()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=30)
    parser.add_argument("--train-steps", type=int, default=200, help="0: untrained weights")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=3, help="timings per contender (median)")
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = get_device(args.device)
    mt, src_vocab, model = build(args.train_steps, device)
    sources = [src_vocab.encode(p.source.split()) for p in mt.sample(args.sentences, seed=12)]
    src, lengths = (t.to(device) for t in pad_batch(sources, src_vocab.pad_id))
    singles = [(torch.tensor([s], device=device), torch.tensor([len(s)], device=device))
               for s in sources]

    def batched():
        return decoding.beam_search(model, src, lengths, beam_size=args.beam,
                                    max_len=args.max_len)

    def one_at_a_time():
        return [decoding.beam_search(model, s, n, beam_size=args.beam, max_len=args.max_len)[0]
                for s, n in singles]

    times = {"batched": [], "one at a time": []}
    cpu = {"batched": [], "one at a time": []}  # CPU seconds: less disturbed by other users
    outputs = {}
    for r in range(args.repeats + 1):  # round 0 warms up; the order alternates per round
        order = [("batched", batched), ("one at a time", one_at_a_time)]
        for name, run in order if r % 2 else order[::-1]:
            sync(device)
            start, start_cpu = time.perf_counter(), time.process_time()
            outputs[name] = run()
            sync(device)
            if r:
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
    med = {name: statistics.median(t) for name, t in times.items()}
    med_cpu = {name: statistics.median(t) for name, t in cpu.items()}
    together, alone = outputs["batched"], outputs["one at a time"]
    differ = [i for i, (a, b) in enumerate(zip(together, alone)) if a[0].tokens != b[0].tokens]
    gaps = [abs(together[i][0].logprob - alone[i][0].logprob) for i in differ]
    lp_gap = max(abs(a[0].logprob - b[0].logprob) for a, b in zip(together, alone))
    print(f"{args.sentences} sentences, beam {args.beam}, max_len {args.max_len}, device {device}, "
          f"{torch.get_num_threads()} threads, model trained {args.train_steps} steps")
    for name, t in med.items():
        print(f"  {name:14s} {t:7.3f} s wall, {med_cpu[name]:7.3f} s CPU  "
              f"({args.sentences / t:7.1f} sentences/s; wall runs: "
              f"{', '.join(f'{x:.3f}' for x in times[name])})")
    print(f"speed-up of batching: {med['one at a time'] / med['batched']:.1f}x wall, "
          f"{med_cpu['one at a time'] / med_cpu['batched']:.1f}x CPU time")
    print(f"outputs that differ: {len(differ)} of {args.sentences}"
          + (f" (score gaps {', '.join(f'{g:.1e}' for g in gaps)})" if differ else ""))
    print(f"largest log-probability gap between the runs: {lp_gap:.1e}")


if __name__ == "__main__":
    main()
