"""Grade every submission of an assignment; every submission ends as exactly one row.

Submissions are graded concurrently by a pool of worker processes. Each worker starts one
sandbox per submission for the student's code and runs the hidden tests itself (see execute.py);
workers never run student code, and only this process writes grades: grades.csv (rewritten
atomically after every student, so an interrupted run keeps what it has), feedback/<student>/,
the autograded notebook for formgrader, and nbgrader's gradebook (so ``nbgrader export`` agrees).
"""

from __future__ import annotations

import csv
import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat

from . import gradebook
from .course import COURSE, check_assignment, generate, source_notebook, working_course
from .feedback import write_feedback
from .late import LatePolicy, load_timestamps
from .normalize import Step, master_step, plan, read_notebook, withheld
from .sandbox import Limits, Sandbox, sandbox_problem
from .submissions import collect

COLUMNS = ("student_id", "assignment", "score", "max_score", "status", "message")

_sandbox: Sandbox | None = None  # one per worker process


def _start_worker(support: str, limits: Limits, unsafe: bool, withhold: tuple[str, ...]) -> None:
    global _sandbox
    _sandbox = Sandbox(Path(support), limits, unsafe, write=False, withhold=withhold)


def _grade_one(steps: list[Step], name: str, scratch: str) -> dict:
    from .execute import Grading

    try:
        return Grading(steps, _sandbox, name, Path(scratch)).run()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write_csv(path: Path, rows: list[dict]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".grades", suffix=".csv")
    with os.fdopen(fd, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def _graded_notebook(steps: list[Step], outputs: list[dict], release: dict):
    """The notebook as graded, for formgrader: test cells show the release version (no hidden
    tests), so even nbgrader's own feedback cannot leak them."""
    public = {c["metadata"].get("nbgrader", {}).get("grade_id"): c["source"]
              for c in release["cells"]}
    nb = nbformat.v4.new_notebook(metadata={k: v for k, v in release["metadata"].items()
                                            if k in ("kernelspec", "language_info")})
    for step, out in zip(steps, outputs, strict=True):
        if step.kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(step.source, metadata=step.metadata))
            continue
        source = public.get(step.grade_id, step.source) if step.kind == "test" else step.source
        cell = nbformat.v4.new_code_cell(source, metadata=step.metadata)
        for stream in ("stdout", "stderr"):
            if out.get(stream):
                cell.outputs.append(nbformat.v4.new_output("stream", name=stream,
                                                           text=out[stream]))
        if out.get("error"):
            ename, evalue = out["error"]
            cell.outputs.append(nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                                       traceback=[f"{ename}: {evalue}"]))
        nb.cells.append(cell)
    return nb


class _Run:
    """Bookkeeping for one grading run: rows in submission order, written after each result."""

    def __init__(self, assignment, out, work, max_score, release, policy, timestamps, log):
        self.assignment, self.out, self.work = assignment, out, work
        self.max_score, self.release, self.policy = max_score, release, policy
        self.timestamps, self.log = timestamps, log
        self.rows: dict[int, dict] = {}

    def row(self, student: str, **fields) -> dict:
        return {"student_id": student, "assignment": self.assignment, "score": 0.0,
                "max_score": self.max_score, "status": "graded", "message": "", **fields}

    def finish(self, order: int, sub, student: str, steps, result: dict | None,
               row: dict, seconds: float) -> None:
        tests = result["tests"] if result else []
        if result:
            raw = sum(t["points"] for t in tests)
            when = self.timestamps.get(student, sub.timestamp)
            off, late = self.policy.penalty(self.assignment, when, raw, self.max_score)
            message = " ".join(m for m in (result["message"], late) if m)
            row.update(score=round(max(0.0, raw - off), 6), status=result["status"],
                       message=message)
            try:
                self._record(sub, student, steps, result, when, off)
            except Exception as err:  # keep the row; say the gradebook copy is missing
                row.update(status="error", message=f"{message} (not recorded in the gradebook: "
                           f"{type(err).__name__}: {str(err)[:200]}; please report)".strip())
        self.rows[order] = row
        write_feedback(self.out / "feedback" / student, row, tests)
        _write_csv(self.out / "grades.csv", [self.rows[k] for k in sorted(self.rows)])
        self.log(f"[{seconds:6.1f} s] {student}: {row['score']:g}/{row['max_score']:g} "
                 f"{row['status']} {row['message']}")

    def _record(self, sub, student, steps, result, when, off) -> None:
        name = f"{self.assignment}.ipynb"
        for stage in ("submitted", "autograded"):
            folder = self.work / stage / student / self.assignment
            folder.mkdir(parents=True, exist_ok=True)
            if when is not None:
                (folder / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
        shutil.copyfile(sub.notebook, self.work / "submitted" / student / self.assignment / name)
        nbformat.write(_graded_notebook(steps, result["outputs"], self.release),
                       self.work / "autograded" / student / self.assignment / name)
        gradebook.record(self.work, self.assignment, self.assignment, student, result["tests"],
                         when, off, self.policy.due.get(self.assignment))


def grade(assignment: str, submissions: Path, out: Path, course: Path = COURSE,
          limits: Limits | None = None, workers: int | None = None, unsafe: bool = False,
          policy: LatePolicy | None = None, timestamps: Path | None = None,
          log=print) -> list[dict]:
    """Grade all submissions of ``assignment``; write ``out/grades.csv`` and ``out/feedback/``."""
    check_assignment(assignment, course)
    limits = limits or Limits()
    workers = (os.cpu_count() or 1) if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    problem = "" if unsafe else sandbox_problem()
    if problem:
        raise RuntimeError(f"cannot sandbox student code: {problem}. Grading without a sandbox "
                           "lets any submission read the hidden tests and rewrite grades; pass "
                           "--unsafe-no-sandbox only if you trust every submission")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = working_course(assignment, out / "course", course)
    generate(assignment, work)
    master = read_notebook(source_notebook(assignment, course))
    release = read_notebook(work / "release" / assignment / f"{assignment}.ipynb")
    max_score = sum(s.points for s in map(master_step, master["cells"]) if s.kind == "test")
    run = _Run(assignment, out, work, max_score, release, policy or LatePolicy(),
               load_timestamps(timestamps), log)
    sandbox = Sandbox(out / "sandbox", limits, unsafe, withhold=withheld(master))
    log(f"grading {assignment} with {workers} worker(s); {sandbox.limits_in_force}")

    jobs, seen = [], set()
    for order, sub in enumerate(collect(Path(submissions), assignment, out / "unpacked")):
        student, n = sub.student_id, 2
        while student in seen:  # two folders that sanitise to the same id
            student, n = f"{sub.student_id}-{n}", n + 1
        seen.add(student)
        problem = sub.problem
        if not problem:
            try:
                steps = plan(master, read_notebook(sub.notebook))
            except ValueError as err:
                problem = str(err)
        if problem:
            run.finish(order, sub, student, None, None,
                       run.row(student, status="ungradable", message=problem), 0.0)
        else:
            jobs.append((order, sub, student, steps))
    if not jobs:
        _write_csv(out / "grades.csv", [run.rows[k] for k in sorted(run.rows)])
        return [run.rows[k] for k in sorted(run.rows)]

    context = multiprocessing.get_context("spawn")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context,
                             initializer=_start_worker,
                             initargs=(str(sandbox.support), limits, unsafe,
                                       sandbox.withheld)) as pool:
        started = time.perf_counter()
        futures = {pool.submit(_grade_one, steps, f"{os.getpid()}-{order}",
                               str(out / "scratch" / student)): (order, sub, student, steps)
                   for order, sub, student, steps in jobs}
        for future in as_completed(futures):
            order, sub, student, steps = futures[future]
            try:
                result, row = future.result(), run.row(student)
            except Exception as err:  # a grader failure on one student must not stop the rest
                result, row = None, run.row(student, status="error", message=(
                    f"grading failed ({type(err).__name__}: {str(err)[:200]}); please report"))
            run.finish(order, sub, student, steps, result, row, time.perf_counter() - started)
    shutil.rmtree(out / "scratch", ignore_errors=True)
    return [run.rows[k] for k in sorted(run.rows)]
