"""Our results in nbgrader's gradebook, so formgrader (manual grading) and ``nbgrader export``
see what grades.csv says, and what graders decide in formgrader comes back (``read_grades``).

nbgrader's semantics hold: a test cell's autograde is its points or 0; an answer graded by
hand is 0 at once, with the comment "No response.", when left blank, else waits for a grader;
a manual score overrides the autograde of its cell, and extra credit adds. On top, a regrade
keeps every manual score and comment whose reason still holds: a written answer's when the
student's text is unchanged (its digest, kept in ``manual.json`` beside the gradebook), a test
cell's override when its autograde is unchanged. ``record_many`` says which it kept and which
it invalidated.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from datetime import datetime, timezone
from pathlib import Path

DIGESTS = "manual.json"  # student -> hand-graded cell -> digest of the answer graded


def _gradebook(work: Path):
    from nbgrader.api import Gradebook

    return Gradebook(f"sqlite:///{Path(work) / 'gradebook.db'}")


def load_digests(work: Path) -> dict[str, dict[str, str]]:
    path = Path(work) / DIGESTS
    return json.loads(path.read_text()) if path.exists() else {}


def save_digests(work: Path, digests: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=work, prefix=f".{DIGESTS}")
    with os.fdopen(fd, "w") as handle:
        json.dump(digests, handle, indent=1, sort_keys=True)
    os.replace(tmp, Path(work) / DIGESTS)


def record(work: Path, assignment: str, notebook: str, student: str, tests: list[dict],
           timestamp: datetime | None, penalty: float, due: datetime | None,
           manual: list[dict] = ()) -> list[str]:
    """One student's autograded scores, penalty and time (see ``record_many``)."""
    return record_many(work, assignment, notebook,
                       [(student, tests, list(manual), timestamp, penalty)], due)


def record_many(work: Path, assignment: str, notebook: str, entries: list[tuple],
                due: datetime | None) -> list[str]:
    """For each ``(student, tests, manual, timestamp, penalty)``, in one gradebook session
    (opening the gradebook costs more than a student's rows): the student's autograded scores,
    hand-graded answers (``results.ManualAnswer``: blank ones 0 at once, the others pending),
    penalty and time, as ``nbgrader autograde`` leaves them, their earlier submission
    replaced, but its manual grades kept where they still hold. Returns one line per manual
    grade kept or invalidated."""
    digests = load_digests(work)
    said: list[str] = []
    with warnings.catch_warnings(), _gradebook(work) as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy autoflush notes from inside nbgrader
        if due is not None:
            gb.update_or_create_assignment(assignment, duedate=due.replace(tzinfo=None))
        for student, tests, manual, timestamp, penalty in entries:
            before = _manual_grades(gb, assignment, notebook, student)
            _record(gb, assignment, notebook, student, tests, manual, timestamp, penalty)
            said += _restore(gb, assignment, notebook, student, before, tests, manual,
                             digests.get(student, {}))
            digests[student] = {m["cell"]: m["digest"] for m in manual}
        gb.db.commit()
    save_digests(work, digests)
    return said


def _manual_grades(gb, assignment, notebook, student) -> dict[str, dict]:
    """What graders entered for a student's submission: cell -> {auto, manual, extra,
    comment}, for the cells they touched."""
    from nbgrader.api import MissingEntry

    try:
        submitted = gb.find_submission_notebook(notebook, assignment, student)
    except MissingEntry:
        return {}
    comments = {c.name: c.manual_comment for c in submitted.comments}
    found = {}
    for grade in submitted.grades:
        comment = comments.get(grade.name)
        if grade.manual_score is not None or grade.extra_credit or comment:
            found[grade.name] = {"auto": grade.auto_score, "manual": grade.manual_score,
                                 "extra": grade.extra_credit, "comment": comment}
    return found


def students(work: Path, assignment: str) -> set[str]:
    """The students with a submission of ``assignment`` in the gradebook of course ``work``."""
    from nbgrader.api import Gradebook, MissingEntry

    if not (Path(work) / "gradebook.db").exists():
        return set()
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        warnings.simplefilter("ignore")
        try:
            return {sub.student.id for sub in gb.find_assignment(assignment).submissions}
        except MissingEntry:
            return set()


def _record(gb, assignment, notebook, student, tests, manual, timestamp, penalty) -> None:
    from nbgrader.api import MissingEntry

    gb.update_or_create_student(student)
    try:
        gb.remove_submission(assignment, student)
    except MissingEntry:
        pass
    gb.add_submission(assignment, student,
                      timestamp=timestamp.replace(tzinfo=None) if timestamp else None)
    for test in tests:
        grade = gb.find_grade(test["test"], notebook, assignment, student)
        grade.auto_score = test["points"]
        grade.needs_manual_grade = False
    for answer in manual:
        grade = gb.find_grade(answer["cell"], notebook, assignment, student)
        grade.auto_score = 0.0 if answer["blank"] else None
        grade.needs_manual_grade = not answer["blank"]
        if answer["blank"]:
            gb.find_comment(answer["cell"], notebook, assignment, student).auto_comment = \
                "No response."
    gb.find_submission_notebook(notebook, assignment, student).late_submission_penalty = penalty


def _restore(gb, assignment, notebook, student, before, tests, manual, digests) -> list[str]:
    """Put back the manual grades of ``before`` whose reason holds; say what happened."""
    autograde = {t["test"]: t["points"] for t in tests}
    written = {m["cell"]: m for m in manual}
    said = []
    for cell, old in before.items():
        if cell in written:
            holds = not written[cell]["blank"] and digests.get(cell) == written[cell]["digest"]
            why = "the answer changed" if not holds else "the answer is unchanged"
        elif cell in autograde:
            holds = old["auto"] == autograde[cell]
            why = ("its autograde changed" if not holds else "its autograde is unchanged")
        else:
            continue
        if not holds:
            said.append(f"{student}: the manual grade of {cell} was invalidated ({why}); "
                        "grade it again in formgrader")
            continue
        grade = gb.find_grade(cell, notebook, assignment, student)
        grade.manual_score, grade.extra_credit = old["manual"], old["extra"]
        if old["manual"] is not None:
            grade.needs_manual_grade = False
        if old["comment"]:
            gb.find_comment(cell, notebook, assignment, student).manual_comment = old["comment"]
        said.append(f"{student}: kept the manual grade of {cell} ({why})")
    return said


def read_grades(work: Path, assignment: str, notebook: str) -> dict[str, dict]:
    """What the gradebook holds for each student, for grades.csv and the feedback: student ->
    {"cells": {cell: {auto, manual, extra, needs_manual, comment, max}}, "penalty": p,
    "timestamp": the submission's time (UTC) or None}."""
    from nbgrader.api import MissingEntry

    out = {}
    with warnings.catch_warnings(), _gradebook(work) as gb:
        warnings.simplefilter("ignore")
        try:
            submissions = list(gb.find_assignment(assignment).submissions)
        except MissingEntry:
            return {}
        for submission in submissions:
            try:
                nb = gb.find_submission_notebook(notebook, assignment, submission.student.id)
            except MissingEntry:
                continue
            comments = {c.name: c.manual_comment or c.auto_comment for c in nb.comments}
            stamp = submission.timestamp
            out[submission.student.id] = {
                "penalty": nb.late_submission_penalty or 0.0,
                "timestamp": stamp.replace(tzinfo=timezone.utc) if stamp else None,
                "cells": {g.name: {"auto": g.auto_score, "manual": g.manual_score,
                                   "extra": g.extra_credit or 0.0,
                                   "needs_manual": bool(g.needs_manual_grade),
                                   "comment": comments.get(g.name) or "",
                                   "max": g.max_score} for g in nb.grades}}
    return out


def copy_submission(source: Path, dest: Path, assignment: str, notebook: str, student: str,
                    previous: Path | None = None) -> list[str]:
    """Copy one student's submission from the gradebook in ``source`` to the one in ``dest``
    (``merge``): every grade, comment, extra credit, time and penalty as it is, and the digests
    of the answers graded. Where ``previous`` (the course a merge replaces) holds manual grades
    for this student that the copy lacks, they are kept while their reason holds, as a regrade
    keeps them. Returns what was kept or invalidated; [] when ``source`` has no submission of
    the student (ungradable)."""
    from nbgrader.api import MissingEntry

    with warnings.catch_warnings(), _gradebook(source) as gb:
        warnings.simplefilter("ignore")
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return []
        nb = gb.find_submission_notebook(notebook, assignment, student)
        grades = {g.name: (g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                  for g in nb.grades}
        comments = {c.name: (c.auto_comment, c.manual_comment) for c in nb.comments}
        timestamp, penalty = submission.timestamp, nb.late_submission_penalty
        due = gb.find_assignment(assignment).duedate
    digests = load_digests(dest)
    copied = load_digests(source).get(student, {})
    before, earlier = {}, {}
    if previous is not None and (Path(previous) / "gradebook.db").exists():
        with warnings.catch_warnings(), _gradebook(previous) as gb:
            warnings.simplefilter("ignore")
            before = _manual_grades(gb, assignment, notebook, student)
        earlier = load_digests(previous).get(student, {})
    said = []
    with warnings.catch_warnings(), _gradebook(dest) as gb:
        warnings.simplefilter("ignore")
        if due is not None:
            gb.update_or_create_assignment(assignment, duedate=due)
        gb.update_or_create_student(student)
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass
        gb.add_submission(assignment, student, timestamp=timestamp)
        for name, (auto, by_hand, extra, needs) in grades.items():
            grade = gb.find_grade(name, notebook, assignment, student)
            grade.auto_score, grade.manual_score = auto, by_hand
            grade.extra_credit, grade.needs_manual_grade = extra, needs
        for name, (auto, by_hand) in comments.items():
            comment = gb.find_comment(name, notebook, assignment, student)
            comment.auto_comment, comment.manual_comment = auto, by_hand
        gb.find_submission_notebook(notebook, assignment, student).late_submission_penalty = \
            penalty
        untouched = {cell: old for cell, old in before.items()
                     if grades.get(cell, (None, None, None, None))[1] is None}
        tests = [{"test": name, "points": auto} for name, (auto, *_) in grades.items()
                 if name not in copied]
        manual = [{"cell": cell, "blank": False, "digest": digest}
                  for cell, digest in copied.items()]
        said = _restore(gb, assignment, notebook, student, untouched, tests, manual, earlier)
        gb.db.commit()
    digests[student] = copied
    save_digests(dest, digests)
    return said
