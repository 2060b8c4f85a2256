"""Grade every submission with nbgrader; every submission ends as exactly one row.

Each student is autograded by a separate ``nbgrader autograde --student`` process, so a notebook
that crashes the kernel, loops or breaks nbgrader costs only its own row. grades.csv is rewritten
(atomically) after every student, so an interrupted run keeps the grades it has.
"""

from __future__ import annotations

import csv
import os
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat

from .course import COURSE, check_assignment, generate, nbgrader, source_notebook, working_course
from .feedback import test_results, write_feedback
from .submissions import collect

COLUMNS = ("student_id", "assignment", "score", "max_score", "status", "message")


def _max_score(assignment: str, course: Path) -> float:
    nb = nbformat.read(source_notebook(assignment, course), as_version=4)
    return float(sum(c.metadata.get("nbgrader", {}).get("points", 0) or 0 for c in nb.cells
                     if c.metadata.get("nbgrader", {}).get("grade")))


def _write_csv(path: Path, rows: list[dict]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".grades", suffix=".csv")
    with os.fdopen(fd, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def _prepare(notebook: Path, dest: Path) -> str:
    """Copy a readable notebook to nbgrader's submitted/ layout; return a problem or ''."""
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception as err:  # any parse failure means the file cannot be graded
        return f"unreadable notebook ({type(err).__name__}: {str(err)[:200]})"
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return ""


def _gradebook_scores(work: Path, assignment: str, student: str):
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        grades = {g.name: (float(g.score), float(g.max_score))
                  for nb in sub.notebooks for g in nb.grades}
        return float(sub.score), float(sub.max_score), grades


def grade(assignment: str, submissions: Path, out: Path, course: Path = COURSE,
          timeout_cell: int = 30, log=print) -> list[dict]:
    """Grade all submissions of ``assignment``; write ``out/grades.csv`` and ``out/feedback/``."""
    check_assignment(assignment, course)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    work = working_course(assignment, out / "course", course)
    generate(assignment, work)
    max_score = _max_score(assignment, course)
    rows: list[dict] = []
    seen: set[str] = set()
    for sub in collect(Path(submissions), assignment, out / "scratch"):
        student = sub.student_id
        n = 2
        while student in seen:  # two folders that sanitise to the same id
            student, n = f"{sub.student_id}-{n}", n + 1
        seen.add(student)
        start = time.perf_counter()
        row = {"student_id": student, "assignment": assignment, "score": 0.0,
               "max_score": max_score, "status": "graded", "message": ""}
        results: list[dict] = []
        try:
            problem = sub.problem or _prepare(
                sub.notebook, work / "submitted" / student / assignment / f"{assignment}.ipynb")
            if problem:
                row.update(status="ungradable", message=problem)
            else:
                row, results = _autograde(work, assignment, student, row, timeout_cell)
        except Exception as err:  # an autograder failure on one student must not stop the rest
            row.update(status="error", message=f"grading failed ({type(err).__name__}: "
                                               f"{str(err)[:200]}); please report this")
        rows.append(row)
        write_feedback(out / "feedback" / student, row, results)
        _write_csv(out / "grades.csv", rows)
        log(f"{student}: {row['score']:g}/{row['max_score']:g} {row['status']} "
            f"({time.perf_counter() - start:.1f} s) {row['message']}")
    if not rows:
        _write_csv(out / "grades.csv", rows)
    return rows


def _autograde(work: Path, assignment: str, student: str, row: dict, timeout_cell: int):
    try:
        result = nbgrader("autograde", assignment, "--student", student, "--force",
                          f"--Execute.timeout={timeout_cell}", cwd=work,
                          timeout=max(600, 40 * timeout_cell))
        log_tail = (result.stdout + result.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        return {**row, "status": "timeout",
                "message": "grading took too long (an infinite loop?); no test could finish"}, []
    scores = _gradebook_scores(work, assignment, student)
    if scores is None:
        return {**row, "status": "error",
                "message": "the notebook could not be graded: " + " ".join(log_tail.split())[-300:]
                }, []
    score, max_score, grades = scores
    autograded = work / "autograded" / student / assignment / f"{assignment}.ipynb"
    results = test_results(autograded, grades)
    status = "graded" if result.returncode == 0 else "error"
    message = "" if status == "graded" else "grading did not finish cleanly; tests that ran count"
    return {**row, "score": score, "max_score": max_score, "status": status,
            "message": message}, results
