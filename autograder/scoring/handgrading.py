"""One student's score from their cells, whoever decided each: the autograder or a grader.

Every cell counts as nbgrader counts it: its manual score if a grader gave one, else its
autograde, plus any extra credit; the late penalty comes off the total. A row of grades.csv
shows the parts (``auto_score``, ``manual_score``, ``needs_manual``: answers still to grade)
and its ``score`` only once nothing is pending; until then its status says so. ``sync`` brings
what graders entered in formgrader into grades.csv and the feedback.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import gradebook
from .results import Result, Status


def cells_of(result: Result) -> dict[str, dict]:
    """A graded result's cells as the gradebook will hold them, before any grader's work."""
    cells = {t["test"]: {"auto": t["points"], "manual": None, "extra": 0.0,
                         "needs_manual": False, "comment": "", "max": t["max_points"]}
             for t in result["tests"]}
    for m in result.get("manual", []):
        cells[m["cell"]] = {"auto": 0.0 if m["blank"] else None, "manual": None, "extra": 0.0,
                            "needs_manual": not m["blank"],
                            "comment": "No response." if m["blank"] else "",
                            "max": m["max_points"]}
    return cells


def totals(cells: dict[str, dict]) -> tuple[float, float, int, float]:
    """(autograded points, points decided by hand incl. extra credit, answers pending, the
    total as nbgrader counts it)."""
    auto = sum(c["auto"] or 0.0 for c in cells.values())
    by_hand = sum(c["manual"] for c in cells.values() if c["manual"] is not None) + \
        sum(c["extra"] or 0.0 for c in cells.values())
    pending = sum(1 for c in cells.values() if c["needs_manual"])
    total = sum((c["manual"] if c["manual"] is not None else c["auto"] or 0.0) +
                (c["extra"] or 0.0) for c in cells.values())
    return auto, by_hand, pending, total


def apply(row: dict, cells: dict[str, dict], off: float) -> dict:
    """``row`` with the score columns of ``cells`` (``off``: the late penalty in points)."""
    auto, by_hand, pending, total = totals(cells)
    row.update(auto_score=round(auto, 6), manual_score=round(by_hand, 6), needs_manual=pending,
               score=round(max(0.0, total - off), 6) if not pending else "")
    if row["status"] in (Status.GRADED, Status.NEEDS_MANUAL):
        row["status"] = Status.NEEDS_MANUAL if pending else Status.GRADED
    return row


def sync(out: Path, policy, log=print) -> list[dict]:
    """Bring the manual grades, comments and extra credit graders entered in formgrader (the
    gradebook of ``out/course``) into ``out/grades.csv`` and each student's feedback; return
    the rows. Students with no gradebook entry (ungradable, or not yet graded) keep theirs.
    ``policy``: the late policy (None: each submission's penalty as recorded)."""
    from .feedback import write_feedback
    from .grade import read_grades, write_grades

    out = Path(out)
    assignment = json.loads((out / "manifest.json").read_text())["assignment"]
    book = gradebook.read_grades(out / "course", assignment, assignment)
    rows = read_grades(out / "grades.csv")
    pending = 0
    for row in rows:
        entry = book.get(row["student_id"])
        if entry is None:
            continue
        folder = out / "feedback" / row["student_id"]
        saved = json.loads((folder / "feedback.json").read_text())
        cells = entry["cells"]
        _, _, _, total = totals(cells)
        if policy is not None:
            off, late = policy.penalty(assignment, entry["timestamp"], total,
                                       float(row["max_score"]), row["student_id"])
        else:  # as recorded (merge: the shards applied the policy)
            off, late = min(entry["penalty"], total), saved.get("parts", {}).get("late", "")
        parts = saved.get("parts")
        if parts is not None:  # (feedback written before parts were kept: message as it is)
            parts = {**parts, "late": late}
            row["message"] = " ".join(m for m in parts.values() if m)
        apply(row, cells, off)
        pending += row["needs_manual"]
        write_feedback(folder, row, saved["tests"], saved.get("manual", []), parts, cells)
    write_grades(out / "grades.csv", rows)
    rows = [_typed(row) for row in rows]
    log(f"{len(book)} graded submission(s) in {out / 'grades.csv'}; {pending} answer(s) "
        "still to grade by hand" + (" (formgrader: make lab in the course folder)"
                                    if pending else ""))
    return rows


def _typed(row: dict) -> dict:
    """A row read from grades.csv with its numbers as numbers (a pending score stays "")."""
    typed = dict(row)
    for column in ("score", "max_score", "auto_score", "manual_score"):
        if typed.get(column) not in ("", None):
            typed[column] = float(typed[column])
    if typed.get("needs_manual") not in ("", None):
        typed["needs_manual"] = int(typed["needs_manual"])
    return typed
