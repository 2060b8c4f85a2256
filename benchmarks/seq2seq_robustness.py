"""Do lecture 03's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/03_seq2seq.ipynb`` in FAST mode for each seed and torch thread count (the
parameters cell gets ``SEED = s``, its kernel ``OMP_NUM_THREADS=n``). The notebook
asserts its conclusions (the FAST model is undertrained, with a final training loss between 0.8
and 1.3; one own mistake raises the loss of the next gold word by more than 2 nats, and of the
words after it by more than 0.1; without attention the shortest sources score more than 20 BLEU
above the longest), so a run that finishes held all of them; a failing run names the cell. Then
prints the headline numbers and their margins over the runs (min .. max).

    python benchmarks/seq2seq_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_sweep import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "03_seq2seq.ipynb"


def headline(records: dict) -> dict[str, float]:
    """The numbers the lecture's conclusions rest on, and their margins."""
    out = {}
    if "final_training_loss" in records:
        out["final training loss (asserted in (0.8, 1.3))"] = records["final_training_loss"]
    cost = records.get("one_mistake", {})
    for words, threshold in (("next word", 2.0), ("words after the next", 0.1)):
        if cost:
            out[f"{words}: loss after a mistake - gold prefix (asserted > {threshold:g})"] = \
                cost[f"{words}, mistake"] - cost[f"{words}, clean"]
    if "toy_bleu_no_attention" in records:
        out["toy BLEU, greedy"] = records["toy_bleu_no_attention"]
    by_length = records.get("bleu_by_length_no_attention", {})
    if by_length:
        out["BLEU 3-10 - BLEU 31-45 (asserted > 20)"] = by_length["3-10"] - by_length["31-45"]
    if "tatoeba_bleu_no_attention" in records:
        out["Tatoeba BLEU (not asserted)"] = records["tatoeba_bleu_no_attention"]
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
