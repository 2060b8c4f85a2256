"""Grading throughput: ``python -m autograder grade`` with 2 workers (sandbox on) against serial
``nbgrader autograde``, on N copies of assignment 01's solution, in the same process tree.

Prints both wall times, both score sums (each must be N x 18) and the ratio (goal: 3x on 2
cores). Both sides start from a generated assignment; nbgrader's side grades all students in
one command, as instructors run it. ``--isolation uid`` grades with the uid fallback (as in
Docker or on Gradescope) instead of bubblewrap, on a copy of the course only root may read.

    python benchmarks/grading_throughput.py [--copies N] [--workers W] [--isolation uid]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.authoring.course import COURSE, generate, source_notebook, working_course
from autograder.scoring.grade import grade

A = "01_language_models"


def serial_nbgrader(copies: int, tmp: Path) -> tuple[float, float]:
    work = working_course(A, tmp / "nbgrader", source_notebook(A).parents[2])
    generate(A, work)
    for i in range(copies):
        folder = work / "submitted" / f"student{i:03d}" / A
        folder.mkdir(parents=True)
        shutil.copy(source_notebook(A), folder / f"{A}.ipynb")
    start = time.perf_counter()  # nbgrader as instructors run it (not our quicker wrapper)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", A, "--force"],
                            cwd=work, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        total = sum(s.score for s in gb.assignment_submissions(A))
    return seconds, total


def ours(copies: int, workers: int, tmp: Path, isolation: str) -> tuple[float, float]:
    subs = tmp / "subs"
    for i in range(copies):
        (subs / f"student{i:03d}").mkdir(parents=True)
        shutil.copy(source_notebook(A), subs / f"student{i:03d}" / f"{A}.ipynb")
    course = COURSE
    chosen = None
    if isolation == "uid":
        from autograder.isolation.kinds import UID, Isolation

        chosen = Isolation(UID, "asked for by --isolation uid")
        course = tmp / "course"
        shutil.copytree(COURSE, course)
        course.chmod(0o700)
    start = time.perf_counter()
    rows = grade(A, subs, tmp / "ours", course, workers=workers, isolation=chosen,
                 log=lambda *a: None)
    return time.perf_counter() - start, sum(r["score"] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--isolation", choices=("bubblewrap", "uid"), default="bubblewrap")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ref_s, ref_total = serial_nbgrader(args.copies, tmp)
        our_s, our_total = ours(args.copies, args.workers, tmp, args.isolation)
    print(f"{args.copies} copies of {A}'s solution, {multiprocessing.cpu_count()} CPU(s)")
    print(f"serial nbgrader autograde: {ref_s:7.1f} s  (score sum {ref_total:g})")
    print(f"autograder, {args.workers} workers:    {our_s:7.1f} s  (score sum {our_total:g}, "
          f"{args.isolation}; includes generate_assignment)")
    print(f"speed-up: {ref_s / our_s:.2f}x (goal: >= 3x)")


if __name__ == "__main__":
    main()
