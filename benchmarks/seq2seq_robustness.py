"""Do lecture 03's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/03_seq2seq.ipynb`` in FAST mode for each seed and torch thread count (the
parameters cell gets ``SEED = s``, its kernel ``OMP_NUM_THREADS=n``). The notebook states its
conclusions with ``seqlab.claim`` (the FAST model is undertrained; one own mistake costs the next
gold word and the words after it; without attention short sources score far above long ones), so
a run that finishes is one where all of them held; a failing run names the cell. Then prints the
headline numbers and their spread over the runs (min .. max), and every claim's spread and worst
margin, with the thresholds read from the runs.

    python benchmarks/seq2seq_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_sweep import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "03_seq2seq.ipynb"


def headline(records: dict) -> dict[str, float]:
    """Numbers worth watching beside the lecture's claims."""
    out = {}
    if "toy_bleu_no_attention" in records:
        out["toy BLEU, greedy"] = records["toy_bleu_no_attention"]
    for bucket, bleu in records.get("bleu_by_length_no_attention", {}).items():
        out[f"toy BLEU, sources of {bucket} words"] = bleu
    if "tatoeba_bleu_no_attention" in records:
        out["Tatoeba BLEU"] = records["tatoeba_bleu_no_attention"]
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
