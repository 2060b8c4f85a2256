"""Do lecture 05's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/05_transformer.ipynb`` in FAST mode for each seed and torch thread count: the
parameters cell gets ``SEED = s`` and its kernel ``OMP_NUM_THREADS=n``. The notebook states its
conclusions with ``seqlab.claim`` (pre-LN against post-LN with and without warmup, the
Transformer against the RNN with attention, its cross-attention against the gold alignment, the
character GPT against a unigram model), so a run that finishes is one where all of them held; a
failing run names the cell. Then prints the headline numbers of every run and their spread
(min .. max), and every claim's spread and worst margin, with the thresholds read from the runs.

    python benchmarks/transformer_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]

Wall-clock seconds depend on the machine's load; on a shared machine compare them only within
one run of this script. Child processes get ``OMP_WAIT_POLICY=PASSIVE`` unless it is set: with
torch's default (spinning) wait, runs with 2 or 4 threads on a busy 2-core machine were 15-100
times slower per operation; the wait policy changes no number, only how idle threads wait.
Section 10 trains on Tiny Shakespeare, which ships with the library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_sweep import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "05_transformer.ipynb"


def headline(records: dict) -> dict[str, float]:
    """The numbers behind the lecture's claims, and others worth watching, flattened."""
    out = {}
    ln = records.get("pre_post_ln_valid_loss", {})
    for name, value in ln.items():
        out[f"toy LM validation loss: {name}"] = value
    if ln:
        out["post-LN no warmup - unigram on validation"] = \
            ln["post-LN, no warmup"] - ln["unigram on validation"]
    curve = records.get("post_ln_no_warmup_curve", {})
    if curve:
        out["post-LN no warmup: lowest training loss"] = curve["lowest"]
        out["post-LN no warmup: step of the lowest"] = curve["at step"]
        out["post-LN no warmup: last training loss"] = curve["last"]
    for name, row in records.get("transformer_vs_rnn_attention", {}).items():
        out[f"{name}: BLEU"] = row["BLEU"]
        out[f"{name}: training seconds"] = row["train seconds"]
    for name, value in records.get("transformer_cross_attention_by_kind", {}).items():
        if name != "all other words":  # a claim
            out[f"Transformer cross-attention, {name}"] = value
    gpt = records.get("char_gpt", {})
    for key in ("unigram", "seconds"):
        if key in gpt:
            out[f"char GPT ({gpt['source']}): {key}"] = gpt[key]
    for temperature, share in records.get("char_gpt_real_word_share", {}).items():
        out[f"char GPT real-word share at temperature {temperature}"] = share
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
