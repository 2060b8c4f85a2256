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

import argparse
import json
import operator
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
    ("early: length k=1 - k=10, raw", ">", 0.1),
    ("early: length at k=10, normalised - raw", ">", 0.05),
    ("greedy or beam 5 rep-2 / sampling rep-2 (lower)", ">", 2),
    ("greedy unique sentences", "<", 0.1),
    ("|sampling - human| rep-2", "<", 0.1),
    ("T=0.1 - T=1 rep-2", ">", 0.1),
    ("T=0.5 - T=2 grammatical", ">", 0.1),
    ("contrastive rep-2 / top-p rep-2", ">", 3),
    ("contrastive unique sentences", "<", 0.1),
)
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def run_notebook(seed: int, threads: int, out: Path, notebook: Path = NOTEBOOK) -> dict:
    """Execute the notebook once (in this process); return its records and how it ended."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(notebook, as_version=4)
    params = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells[params].source += f"\nSEED = {seed}"
    nb.cells.insert(params + 1, nbformat.v4.new_code_cell(
        f"import torch\ntorch.set_num_threads({threads})"))
    os.environ.update(SEQLAB_FAST="1", SEQLAB_NOTEBOOK=notebook.stem, SEQLAB_RESULTS=str(out))
    start, error = time.perf_counter(), None
    try:
        NotebookClient(nb, timeout=1800, kernel_name="python3",
                       resources={"metadata": {"path": str(notebook.parent)}}).execute()
    except CellExecutionError as err:  # name the failing line, not just the exception
        lines = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip().splitlines()
        where = [line.strip() for line in lines if line.lstrip().startswith("---->")]
        error = " | ".join([*where[-1:], lines[-1]])[:300]
    records = out / f"{notebook.stem}.json"
    return {"seed": seed, "threads": threads, "seconds": time.perf_counter() - start,
            "error": error, "records": json.loads(records.read_text()) if records.exists() else {}}


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
        out["|sampling - human| rep-2"] = abs(deg["sampling"]["rep-2"] - deg["human"]["rep-2"])
    temp = rec.get("temperature_sweep")
    if temp:
        out["T=0.1 - T=1 rep-2"] = temp["0.1"]["rep-2"] - temp["1.0"]["rep-2"]
        out["T=0.5 - T=2 grammatical"] = temp["0.5"]["grammatical"] - temp["2.0"]["grammatical"]
    cd = rec.get("contrastive")
    if cd:
        nucleus = next(v for k, v in cd.items() if k.startswith("top-p"))
        out["contrastive rep-2 / top-p rep-2"] = cd["contrastive"]["rep-2"] / nucleus["rep-2"]
        out["contrastive unique sentences"] = cd["contrastive"]["unique sentences"]
    return {key: out.get(key, nan) for key, _, _ in CHECKS}


def lecture06(seed: int) -> dict[str, float]:
    """One FAST run of the lecture with torch's current thread count, as named numbers."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        return margins(run_notebook(seed, torch.get_num_threads(), Path(tmp)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once")
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK)
    parser.add_argument("--out", type=Path, help="keep each run's records here")
    parser.add_argument("--one", type=int, nargs=2, metavar=("SEED", "THREADS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_notebook(*args.one, Path(tmp), args.notebook.resolve())))
        return 0
    # Idle OpenMP threads sleep instead of spinning: on a shared machine spinning threads make
    # multi-threaded runs crawl; the arithmetic, and so every number, stays the same.
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}

    def spawn(job):
        seed, threads = job
        done = subprocess.run([sys.executable, __file__, "--one", str(seed), str(threads),
                               "--notebook", str(args.notebook)],
                              capture_output=True, text=True, check=False, env=env)
        lines = done.stdout.strip().splitlines()
        if done.returncode or not lines:
            run = {"seed": seed, "threads": threads, "seconds": 0.0, "records": {},
                   "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        else:
            run = json.loads(lines[-1])
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"seed{seed}_threads{threads}.json").write_text(json.dumps(run))
        status = "all conclusions held" if run["error"] is None else f"FAILED: {run['error']}"
        print(f"seed {seed}, {threads} threads: {run['seconds']:.0f} s, {status}", flush=True)
        return run

    jobs = [(s, t) for t in args.threads for s in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(spawn, jobs))
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
    failed = sum(run["error"] is not None for run in runs)
    print(f"\n{len(runs) - failed} of {len(runs)} runs held every conclusion of the notebook")
    return 0


if __name__ == "__main__":
    sys.exit(main())
