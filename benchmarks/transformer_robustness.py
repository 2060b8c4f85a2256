"""Do lecture 05's conclusions hold for every seed and thread count? (printed, never asserted)

Runs ``notebooks/05_transformer.ipynb`` in FAST mode for each seed and torch thread count: the
parameters cell gets ``SEED = s`` and a cell after it calls ``torch.set_num_threads(n)``. The
notebook asserts every conclusion it draws (pre-LN trains where post-LN without warmup ends more
than 1 nat behind, nearer the unigram loss than the floor, and post-LN with warmup trains; the
Transformer beats the RNN with attention after the same batches; the character GPT beats a
unigram model), so a run that
finishes is a run where all of them held; a run that fails names the cell. Then prints the
headline numbers of every run and their spread (min .. max).

    python benchmarks/transformer_robustness.py [--seeds 0 1 2 3 4] [--threads 1 2 4] [--jobs 2]

Wall-clock seconds depend on the machine's load; on a shared machine compare them only within
one run of this script. Child processes get ``OMP_WAIT_POLICY=PASSIVE`` unless it is set: with
torch's default (spinning) wait, runs with 2 or 4 threads on a busy 2-core machine were 15-100
times slower per operation; the wait policy changes no number, only how idle threads wait.
Tiny Shakespeare is used when it is in the data cache (``SEQLAB_DATA``), else the toy fallback.
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
NOTEBOOK = ROOT / "notebooks" / "05_transformer.ipynb"


def run_one(seed: int, threads: int, out: Path) -> dict:
    """Execute the notebook once (in this process); return its records and how it ended."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells[params].source += f"\nSEED = {seed}"
    nb.cells.insert(params + 1, nbformat.v4.new_code_cell(
        f"import torch\ntorch.set_num_threads({threads})"))
    os.environ.update(SEQLAB_FAST="1", SEQLAB_NOTEBOOK=NOTEBOOK.stem, SEQLAB_RESULTS=str(out))
    start, error = time.perf_counter(), None
    try:
        NotebookClient(nb, timeout=3600, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    except CellExecutionError as err:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))  # no terminal colours
        failing = [line for line in text.splitlines() if line.lstrip().startswith("---->")]
        error = (failing[-1] if failing else text.strip().splitlines()[-1]).strip()[:300]
    records = out / f"{NOTEBOOK.stem}.json"
    return {"seed": seed, "threads": threads, "seconds": time.perf_counter() - start,
            "error": error, "records": json.loads(records.read_text()) if records.exists() else {}}


def headline(records: dict) -> dict[str, float]:
    """The numbers the lecture's conclusions rest on, flattened."""
    out = {}
    for name, value in records.get("pre_post_ln_valid_loss", {}).items():
        out[f"toy LM validation loss: {name}"] = value
    ln = records.get("pre_post_ln_valid_loss", {})
    if ln:
        out["margin: post-LN no warmup - pre-LN"] = \
            ln["post-LN, no warmup"] - ln["pre-LN, no warmup"]
        out["margin: post-LN no warmup - post-LN warmup"] = \
            ln["post-LN, no warmup"] - ln["post-LN, warmup + 1/sqrt decay"]
    mt = records.get("transformer_vs_rnn_attention", {})
    for name, row in mt.items():
        out[f"{name}: BLEU"] = row["BLEU"]
        out[f"{name}: training seconds"] = row["train seconds"]
    if mt:
        out["BLEU margin: Transformer - RNN"] = \
            mt["Transformer"]["BLEU"] - mt["RNN + attention"]["BLEU"]
        out["time ratio: Transformer / RNN"] = \
            mt["Transformer"]["train seconds"] / mt["RNN + attention"]["train seconds"]
    if "transformer_cross_attention_alignment" in records:
        out["Transformer cross-attention = gold alignment"] = \
            records["transformer_cross_attention_alignment"]
    gpt = records.get("char_gpt", {})
    for key in ("valid_loss", "unigram", "seconds"):
        if key in gpt:
            out[f"char GPT ({gpt['source']}): {key}"] = gpt[key]
    for temperature, share in records.get("char_gpt_real_word_share", {}).items():
        out[f"char GPT real-word share at T={temperature}"] = share
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once")
    parser.add_argument("--one", type=int, nargs=2, metavar=("SEED", "THREADS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_one(*args.one, Path(tmp))))
        return 0

    def spawn(job):
        seed, threads = job
        done = subprocess.run([sys.executable, __file__, "--one", str(seed), str(threads)],
                              capture_output=True, text=True, check=False)
        lines = done.stdout.strip().splitlines()
        if done.returncode or not lines:
            return {"seed": seed, "threads": threads, "seconds": 0.0, "records": {},
                    "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        return json.loads(lines[-1])

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    jobs = [(s, t) for t in args.threads for s in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(spawn, jobs))
    for run in runs:
        status = "all conclusions held" if run["error"] is None else f"FAILED: {run['error']}"
        print(f"seed {run['seed']}, {run['threads']} threads: {run['seconds']:.0f} s, {status}")
    tables = [headline(run["records"]) for run in runs]
    keys = list(dict.fromkeys(k for t in tables for k in t))
    print(f"\n{'headline (over ' + str(len(runs)) + ' runs)':60s} spread (min .. max)")
    for key in keys:
        values = [t[key] for t in tables if key in t]
        if all(isinstance(v, (int, float)) for v in values):
            print(f"{key:60s} {min(values):.3f} .. {max(values):.3f}")
        else:
            print(f"{key:60s} {'  '.join(sorted(set(map(str, values))))}")
    failed = sum(run["error"] is not None for run in runs)
    print(f"\n{len(runs) - failed} of {len(runs)} runs held every conclusion")
    return 0


if __name__ == "__main__":
    sys.exit(main())
