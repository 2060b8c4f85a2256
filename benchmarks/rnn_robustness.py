"""Do lecture 02's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/02_rnn_backprop.ipynb`` in FAST mode for each seed and torch thread count (the
parameters cell gets ``SEED = s``, its kernel ``OMP_NUM_THREADS=n``). The notebook
asserts its conclusions (79 steps back, both untrained gradients are below 1e-10 of the last
step's, the trained tanh RNN's below 1e-8, and the trained LSTM's more than 1e3 times larger but
below 1e-2; the LSTM gets subject-verb agreement across a relative clause right more than 90% of
the time while the trigram stays within 10 points of chance; the LSTM's perplexity closes more
than half of the trigram's gap to the toy language's floor), so a run that finishes held all of
them; a failing run names the cell. Then prints the headline numbers and their margins over the
runs (min .. max).

    python benchmarks/rnn_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from notebook_sweep import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "02_rnn_backprop.ipynb"


def headline(records: dict) -> dict[str, float]:
    """The numbers the lecture's conclusions rest on, and their margins."""
    out = {}
    far = records.get("gradient_79_steps_back", {})
    if far:
        out["log10 gradient 79 steps back, untrained, larger of the two (asserted < -10)"] = \
            math.log10(max(far["rnn untrained"], far["lstm untrained"]))
        out["log10 gradient 79 steps back, trained tanh RNN (asserted < -8)"] = \
            math.log10(far["rnn trained"])
        out["log10 gradient 79 steps back, trained LSTM (asserted < -2)"] = \
            math.log10(far["lstm trained"])
        out["log10 LSTM / tanh RNN gradient 79 steps back (asserted > 3)"] = \
            math.log10(far["lstm trained"] / far["rnn trained"])
    accuracy = records.get("agreement_accuracy", {})
    if accuracy:
        out["agreement, LSTM (asserted > 0.9)"] = accuracy["LSTM"]
        out["agreement, tanh RNN (not asserted)"] = accuracy["tanh RNN"]
        out["agreement, |trigram - 0.5| (asserted < 0.1)"] = abs(accuracy["trigram"] - 0.5)
    if "lstm_perplexity" in records:
        out["LSTM perplexity (not asserted)"] = records["lstm_perplexity"]
    if "toy_trigram_perplexity" in records:
        floor = records["toy_true_perplexity"]
        out["share of the trigram's gap to the floor the LSTM closes (asserted > 0.5)"] = \
            1 - (records["lstm_perplexity"] - floor) / (records["toy_trigram_perplexity"] - floor)
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
