"""Do lecture 06's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/06_decoding.ipynb`` in FAST mode for each seed and torch thread count: the
parameters cell gets ``SEED = s`` and its kernel ``OMP_NUM_THREADS=n``. The
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

from notebook_sweep import one_run, print_held, sweep

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "06_decoding.ipynb"

# (key of ``margins``, op, threshold): the notebook's own assertions on its conclusions.
CHECKS = (
    ("conclusions held", ">=", 1),
    # section 6: length and BLEU against the beam size
    ("early: length k=1 - k=10, raw", ">", 0.05),
    ("early: length at k=10, normalised - raw", ">", 0.05),
    ("trained: |length / shortest reference - 1| (worst)", "<", 0.05),
    ("early: BLEU k=1 - k=10, raw", ">", 0),
    ("early: BLEU won back at k=10 by normalising / lost by raw k=10", ">", 0.5),
    ("trained: BLEU spread over k (worst beta)", "<", 3),
    # section 7: budgets and stopping rules
    ("k=5, max_len=60: steps - longest output - 1", ">=", 0),
    ("k=5, max_len=60: steps", "<", 60),
    ("max_len=8: cut off", ">", 0.3),
    ("max_len=8: |cut off - references of 8+ words|", "<=", 0.03),
    ("80 steps, beta 1: outputs unlike True's (most)", "<=", 0.2),
    ("80 steps: never's outputs unlike True's, beta 2 - beta 1", ">", 0),
    ("80 steps, beta 2: never's outputs unlike True's", ">", 0.5),
    ("80 steps, beta 2: False's outputs unlike True's", ">", 0.1),
    ("80 steps, beta 2: never's length / True's", ">", 2),
    ("trained: outputs unlike True's (most, both betas)", "<=", 0.03),
    # section 8: search and model errors
    ("certified by exact search (worst checkpoint)", ">=", 0.9),
    ("beam 5 - greedy, mode found (worst checkpoint)", ">=", 0),
    ("beam 10 - best other decoder, mode found (summed)", ">=", 0),
    ("untrained: mode empty", ">", 0.9),
    ("undertrained: mode too short (mean over checkpoints)", ">", 0.75),
    ("undertrained: greedy - exact BLEU (sum)", ">", 5),
    ("undertrained: exact - greedy BLEU (worst)", "<=", 1),
    ("trained: mode too short", "<", 0.05),
    ("trained: beam 5 finds the mode", ">", 0.9),
    ("trained: BLEU exact", ">", 90),
    ("trained: BLEU of greedy/beam 5/exact (lowest)", ">", 95),
    # section 9: MBR
    ("pie: largest |sampled - exact| expected utility", "<", 0.03),
    ("partly trained: MBR - exact BLEU (worst)", ">=", 0),
    ("partly trained: MBR - exact BLEU (sum)", ">", 5),
    ("partly trained: MBR - exact length (mean over checkpoints)", ">", 0.1),
    ("trained: BLEU MBR", ">", 95),
    # section 10: degeneration and per-token probabilities
    ("greedy or beam 5 rep-2 / sampling rep-2 (lower)", ">", 2),
    ("greedy unique sentences", "<", 0.15),
    ("beam 5 unique sentences", "<", 1 / 3),
    ("sampling unique sentences", ">", 0.9),
    ("|sampling - human| rep-2", "<", 0.03),
    ("greedy - sampling grammatical", ">=", 0),
    ("sampling grammatical", "<", 1),
    ("beam 5 - human mean P(token)", ">", 0),
    ("beam 5 - human mean P(token), for the upper bound", "<", 0.1),
    ("beam 5 mean P(token)", "<", 0.4),
    ("beam 5 ranked first", ">", 0.5),
    ("|human ranked first - 1/3|", "<", 0.07),
    ("beam 5 |mean P 31-60 - mean P 1-30|", "<", 0.03),
    # section 11: temperature
    ("T=0.1 - T=1 rep-2", ">", 0.1),
    ("greedy - T=0.1 rep-2", ">", 0),
    ("T=0.5 - T=2 grammatical", ">", 0.1),
    # section 12: truncation
    ("peaked: tokens kept by top-p or min-p (most)", "<", 5),
    ("flat: tokens kept by top-p or min-p (fewest)", ">", 5),
    ("typical cuts the most probable token (share)", ">", 0),
    ("filters' ungrammatical / sampling's (worst of the four)", "<=", 0.5),
    ("top-p/min-p/typical |rep-2 - human| (worst)", "<", 0.05),
    ("top-k rep-2 - top-p/min-p/typical rep-2 (highest)", ">", 0),
    # section 13: contrastive decoding
    ("contrastive rep-2 / top-p rep-2", ">", 1),
    ("contrastive unique sentences / top-p's", "<", 0.25),
    ("FAST: contrastive - greedy rep-2", ">=", 0),
)
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
ADAPTIVE = ("top-p 0.9", "min-p 0.1", "typical 0.9")


def _search_margins(rec: dict) -> dict[str, float]:
    """Sections 7-9: stopping, search and model errors, MBR."""
    out = {}
    stop = rec.get("stopping")
    if stop:
        out["k=5, max_len=60: steps - longest output - 1"] = stop["steps"] - stop["longest"] - 1
        out["k=5, max_len=60: steps"] = stop["steps"]
        out["max_len=8: cut off"] = stop["cut_off"]
        out["max_len=8: |cut off - references of 8+ words|"] = abs(
            stop["cut_off"] - stop["references_8_words_or_more"])
    rules = rec.get("stopping_rules")  # "<training steps> <beta> <rule>" -> numbers
    if rules:
        last = max(int(k.split()[0]) for k in rules)
        unlike = {k: v["differ from True"] for k, v in rules.items()}
        out["80 steps, beta 1: outputs unlike True's (most)"] = max(
            unlike["80 1.0 False"], unlike["80 1.0 never"])
        out["80 steps: never's outputs unlike True's, beta 2 - beta 1"] = (
            unlike["80 2.0 never"] - unlike["80 1.0 never"])
        out["80 steps, beta 2: never's outputs unlike True's"] = unlike["80 2.0 never"]
        out["80 steps, beta 2: False's outputs unlike True's"] = unlike["80 2.0 False"]
        out["80 steps, beta 2: never's length / True's"] = (rules["80 2.0 never"]["length"]
                                                           / rules["80 2.0 True"]["length"])
        out["trained: outputs unlike True's (most, both betas)"] = max(
            v for k, v in unlike.items() if k.startswith(f"{last} "))
    table = {int(k): v for k, v in rec.get("search_vs_model_error", {}).items()}
    if table:
        steps = sorted(table)
        under = [s for s in steps if table[s]["BLEU greedy"] < 50]
        first, last = table[steps[0]], table[steps[-1]]
        found = {n: sum(table[s][f"mode found: {n}"] for s in steps)
                 for n in ("greedy", "beam 2", "beam 5", "beam 10")}
        out["certified by exact search (worst checkpoint)"] = min(
            table[s]["certified"] for s in steps)
        out["beam 5 - greedy, mode found (worst checkpoint)"] = min(
            table[s]["mode found: beam 5"] - table[s]["mode found: greedy"] for s in steps)
        out["beam 10 - best other decoder, mode found (summed)"] = found["beam 10"] - max(
            v for n, v in found.items() if n != "beam 10")
        out["untrained: mode empty"] = first["mode empty"]
        out["undertrained: mode too short (mean over checkpoints)"] = sum(
            table[s]["mode too short"] for s in under) / len(under)
        gaps = [table[s]["BLEU greedy"] - table[s]["BLEU exact"] for s in under]
        out["undertrained: greedy - exact BLEU (sum)"] = sum(gaps)
        out["undertrained: exact - greedy BLEU (worst)"] = -min(gaps)
        out["trained: mode too short"] = last["mode too short"]
        out["trained: beam 5 finds the mode"] = last["mode found: beam 5"]
        out["trained: BLEU exact"] = last["BLEU exact"]
        out["trained: BLEU of greedy/beam 5/exact (lowest)"] = min(
            last[f"BLEU {n}"] for n in ("greedy", "beam 5", "exact"))
        if "pie_mbr" in rec:
            out["pie: largest |sampled - exact| expected utility"] = rec["pie_mbr"]["largest gap"]
        mbr = {int(k): v for k, v in rec.get("mbr", {}).items()}
        if mbr:
            partly = [s for s in under if s in mbr]
            out["partly trained: MBR - exact BLEU (worst)"] = min(
                mbr[s]["BLEU MBR"] - table[s]["BLEU exact"] for s in partly)
            out["partly trained: MBR - exact BLEU (sum)"] = sum(
                mbr[s]["BLEU MBR"] - table[s]["BLEU exact"] for s in partly)
            out["partly trained: MBR - exact length (mean over checkpoints)"] = sum(
                mbr[s]["length: MBR"] - mbr[s]["length: exact"] for s in partly) / len(partly)
            out["trained: BLEU MBR"] = mbr[steps[-1]]["BLEU MBR"]
    return out


def _beam_size_margins(rec: dict) -> dict[str, float]:
    """Section 6: length and BLEU against the beam size, early and trained."""
    out = {}
    for name, record in (("length", rec.get("length_ratio", {})),
                         ("BLEU", rec.get("beam_bleu", {}))):
        early = {float(k.rsplit(" ", 1)[1]): v for k, v in record.items()
                 if k.startswith("early")}
        trained = [v for k, v in record.items() if k.startswith("trained")]
        if not early:
            continue
        raw, norm = early[0.0], early[1.0]
        out[f"early: {name} k=1 - k=10, raw"] = raw[0] - raw[-1]
        if name == "length":
            out["early: length at k=10, normalised - raw"] = norm[-1] - raw[-1]
            out["trained: |length / shortest reference - 1| (worst)"] = max(
                abs(r - 1) for row in trained for r in row)
        else:
            out["early: BLEU won back at k=10 by normalising / lost by raw k=10"] = (
                (norm[-1] - raw[-1]) / (raw[0] - raw[-1]))
            out["trained: BLEU spread over k (worst beta)"] = max(
                max(row) - min(row) for row in trained)
    return out


def _sampling_margins(rec: dict) -> dict[str, float]:
    """Sections 10-13: degeneration, per-token probabilities, temperature, truncation,
    contrastive decoding."""
    out, nan = {}, float("nan")

    def number(value):  # a share over no sentences is stored as the string "nan"
        return nan if isinstance(value, str) else value

    deg = rec.get("degeneration")
    if deg:
        out["greedy or beam 5 rep-2 / sampling rep-2 (lower)"] = min(
            deg["greedy"]["rep-2"], deg["beam 5"]["rep-2"]) / deg["sampling"]["rep-2"]
        out["greedy unique sentences"] = deg["greedy"]["unique sentences"]
        out["beam 5 unique sentences"] = deg["beam 5"]["unique sentences"]
        out["sampling unique sentences"] = deg["sampling"]["unique sentences"]
        out["|sampling - human| rep-2"] = abs(deg["sampling"]["rep-2"] - deg["human"]["rep-2"])
        out["greedy - sampling grammatical"] = (deg["greedy"]["grammatical"]
                                                - deg["sampling"]["grammatical"])
        out["sampling grammatical"] = deg["sampling"]["grammatical"]
    tokens = rec.get("token_probabilities")
    if tokens:
        human, beam = tokens["human"], tokens["beam 5"]
        out["beam 5 - human mean P(token)"] = beam["mean P"] - human["mean P"]
        out["beam 5 - human mean P(token), for the upper bound"] = out[
            "beam 5 - human mean P(token)"]
        out["beam 5 mean P(token)"] = beam["mean P"]
        out["beam 5 ranked first"] = beam["ranked first"]
        out["|human ranked first - 1/3|"] = abs(human["ranked first"] - 1 / 3)
        out["beam 5 |mean P 31-60 - mean P 1-30|"] = abs(beam["mean P 31-60"]
                                                         - beam["mean P 1-30"])
    temp = rec.get("temperature_sweep")
    if temp:
        out["T=0.1 - T=1 rep-2"] = temp["0.1"]["rep-2"] - temp["1.0"]["rep-2"]
        if deg:
            out["greedy - T=0.1 rep-2"] = deg["greedy"]["rep-2"] - temp["0.1"]["rep-2"]
        out["T=0.5 - T=2 grammatical"] = temp["0.5"]["grammatical"] - temp["2.0"]["grammatical"]
    kept = rec.get("tokens_kept")
    if kept:
        out["peaked: tokens kept by top-p or min-p (most)"] = max(
            kept["peaked"]["top-p 0.9"], kept["peaked"]["min-p 0.1"])
        out["flat: tokens kept by top-p or min-p (fewest)"] = min(
            kept["flat"]["top-p 0.9"], kept["flat"]["min-p 0.1"])
    if "typical_cuts_the_most_probable" in rec:
        out["typical cuts the most probable token (share)"] = rec[
            "typical_cuts_the_most_probable"]
    cut = rec.get("truncated_sampling")
    if cut and deg:
        bad = 1 - cut["sampling"]["grammatical"]
        out["filters' ungrammatical / sampling's (worst of the four)"] = max(
            (1 - number(v["grammatical"])) / bad if bad else nan
            for n, v in cut.items() if n != "sampling")
        out["top-p/min-p/typical |rep-2 - human| (worst)"] = max(
            abs(cut[n]["rep-2"] - deg["human"]["rep-2"]) for n in ADAPTIVE)
        out["top-k rep-2 - top-p/min-p/typical rep-2 (highest)"] = cut["top-k 5"]["rep-2"] - max(
            cut[n]["rep-2"] for n in ADAPTIVE)
    cd = rec.get("contrastive")
    if cd:
        nucleus = next(v for k, v in cd.items() if k.startswith("top-p"))
        out["contrastive rep-2 / top-p rep-2"] = cd["contrastive"]["rep-2"] / nucleus["rep-2"]
        out["contrastive unique sentences / top-p's"] = (cd["contrastive"]["unique sentences"]
                                                     / nucleus["unique sentences"])
        out["FAST: contrastive - greedy rep-2"] = cd["contrastive"]["rep-2"] - cd["greedy"]["rep-2"]
    return out


def margins(run: dict) -> dict[str, float]:
    """The quantities ``CHECKS`` bound, from one run's records (nan where a run stopped early)."""
    rec = run["records"]
    out = {"conclusions held": float(run["error"] is None), **_beam_size_margins(rec),
           **_search_margins(rec), **_sampling_margins(rec)}
    return {key: out.get(key, float("nan")) for key, _, _ in CHECKS}


def lecture06(seed: int) -> dict[str, float]:
    """One FAST run of the lecture with torch's current thread count, as named numbers."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        return margins(one_run(NOTEBOOK, seed, torch.get_num_threads(), Path(tmp)))


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
