"""Do lecture 02's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/02_rnn_backprop.ipynb`` in FAST mode for each seed and torch thread count (the
parameters cell gets ``SEED = s``, its kernel ``OMP_NUM_THREADS=n``). The notebook states its
conclusions with ``seqlab.claim``, so a run that finishes is one where all of them held; a failing
run names the cell. Then prints the headline numbers the notebook does not claim, and every
claim's spread and worst margin over the runs, with the thresholds read from the runs.

    python benchmarks/rnn_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_sweep import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "02_rnn_backprop.ipynb"


def headline(records: dict) -> dict[str, float]:
    """Numbers worth watching that the lecture states no conclusion about."""
    out = {}
    accuracy = records.get("agreement_accuracy", {})
    if accuracy:
        out["agreement, tanh RNN"] = accuracy["tanh RNN"]
    if "lstm_perplexity" in records:
        out["LSTM perplexity"] = records["lstm_perplexity"]
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
