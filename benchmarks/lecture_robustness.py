"""Do the lectures' headline results hold for every seed and thread count? (printed, never asserted)

A headline sitting on an edge (a result that flips with the seed, or with the floating-point
rounding that the number of torch threads changes) fails on somebody's machine. For each
registered experiment this runs the FAST-mode setup the lecture runs, through the same library
function the notebook calls, for every seed and torch thread count, and prints per run the numbers
and the quantities the notebook asserts on, then the worst case of each against its threshold.

    python benchmarks/lecture_robustness.py [--experiments 04_attention] [--seeds 0 1 2 3 4]
                                            [--threads 1 2 4] [--jobs 1] [--steps-scale 1.0]

``--steps-scale 0.5`` trains for half the lecture's steps: how far the setup is from the edge
where its result stops holding (a setup whose result survives half the training is not on it).

Add a lecture by adding an entry to ``EXPERIMENTS``: a run function ((seed, steps_scale) -> named
numbers) and the checks its notebook asserts. Seconds depend on the machine's load; compare them
only within one run of this script.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import torch

from seqlab.experiments import LENGTH_CHECKS
from seqlab.results import Check


@dataclass(frozen=True)
class Experiment:
    run: object  # (seed, steps_scale) -> named numbers (module level, so jobs can pickle it)
    checks: tuple[Check, ...]
    about: str


# ---------------------------------------------------------------------- lecture 04
def attention_by_length(seed: int, steps_scale: float = 1.0) -> dict[str, float]:
    """Lecture 04's FAST-mode experiment: BLEU per source-length bucket with and without
    attention, and the drop from the shortest to the longest bucket."""
    from seqlab import experiments

    setup = dict(experiments.LENGTH_SETUPS["fast"])
    setup["steps"] = max(1, round(setup["steps"] * steps_scale))
    result = experiments.length_experiment(**setup, seed=seed, device=torch.device("cpu"),
                                           progress=False)
    return experiments.length_numbers(result)


EXPERIMENTS = {
    "04_attention": Experiment(
        run=attention_by_length,
        checks=LENGTH_CHECKS,  # the very checks lecture 04 asserts
        about="BLEU by source length (Bahdanau et al. 2015, Fig. 2): with attention it stays "
              "flat, without it the longest keep less than half the shortest's BLEU"),
}


# ---------------------------------------------------------------------- running and printing
def run_config(name: str, seed: int, threads: int, steps_scale: float = 1.0) -> dict:
    """One run of one experiment with ``threads`` torch threads (in a worker process)."""
    torch.set_num_threads(threads)
    start, cpu = time.perf_counter(), time.process_time()
    numbers = EXPERIMENTS[name].run(seed, steps_scale)
    return {"seed": seed, "threads": threads, "numbers": numbers,
            "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}


def print_table(name: str, runs: list[dict]) -> bool:
    """Print every run and the worst case of each check; return whether all checks held."""
    experiment = EXPERIMENTS[name]
    keys = list(runs[0]["numbers"])
    width = max(8, *(len(k) for k in keys))
    print(f"\n{name}: {experiment.about}")
    print(f"{'seed':>4} {'thr':>3} " + " ".join(f"{k:>{width}}" for k in keys)
          + f" {'ok':>3} {'wall s':>7} {'cpu s':>6}")
    for run in runs:
        values = run["numbers"]
        ok = all(check.holds(values[check.key]) for check in experiment.checks)
        print(f"{run['seed']:>4} {run['threads']:>3} "
              + " ".join(f"{values[k]:>{width}.{2 if abs(values[k]) < 1 else 1}f}"
                         for k in keys)
              + f" {'yes' if ok else 'NO':>3} {run['seconds']:>7.0f} {run['cpu']:>6.0f}")
    print("worst case over all runs:")
    all_hold = True
    for check in experiment.checks:
        worst = check.worst([run["numbers"][check.key] for run in runs])
        margin = abs(worst - check.threshold)
        holds = check.holds(worst)
        all_hold &= holds
        print(f"  {check.key:>{width}} worst {worst:6.2f} vs threshold {check.op} "
              f"{check.threshold:g}: {'holds' if holds else 'FAILS'}, margin {margin:.2f}")
    return all_hold


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS),
                        choices=list(EXPERIMENTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, each in its own process (default 1: timings "
                             "comparable)")
    parser.add_argument("--steps-scale", type=float, default=1.0,
                        help="train for this fraction of the lecture's steps (0.5: how far from "
                             "the edge)")
    args = parser.parse_args(argv)
    configs = [(name, seed, threads) for name in args.experiments for seed in args.seeds
               for threads in args.threads]
    context = multiprocessing.get_context("spawn")  # a fresh torch per worker, no forked threads
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        futures = [pool.submit(run_config, *config, args.steps_scale) for config in configs]
        results = []
        for (name, seed, threads), future in zip(configs, futures):
            results.append(future.result())
            print(f"done: {name} seed {seed} threads {threads}", file=sys.stderr, flush=True)
    if args.steps_scale != 1.0:
        print(f"training steps scaled by {args.steps_scale:g}")
    all_hold = True
    for name in args.experiments:
        all_hold &= print_table(name, [r for c, r in zip(configs, results) if c[0] == name])
    print("\nevery check held in every run" if all_hold else "\nSOME CHECK FAILED")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
