"""Grading throughput: ``python -m autograder grade`` with 2 workers (sandbox on) against serial
``nbgrader autograde``, on N copies of assignment 01's solution, in the same process tree.

Prints both wall times, both score sums (each must be N x 18) and the ratio (goal: 3x on 2
cores). Both sides start from a generated assignment; nbgrader's side grades all students in
one command, as instructors run it. Then where one submission's time goes: starting its
sandbox anew against forking its runner from a worker's template, and grading its cells.
``--isolation uid`` grades with the uid fallback (as in Docker or on Gradescope) instead of
bubblewrap, on a copy of the course only root may read (the uid fallback forks only where
other users may read this Python: run it with one installed in /usr to see that).

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

from autograder.course import COURSE, generate, source_notebook, working_course
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
    modes = {}
    if isolation == "uid":  # the course and the withheld packages closed to others, meanwhile
        from autograder.isolation.exposure import hide_withheld, package_folders
        from autograder.isolation.kinds import UID, Isolation
        from autograder.isolation.limits import WITHHELD

        chosen = Isolation(UID, "asked for by --isolation uid")
        course = tmp / "course"
        shutil.copytree(COURSE, course)
        course.chmod(0o700)
        modes = {folder: folder.stat().st_mode for folder in package_folders(WITHHELD)}
        hide_withheld()
    try:
        start = time.perf_counter()
        rows = grade(A, subs, tmp / "ours", course, workers=workers, isolation=chosen,
                     log=lambda *a: None)
        return time.perf_counter() - start, sum(r["score"] for r in rows)
    finally:
        for folder, mode in modes.items():
            folder.chmod(mode)


def mean_seconds(fn, times: int = 5) -> float:
    start = time.perf_counter()
    for _ in range(times):
        fn()
    return (time.perf_counter() - start) / times


def starts(isolation: str, tmp: Path) -> None:
    """One submission's costs, in this process: a sandbox started anew (Python, IPython and
    torch imported) against a runner forked from the template, and grading the solution."""
    from autograder.intake.normalize import given_imports, plan, read_notebook
    from autograder.isolation.kinds import UID, Isolation, choose
    from autograder.isolation.sandbox import Limits, Sandbox, support_folder
    from autograder.isolation.session import Session
    from autograder.scoring.execute import grade_steps

    chosen = Isolation(UID, "asked for") if isolation == "uid" else choose()
    master = read_notebook(source_notebook(A))

    class Anew(Sandbox):
        forks = False

    made = {kind: kind(support_folder(chosen), Limits(), chosen,
                       preload=given_imports(master)) for kind in (Sandbox, Anew)}
    if not made[Sandbox].forks:
        print(f"(no template here: {made[Sandbox].starts})")
        return
    slot = iter(range(10**6))

    def ready(sandbox):
        Session(sandbox, sandbox.start(f"{os.getpid()}-{next(slot) % 2}")).close()

    template = mean_seconds(lambda: (made[Sandbox].close_template(), ready(made[Sandbox])), 2)
    forked, anew = mean_seconds(lambda: ready(made[Sandbox])), mean_seconds(lambda: ready(
        made[Anew]))
    steps = plan(master, master)
    graded = mean_seconds(lambda: grade_steps(steps, made[Sandbox], f"{os.getpid()}-0"))
    made[Sandbox].close_template()
    print(f"one submission ({chosen.kind}, mean of 5): a sandbox started anew {anew:.2f} s; "
          f"a runner forked from the template {forked:.3f} s ({anew / forked:.0f}x less; the "
          f"template itself {template - forked:.2f} s, once per worker); its start and "
          f"grading, forked: {graded:.2f} s")


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
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp).chmod(0o711)  # the uid fallback's scratch folders are inside
        starts(args.isolation, Path(tmp))


if __name__ == "__main__":
    main()
