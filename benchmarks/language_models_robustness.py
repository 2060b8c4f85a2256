"""Do lecture 01's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/01_language_models.ipynb`` in FAST mode for each seed and torch thread count (the
parameters cell gets ``SEED = s``, its kernel ``OMP_NUM_THREADS=n``). The n-gram
results on Tiny Shakespeare are counts, the same in every run; what a seed can move is the
feed-forward LM on the toy language. The notebook states its conclusions with ``seqlab.claim``, so
a run that finishes is one where all of them held; a failing run names the cell. Then prints the
headline numbers, and every claim's spread and worst margin over the runs, with the thresholds
read from the runs.

    python benchmarks/language_models_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4]
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_sweep import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_language_models.ipynb"


def headline(records: dict) -> dict[str, float]:
    """The numbers the lecture's conclusions rest on."""
    out = {f"Tiny Shakespeare {order} perplexity (modified KN)": records[f"perplexity_{order}"]
           for order in ("unigram", "bigram", "trigram") if f"perplexity_{order}" in records}
    for words, ratio in records.get("trigram_over_bigram_by_training_words", []):
        out[f"trigram / bigram with {words:,} words"] = ratio
    if "toy_feedforward_perplexity" in records:
        out["toy: feed-forward perplexity"] = records["toy_feedforward_perplexity"]
        out["toy: true model perplexity"] = records["toy_true_perplexity"]
    for model in ("trigram", "neural"):
        if f"toy_grammatical_samples_{model}" in records:
            out[f"toy: grammatical samples, {model}"] = records[f"toy_grammatical_samples_{model}"]
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
