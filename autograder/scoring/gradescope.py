"""Gradescope: grade one submission in Gradescope's container, with the same sandbox
(``python -m autograder gradescope-run``, which the bundle's ``run_autograder`` calls; the
bundle itself is ``authoring/gradescope_bundle.py``). Gradescope's container has Docker's
default capabilities, where bubblewrap cannot start: grading then uses the uid fallback, for
which ``run_autograder`` first makes the hidden tests, the results and the submission root's
alone.

Gradescope grades one submission at a time, so its similarity report compares the answers with
the course library only, never with classmates (grade the class's export with ``grade`` for
that): in results.json's ``extra_data`` and the autograder's output, which students do not see.
Written answers (graded by hand) are left to Gradescope's own manual grading: results.json
scores the autograded cells and says which answers wait for a grader.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..course import COURSE, source_notebook
from ..intake.markers import has_visible_code
from ..intake.normalize import manual, master_step, plan, read_notebook
from ..intake.submissions import choose_notebook, student_files
from ..isolation.limits import Limits
from . import similarity
from .prepare import prepare_grading
from .results import gradescope_tests


def _results(score: float, output: str, tests: list[dict]) -> dict:
    return {"score": score, "output": output, "tests": tests, "visibility": "visible",
            "stdout_visibility": "hidden"}


def _library_matches(course: Path, assignment: str, steps) -> list[dict]:
    """The answers of one submission against the course library, printed for the instructor;
    a failure here is reported, and never costs the grade."""
    released = course / "release" / assignment / f"{assignment}.ipynb"
    try:
        found = similarity.library_only(
            answers_of_student=similarity.answers(steps),
            release=read_notebook(released) if released.exists() else None,
            solutions=similarity.solutions(read_notebook(source_notebook(assignment, course))))
    except Exception as err:
        print(f"similarity: not checked ({type(err).__name__}: {err})")
        return [{"error": f"{type(err).__name__}: {err}"}]
    for m in found:
        print(f"similarity: answer {m['cell']} is {m['similarity']:.0%} {m['match']}")
    return found


def run(assignment: str, submission: Path, results: Path, course: Path = COURSE,
        limits: Limits | None = None) -> dict:
    """Grade one Gradescope submission folder; always write ``results``, even on failure."""
    from .execute import grade_steps

    results = Path(results)
    results.parent.mkdir(parents=True, exist_ok=True)
    zero, by_hand = [], []  # every test at 0 (a results file even when grading fails)
    for step in map(master_step, read_notebook(source_notebook(assignment, course))["cells"]):
        if step.kind == "test":
            zero.append({"name": step.grade_id, "score": 0.0, "max_score": step.points,
                         "visibility": "visible" if has_visible_code(step.source) else "hidden"})
        elif manual(step):
            by_hand.append(f"{step.grade_id} ({step.points:g} points)")
    try:
        with prepare_grading(assignment, course, limits or Limits(),
                             private=(results.parent, Path(submission))) as prepared:
            chosen = choose_notebook("student", student_files(Path(submission)), assignment,
                                     Path(tempfile.mkdtemp()))
            steps, problem = None, chosen.problem
            if not problem:
                try:
                    steps = plan(prepared.master, read_notebook(chosen.notebook))
                except ValueError as err:  # unreadable, or over a submission's limits
                    problem = str(err)
            if problem:
                report = _results(0.0, problem, zero)
            else:
                result = grade_steps(steps, prepared.sandbox, f"gradescope-{os.getpid()}")
                tests = gradescope_tests(result, {t["name"]: t["visibility"] for t in zero})
                written = (f"\nGraded by hand on Gradescope: {', '.join(by_hand)}."
                           if by_hand else "")
                report = _results(sum(t["score"] for t in tests),
                                  f"Graded in isolation: {prepared.sandbox.limits_in_force}.\n"
                                  f"{result['status']}. {result['message']}".strip() + written,
                                  tests)
                report["extra_data"] = {"similarity": _library_matches(course, assignment,
                                                                       steps)}
    except Exception as err:  # never leave Gradescope without a results.json
        report = _results(0.0, f"grading failed ({type(err).__name__}: {err}); this is not "
                               "your fault, please tell your instructor", zero)
    tmp = results.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    os.replace(tmp, results)
    return report
