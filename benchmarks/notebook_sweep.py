"""Run one lecture notebook over seeds and torch thread counts (shared by the *_robustness.py
scripts that check a whole notebook's conclusions).

Each run executes the notebook in FAST mode in a fresh process through the course's own runner
(``seqlab.course.run_notebook``), with ``SEED = s`` added to its parameters cell and
``OMP_NUM_THREADS=n`` in the kernel's environment (torch's thread count; idle OpenMP threads
sleep, ``OMP_WAIT_POLICY=PASSIVE``, since runs share the cores). Every cell runs even
after a failed assertion, so one run reports every conclusion that did not hold (cell and line);
a cell that prints the sweep's own record, before there is one, is not a conclusion.

``--record lib/seqlab/data/measured`` also writes the sweep's record (``seqlab.measured``):
each claim and headline number in every run, which the lecture prints as their spread and
the library ships to students.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from seqlab.measured import SEEDS, THREADS, sweep_record, write
from seqlab.results import Check


def one_run(notebook: Path, seed: int, threads: int, out: Path, env=None) -> dict:
    """Execute ``notebook`` once with ``seqlab.course.run_notebook`` (``env`` added to its
    kernel's environment); return its records and what failed."""
    from seqlab.course import run_notebook, unexpected_errors

    seconds = run_notebook(notebook, out, timeout=3600, parameters=f"SEED = {seed}",
                           env={"OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE",
                                **(env or {})},
                           allow_errors=True)
    failures = unexpected_errors(out / notebook.name)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the kernel, once it has exited
    records = out / "results" / f"{notebook.stem}.json"
    return {"seed": seed, "threads": threads, "seconds": seconds,
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "error": " | ".join(failures)[:600] or None,
            "records": json.loads(records.read_text()) if records.exists() else {}}


def sweep(script: str, notebook: Path, headline, argv=None, description: str = ""
          ) -> list[dict] | None:
    """The command line of a robustness script: ``--seeds``, ``--threads``, ``--jobs``,
    ``--notebook``, ``--out``, ``--record``. Returns every run (printed as it finishes), or None
    when this process was one run (``--one``, what each worker is)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once")
    parser.add_argument("--notebook", type=Path, default=notebook)
    parser.add_argument("--out", type=Path, help="keep each run's records here")
    parser.add_argument("--record", type=Path, metavar="DIR",
                        help="write the sweep's record to DIR/<notebook>.sweep.json (the course "
                             "ships lib/seqlab/data/measured/; every seed 0-4 and 1, 2, 4 "
                             "threads, as the defaults run)")
    parser.add_argument("--one", type=int, nargs=2, metavar=("SEED", "THREADS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(one_run(args.notebook.resolve(), *args.one, Path(tmp))))
        return None

    def spawn(job):
        seed, threads = job
        done = subprocess.run([sys.executable, script, "--one", str(seed), str(threads),
                               "--notebook", str(args.notebook)],
                              capture_output=True, text=True, check=False)
        lines = done.stdout.strip().splitlines()
        if done.returncode or not lines:
            run = {"seed": seed, "threads": threads, "seconds": 0.0, "cpu_seconds": 0.0,
                   "records": {},
                   "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        else:
            run = json.loads(lines[-1])
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"seed{seed}_threads{threads}.json").write_text(json.dumps(run))
        status = "all conclusions held" if run["error"] is None else f"FAILED: {run['error']}"
        print(f"seed {seed}, {threads} threads: {run['seconds']:.0f} s wall, "
              f"{run['cpu_seconds']:.0f} s CPU, {status}", flush=True)
        return run

    if args.record and (tuple(args.seeds), tuple(args.threads)) != (SEEDS, THREADS):
        parser.error(f"--record writes the sweep the course ships: seeds {SEEDS}, threads "
                     f"{THREADS}, the defaults")
    jobs = [(s, t) for t in args.threads for s in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(spawn, jobs))
    if args.record:
        record = sweep_record(args.notebook.stem, runs, headline,
                              f"python benchmarks/{Path(script).name} --record")
        print(f"sweep record written to {write(record, args.record)}")
    return runs


def print_claims(runs: list[dict]) -> None:
    """Every ``seqlab.claim`` the notebook made, with its threshold as the notebook states it:
    the spread of its value over the runs, the run nearest to failing, as a margin and, for a
    nonzero threshold, as a ratio (the headroom of ``< 1e-10`` is in the ratio), and in how
    many of the runs that made it the claim held (a claim under ``if SEED == 0`` is made in
    fewer). Sorted by name, as the results file stores them."""
    claims = {}
    for run in runs:
        for name, made in run["records"].get("claims", {}).items():
            claims.setdefault(name, []).append(made)
    if not claims:
        return
    checks = {name: Check(name, made[0]["op"], made[0]["threshold"])
              for name, made in claims.items()}
    width = max([50, *(len(str(c)) for c in checks.values())])
    print(f"\n{'claim (threshold from the notebook)':{width}s} {'min':>10s} {'max':>10s} "
          f"{'margin':>10s} {'worst/thr':>10s}  held")
    for name, made in claims.items():
        check, values = checks[name], [float(m["value"]) for m in made]  # "nan" is stored
        worst = check.worst(values)
        margin = worst - check.threshold if check.op in (">", ">=") else check.threshold - worst
        ratio = f"{worst / check.threshold:10.3g}" if check.threshold else f"{'':10s}"
        held = sum(check.holds(v) for v in values)
        made = "" if len(values) == len(runs) else f" (made in {len(values)} of {len(runs)} runs)"
        print(f"{str(check):{width}s} {min(values):10.4g} {max(values):10.4g} {margin:10.4g} "
              f"{ratio}  {held}/{len(values)}{made}")


def print_spread(runs: list[dict], headline) -> None:
    """Each headline number's spread over the runs, every claim's margin, then how many runs
    held everything."""
    tables = [headline(run["records"]) for run in runs]
    keys = list(dict.fromkeys(k for t in tables for k in t))
    width = max([60, *map(len, keys)])
    print(f"\n{'headline (over ' + str(len(runs)) + ' runs)':{width}s} spread (min .. max)")
    for key in keys:
        values = [t[key] for t in tables if key in t]
        if all(isinstance(v, (int, float)) for v in values):
            print(f"{key:{width}s} {min(values):.3f} .. {max(values):.3f}")
        else:
            print(f"{key:{width}s} {'  '.join(sorted(set(map(str, values))))}")
    print_claims(runs)
    print_held(runs)


def print_held(runs: list[dict]) -> None:
    failed = sum(run["error"] is not None for run in runs)
    print(f"\n{len(runs) - failed} of {len(runs)} runs held every conclusion")


def main(script: str, notebook: Path, headline, description: str) -> int:
    """A robustness script's whole command line: the sweep, then each headline's spread."""
    runs = sweep(script, notebook, headline, description=description.splitlines()[0])
    if runs is not None:
        print_spread(runs, headline)
    return 0
