"""Do lecture 06's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/06_decoding.ipynb`` in FAST mode for each seed and torch thread count (the
parameters cell gets ``SEED = s``, its kernel ``OMP_NUM_THREADS=n``). The notebook states its
conclusions with ``seqlab.claim``, so a run that finishes is a run where all of them held; a
failing run names the cell. Then prints a few informative numbers over the runs (min .. max),
and every claim's spread and worst margin, with the thresholds read from the runs.

    python benchmarks/decoding_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]
        [--out DIR (keeps every run's recorded numbers)]
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_sweep import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "06_decoding.ipynb"


def headline(records: dict) -> dict[str, float]:
    """Numbers that show the lecture's story without a claim on them."""
    out = {}
    if "pie_exact_search_prefixes_scored" in records:
        out["pie: prefixes exact search scored"] = records["pie_exact_search_prefixes_scored"]
    bleu = {int(k): v for k, v in records.get("greedy_bleu_by_checkpoint", {}).items()}
    for steps in sorted(bleu)[1:-1]:  # the first and the last are claims
        out[f"greedy BLEU after {steps} steps"] = bleu[steps]
    for name, row in records.get("degeneration", {}).items():
        out[f"rep-2, {name}"] = row["rep-2"]
    if "contrastive" in records:
        out["rep-2, contrastive"] = records["contrastive"]["contrastive"]["rep-2"]
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
