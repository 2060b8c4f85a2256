"""Experiments the lectures run and their robustness scripts repeat, each with the thresholds
its lecture asserts, defined once here for both.

An experiment builds data, trains models and scores them: it uses the model modules, never the
other way round (``seq2seq`` knows nothing of BLEU, seeds or training loops).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .data import Vocab
from .data.toy import ToyTranslation
from .metrics import bleu_by_length
from .results import Check
from .seeding import seed_everything
from .seq2seq import Seq2Seq, build_model, curriculum_batches, seq2seq_loss, translate
from .train import History, fit, lr_schedule
from .validate import integer

# ---------------------------------------------------------------------- lecture 04
LENGTH_BUCKETS = {"3-10": (3, 10), "11-20": (11, 20), "21-30": (21, 30), "31-45": (31, 45)}

# FAST mode fits in the 90 s of a CI run on 2 CPU cores; full mode is for a GPU.
LENGTH_SETUPS = {
    "fast": {"embed_dim": 32, "hidden_dim": 64, "steps": 1000, "n_test": 600},
    "full": {"embed_dim": 64, "hidden_dim": 128, "steps": 3000, "n_test": 2000},
}


@dataclass
class LengthExperiment:
    """What ``length_experiment`` returns; every dict is keyed by "with attention?" (a bool)."""

    curves: dict[bool, dict[str, float]] = field(default_factory=dict)  # BLEU per length bucket
    models: dict[bool, Seq2Seq] = field(default_factory=dict)
    histories: dict[bool, History] = field(default_factory=dict)
    test_pairs: list = field(default_factory=list)
    src_vocab: Vocab | None = None
    tgt_vocab: Vocab | None = None

    @property
    def drops(self) -> dict[bool, float]:
        """BLEU of the shortest length bucket minus BLEU of the longest."""
        return {a: c[next(iter(c))] - c[next(reversed(c))] for a, c in self.curves.items()}


def length_experiment(steps: int, embed_dim: int, hidden_dim: int, n_test: int, *,
                      seed: int = 0, score: str = "additive", lr: float = 1e-2,
                      batch_size: int = 32, buckets=LENGTH_BUCKETS, device=None,
                      progress: bool = True) -> LengthExperiment:
    """Bahdanau et al. (2015), Fig. 2, on the toy task: BLEU by source length, with and without
    attention.

    Both models are the same GRU encoder-decoder but for attention, start from the same seed and
    train on the same batches (same-length sentences, the maximum length rising from 12 to 45
    over the first 30% of steps) for the same ``steps``: Adam with gradient clipping, the
    learning rate decaying from ``lr`` to 0 along a cosine. Then both translate ``n_test``
    held-out pairs greedily, scored by corpus BLEU per source-length bucket.
    """
    integer("steps", steps, 1)
    toy = ToyTranslation()
    train_pairs, test_pairs = toy.sample(20000, seed=10), toy.sample(n_test, seed=12)
    src_vocab = Vocab.build([p.source.split() for p in train_pairs])
    tgt_vocab = Vocab.build([p.references[0].split() for p in train_pairs])
    train_ids = [(src_vocab.encode(p.source.split()), tgt_vocab.encode(p.references[0].split()))
                 for p in train_pairs]
    batches = curriculum_batches(train_ids, batch_size, steps, 12, 45, tgt_vocab.bos_id,
                                 tgt_vocab.eos_id, warmup=0.3, seed=seed)
    sources, references = [p.source for p in test_pairs], [p.references for p in test_pairs]
    result = LengthExperiment(test_pairs=test_pairs, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    for attention in (True, False):
        seed_everything(seed)
        model = build_model(len(src_vocab), len(tgt_vocab), tgt_vocab.bos_id, tgt_vocab.eos_id,
                            attention, score, embed_dim=embed_dim, hidden_dim=hidden_dim)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        schedule = lr_schedule(optimizer, kind="cosine", total_steps=steps)
        result.histories[attention] = fit(model, optimizer, batches, seq2seq_loss, clip=1.0,
                                          scheduler=schedule, device=device, progress=progress)
        outputs = translate(model, sources, src_vocab, tgt_vocab)
        result.curves[attention] = bleu_by_length(sources, outputs, references, buckets)
        result.models[attention] = model
    return result


# What lecture 04 asserts, and the course's robustness sweep checks: with attention BLEU
# stays flat (the longest bucket within 10 of the shortest); without it the longest keeps less
# than half the shortest's BLEU; on the longest, attention leads by more than 50.
LENGTH_CHECKS = (Check("drop with", "<", 10.0), Check("kept without", "<", 0.5),
                 Check("gap at 31-45", ">", 50.0))


def length_numbers(result: LengthExperiment) -> dict[str, float]:
    """The named numbers ``LENGTH_CHECKS`` bound, and the BLEU of every bucket."""
    numbers = {}
    for attention, name in ((True, "with"), (False, "without")):
        for bucket, bleu in result.curves[attention].items():
            numbers[f"{name} {bucket}"] = bleu
        numbers[f"drop {name}"] = result.drops[attention]
    numbers["kept without"] = result.curves[False]["31-45"] / result.curves[False]["3-10"]
    numbers["gap at 31-45"] = result.curves[True]["31-45"] - result.curves[False]["31-45"]
    return numbers
