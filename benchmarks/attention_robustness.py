"""Do lecture 04's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/04_attention.ipynb`` in FAST mode for each seed and torch thread count (the
parameters cell gets ``SEED = s``, its kernel ``OMP_NUM_THREADS=n``). The notebook states its
conclusions with ``seqlab.claim`` (``experiments.LENGTH_CHECKS``: with attention BLEU stays flat
over source length, without it the longest sentences keep less than half the shortest's BLEU),
so a run that finishes is one where all of them held; a failing run names the cell. Then prints
the BLEU by length and the drops over the runs, and every claim's spread and worst margin.
``lecture_robustness.py`` sweeps the same experiment without the notebook, and can train for a
fraction of the steps; this script's ``--record`` writes what the lecture prints.

    python benchmarks/attention_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_sweep import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "04_attention.ipynb"


def headline(records: dict) -> dict[str, float]:
    """BLEU by source length with and without attention, and each model's drop."""
    out = {}
    for attention, key in (("with", "bleu_by_length_attention"),
                           ("without", "bleu_by_length_no_attention")):
        for bucket, bleu in records.get(key, {}).items():
            out[f"BLEU {attention} attention, sources of {bucket} words"] = bleu
    for name, drop in records.get("bleu_drop_shortest_to_longest", {}).items():
        out[f"BLEU drop {'with' if name == 'attention' else 'without'} attention"] = drop
    return out


if __name__ == "__main__":
    sys.exit(main(__file__, NOTEBOOK, headline, __doc__))
