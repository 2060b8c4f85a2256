"""Do lecture 06's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/06_decoding.ipynb`` in FAST mode for each seed and torch thread count: the
parameters cell gets ``SEED = s`` and a cell after it calls ``torch.set_num_threads(n)``. The
notebook asserts every conclusion it draws, so a run that finishes is a run where all of them
held; a run that fails names the cell. Then prints the headline numbers of every run and their
spread (min-max).

    python benchmarks/decoding_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
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


def run_one(seed: int, threads: int, out: Path, notebook: Path = NOTEBOOK) -> dict:
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


def headline(records: dict) -> dict[str, float]:
    """The numbers the lecture's conclusions rest on, flattened."""
    out = {}
    for steps, row in records.get("search_vs_model_error", {}).items():
        for key in ("mode empty", "mode too short", "mode found: greedy", "mode found: beam 5",
                    "BLEU greedy", "BLEU beam 5", "BLEU exact"):
            out[f"search {steps:>4} steps: {key}"] = row[key]
    for key, ratios in records.get("length_ratio", {}).items():
        out[f"length ratio {key}: k=1 / k=10"] = f"{ratios[0]:.2f} / {ratios[-1]:.2f}"
    for group in ("degeneration", "contrastive", "truncated_sampling"):
        for name, row in records.get(group, {}).items():
            for key in ("rep-2", "grammatical", "unique sentences"):
                out[f"{group}: {name}: {key}"] = row[key]
    for temperature, row in records.get("temperature_sweep", {}).items():
        out[f"temperature {temperature}: rep-2 / grammatical"] = \
            f"{row['rep-2']:.3f} / {row['grammatical']:.3f}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once")
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK)
    parser.add_argument("--one", type=int, nargs=2, metavar=("SEED", "THREADS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_one(*args.one, Path(tmp), args.notebook.resolve())))
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
        status = "all conclusions held" if run["error"] is None else f"FAILED: {run['error']}"
        print(f"seed {seed}, {threads} threads: {run['seconds']:.0f} s, {status}", flush=True)
        return run

    jobs = [(s, t) for t in args.threads for s in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(spawn, jobs))
    tables = [headline(run["records"]) for run in runs]
    keys = list(dict.fromkeys(k for t in tables for k in t))
    print(f"\n{'headline (one column per run: ' + str(len(runs)) + ')':60s} spread")
    for key in keys:
        values = [t[key] for t in tables if key in t]
        if all(isinstance(v, (int, float)) for v in values):
            spread = f"{min(values):.3f} .. {max(values):.3f}"
        else:
            spread = "  ".join(sorted(set(map(str, values))))
        print(f"{key:60s} {spread}")
    failed = sum(run["error"] is not None for run in runs)
    print(f"\n{len(runs) - failed} of {len(runs)} runs held every conclusion")
    return 0


if __name__ == "__main__":
    sys.exit(main())
