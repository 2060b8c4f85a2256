"""Do lecture 06's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/06_decoding.ipynb`` in FAST mode for each seed and torch thread count: the
parameters cell gets ``SEED = s`` and a cell after it calls ``torch.set_num_threads(n)``. The
notebook asserts every conclusion it draws, so a run that finishes is a run where all of them
held; a run that fails names the line. From each run's recorded numbers this prints the
quantities the main conclusions rest on, per run, then the worst case of each against the
notebook's threshold, with its margin.

    python benchmarks/decoding_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]
        [--out DIR (keeps every run's recorded numbers)]

``lecture06(seed)`` and ``CHECKS`` have the shape of an entry of ``lecture_robustness.py``
(seed -> named numbers, and ``(key, op, threshold)`` checks); the thread count is the one torch
has when it is called.
"""

from __future__ import annotations

import operator
import sys
import tempfile
from pathlib import Path

from notebook_sweep import print_held, run_notebook, sweep

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "06_decoding.ipynb"

# (key of ``margins``, op, threshold): the notebook's own assertions on its main conclusions.
CHECKS = (
    ("conclusions held", ">=", 1),
    ("beam 5 - greedy, mode found (worst checkpoint)", ">=", 0),
    ("untrained: mode empty", ">", 0.9),
    ("undertrained: mode too short (worst)", ">", 0.5),
    ("undertrained: greedy - exact BLEU (sum)", ">", 5),
    ("undertrained: exact - greedy BLEU (worst)", "<=", 1),
    ("trained: beam 5 finds the mode", ">", 0.9),
    ("k=5 stops on the step of its last <eos>: steps - longest - 1", "<=", 0),
    ("early: length k=1 - k=10, raw", ">", 0.05),
    ("early: length at k=10, normalised - raw", ">", 0.05),
    ("greedy or beam 5 rep-2 / sampling rep-2 (lower)", ">", 2),
    ("greedy unique sentences", "<", 0.15),
    ("beam 5 unique sentences", "<", 1 / 3),
    ("|sampling - human| rep-2", "<", 0.1),
    ("T=0.1 - T=1 rep-2", ">", 0.1),
    ("T=0.5 - T=2 grammatical", ">", 0.1),
    ("contrastive rep-2 / top-p rep-2", ">", 1),
    ("contrastive unique sentences / top-p's", "<", 0.25),
)
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def margins(run: dict) -> dict[str, float]:
    """The quantities ``CHECKS`` bound, from one run's records (nan where a run stopped early)."""
    rec, nan = run["records"], float("nan")
    out = {"conclusions held": float(run["error"] is None)}
    table = {int(k): v for k, v in rec.get("search_vs_model_error", {}).items()}
    if table:
        steps = sorted(table)
        under = [s for s in steps if table[s]["BLEU greedy"] < 50]
        out["beam 5 - greedy, mode found (worst checkpoint)"] = min(
            table[s]["mode found: beam 5"] - table[s]["mode found: greedy"] for s in steps)
        out["untrained: mode empty"] = table[steps[0]]["mode empty"]
        out["undertrained: mode too short (worst)"] = min(table[s]["mode too short"] for s in under)
        gaps = [table[s]["BLEU greedy"] - table[s]["BLEU exact"] for s in under]
        out["undertrained: greedy - exact BLEU (sum)"] = sum(gaps)
        out["undertrained: exact - greedy BLEU (worst)"] = -min(gaps)
        out["trained: beam 5 finds the mode"] = table[steps[-1]]["mode found: beam 5"]
    stop = rec.get("stopping")
    if stop:
        out["k=5 stops on the step of its last <eos>: steps - longest - 1"] = (
            stop["steps"] - stop["longest"] - 1)
    ratio = rec.get("length_ratio", {})
    raw = next((v for k, v in ratio.items() if k.startswith("early") and k.endswith("0.0")), None)
    norm = next((v for k, v in ratio.items() if k.startswith("early") and k.endswith("1.0")), None)
    if raw and norm:
        out["early: length k=1 - k=10, raw"] = raw[0] - raw[-1]
        out["early: length at k=10, normalised - raw"] = norm[-1] - raw[-1]
    deg = rec.get("degeneration")
    if deg:
        out["greedy or beam 5 rep-2 / sampling rep-2 (lower)"] = min(
            deg["greedy"]["rep-2"], deg["beam 5"]["rep-2"]) / deg["sampling"]["rep-2"]
        out["greedy unique sentences"] = deg["greedy"]["unique sentences"]
        out["beam 5 unique sentences"] = deg["beam 5"]["unique sentences"]
        out["|sampling - human| rep-2"] = abs(deg["sampling"]["rep-2"] - deg["human"]["rep-2"])
    temp = rec.get("temperature_sweep")
    if temp:
        out["T=0.1 - T=1 rep-2"] = temp["0.1"]["rep-2"] - temp["1.0"]["rep-2"]
        out["T=0.5 - T=2 grammatical"] = temp["0.5"]["grammatical"] - temp["2.0"]["grammatical"]
    cd = rec.get("contrastive")
    if cd:
        nucleus = next(v for k, v in cd.items() if k.startswith("top-p"))
        out["contrastive rep-2 / top-p rep-2"] = cd["contrastive"]["rep-2"] / nucleus["rep-2"]
        out["contrastive unique sentences / top-p's"] = (cd["contrastive"]["unique sentences"]
                                                     / nucleus["unique sentences"])
    return {key: out.get(key, nan) for key, _, _ in CHECKS}


def lecture06(seed: int) -> dict[str, float]:
    """One FAST run of the lecture with torch's current thread count, as named numbers."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        return margins(run_notebook(NOTEBOOK, seed, torch.get_num_threads(), Path(tmp)))


def main() -> int:
    runs = sweep(__file__, NOTEBOOK, description=__doc__.splitlines()[0])
    if runs is None:
        return 0
    table = [margins(run) for run in runs]
    width = max(len(key) for key, _, _ in CHECKS)
    print(f"\n{'quantity':{width}s}  " + " ".join(f"s{r['seed']}/t{r['threads']}".rjust(7)
                                                for r in runs))
    for key, _, _ in CHECKS:
        print(f"{key:{width}s}  " + " ".join(f"{m[key]:7.3f}" for m in table))
    print("\nworst case over all runs:")
    for key, op, threshold in CHECKS:
        values = [m[key] for m in table]
        worst = max(values) if op in ("<", "<=") else min(values)
        holds = all(OPS[op](v, threshold) for v in values)
        print(f"  {key:{width}s} worst {worst:8.3f}  vs {op} {threshold:g}: "
              f"{'holds' if holds else 'FAILS'}, margin {abs(worst - threshold):.3f}")
    print_held(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
