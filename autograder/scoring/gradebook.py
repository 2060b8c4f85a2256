"""Record our results in nbgrader's gradebook, so formgrader (manual grading) and
``nbgrader export`` see exactly what grades.csv says."""

from __future__ import annotations

import warnings
from datetime import datetime
from pathlib import Path


def record_many(work: Path, assignment: str, notebook: str, entries: list[tuple],
                due: datetime | None) -> None:
    """Each ``(student, tests, timestamp, penalty)``'s autograded scores, penalty and time, as
    ``nbgrader autograde`` leaves them (an earlier submission replaced), in one gradebook
    session: opening the gradebook costs more than a student's rows."""
    from nbgrader.api import Gradebook

    with warnings.catch_warnings(), Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy autoflush notes from inside nbgrader
        if due is not None:
            gb.update_or_create_assignment(assignment, duedate=due.replace(tzinfo=None))
        for student, tests, timestamp, penalty in entries:
            _record(gb, assignment, notebook, student, tests, timestamp, penalty)
        gb.db.commit()


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


def _record(gb, assignment, notebook, student, tests, timestamp, penalty) -> None:
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
    gb.find_submission_notebook(notebook, assignment, student).late_submission_penalty = penalty
