"""Do lecture 05's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/05_transformer.ipynb`` in FAST mode for each seed and torch thread count: the
parameters cell gets ``SEED = s`` and its kernel ``OMP_NUM_THREADS=n``. The
notebook asserts every conclusion it draws (pre-LN trains where post-LN without warmup ends more
than 1 nat behind, nearer the unigram loss than the floor, after first falling below the
unigram level and climbing back by more than 0.1 nats, and post-LN with warmup trains; the
Transformer beats the RNN with attention after the same batches, and its cross-attention
follows the gold alignment on the reordered and the non-determiner words; the character GPT
beats a unigram model), so a run that finishes is a run where all of them held; a run that
fails names the cell. Then prints the headline numbers of every run and their spread
(min .. max), margins against the notebook's thresholds included.

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
    """The numbers the lecture's conclusions rest on, flattened."""
    out = {}
    ln = records.get("pre_post_ln_valid_loss", {})
    for name, value in ln.items():
        out[f"toy LM validation loss: {name}"] = value
    if ln:
        post = ln["post-LN, no warmup"]
        out["margin: post-LN no warmup - pre-LN (asserted > 1)"] = post - ln["pre-LN, no warmup"]
        out["margin: post-LN no warmup - post-LN warmup (asserted > 1)"] = \
            post - ln["post-LN, warmup + 1/sqrt decay"]
        out["post-LN no warmup - unigram on validation"] = post - ln["unigram on validation"]
        out["post-LN no warmup - midpoint of floor and unigram (asserted > 0)"] = \
            post - (ln["floor"] + ln["unigram"]) / 2
    curve = records.get("post_ln_no_warmup_curve", {})
    if curve and ln:
        out["post-LN no warmup: lowest training loss - unigram (asserted < -0.1)"] = \
            curve["lowest"] - ln["unigram"]
        out["post-LN no warmup: step of the lowest"] = curve["at step"]
        out["post-LN no warmup: last - lowest training loss (asserted > 0.1)"] = \
            curve["last"] - curve["lowest"]
        out["post-LN no warmup: last - midpoint of floor and unigram (asserted > 0)"] = \
            curve["last"] - (ln["floor"] + ln["unigram"]) / 2
    mt = records.get("transformer_vs_rnn_attention", {})
    for name, row in mt.items():
        out[f"{name}: BLEU"] = row["BLEU"]
        out[f"{name}: training seconds"] = row["train seconds"]
    if mt:
        out["BLEU margin: Transformer - RNN (asserted > 5)"] = \
            mt["Transformer"]["BLEU"] - mt["RNN + attention"]["BLEU"]
        out["time ratio: Transformer / RNN"] = \
            mt["Transformer"]["train seconds"] / mt["RNN + attention"]["train seconds"]
    if "transformer_cross_attention_alignment" in records:
        out["Transformer cross-attention = gold alignment"] = \
            records["transformer_cross_attention_alignment"]
        out["... on reordered words (asserted > 0.95)"] = \
            records["transformer_cross_attention_alignment_reordered"]
    for name, value in records.get("transformer_cross_attention_by_kind", {}).items():
        out[f"... {name}"] = value
    gpt = records.get("char_gpt", {})
    for key in ("valid_loss", "unigram", "seconds"):
        if key in gpt:
            out[f"char GPT ({gpt['source']}): {key}"] = gpt[key]
    for temperature, share in records.get("char_gpt_real_word_share", {}).items():
        out[f"char GPT real-word share at temperature {temperature}"] = share
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
