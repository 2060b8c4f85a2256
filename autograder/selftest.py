"""Prove an assignment gradable: the solution gets full marks, the untouched release gets 0 and
grades cleanly, and the release leaks nothing (``release`` refuses to write one that does)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from .course import COURSE, assignments, source_notebook
from .grade import grade
from .release import release


def selftest(assignment: str, course: Path = COURSE, log=print) -> list[str]:
    """Return the failures found (empty when the assignment is sound)."""
    failures = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        released = release(assignment, tmp / "release", course)  # raises on any leak
        subs = tmp / "submissions"
        for student, notebook in [("solution", source_notebook(assignment, course)),
                                  ("untouched", released / f"{assignment}.ipynb")]:
            (subs / student).mkdir(parents=True)
            shutil.copy(notebook, subs / student / f"{assignment}.ipynb")
        rows = {r["student_id"]: r for r in grade(assignment, subs, tmp / "out", course,
                                                  log=lambda *a: None)}
    solution, untouched = rows["solution"], rows["untouched"]
    if solution["status"] != "graded" or solution["score"] != solution["max_score"]:
        failures.append(f"{assignment}: the solution scored {solution['score']:g}/"
                        f"{solution['max_score']:g} ({solution['status']} {solution['message']})")
    if untouched["status"] != "graded" or untouched["score"] != 0:
        failures.append(f"{assignment}: the untouched release scored {untouched['score']:g} "
                        f"({untouched['status']} {untouched['message']})")
    log(f"selftest {assignment}: {'ok' if not failures else 'FAILED'} "
        f"(solution {solution['score']:g}/{solution['max_score']:g}, untouched "
        f"{untouched['score']:g}) in {time.perf_counter() - start:.1f} s")
    return failures


def selftest_all(names: list[str] | None = None, course: Path = COURSE, log=print) -> list[str]:
    failures = []
    for name in names or assignments(course):
        failures += selftest(name, course, log)
    return failures
