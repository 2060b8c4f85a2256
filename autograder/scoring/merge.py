"""Join the outputs of sharded grading runs (``grade --shard I/N``) into one.

A course of several hundred students can be graded as an array job on a cluster: each task
grades its shard into its own folder, then ``python -m autograder merge`` joins grades.csv,
feedback, the nbgrader gradebooks and the similarity reports. It refuses shards from different
exports or assignments, a student graded twice, and names every student of the export that no
shard graded. Each shard compared its own students with the whole export (every shard unpacks
all of it), so pairs across shards are in the shards' reports already: merging them is joining
them, and the ``flags`` column stays as each shard wrote it, from the same pairs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path

from . import gradebook, similarity
from .grade import name_students_of, read_grades, write_grades
from .handgrading import sync


def _manifest(folder: Path) -> dict:
    path = Path(folder) / "manifest.json"
    if not path.exists():
        raise ValueError(f"{folder} is not a grading output (no manifest.json); pass the --out "
                         "folders of `python -m autograder grade`")
    return json.loads(path.read_text())


def _replay(source: Path, dest: Path, assignment: str, student: str,
            previous: Path | None) -> list[str]:
    """Copy one student's gradebook entry (scores, manual grades, comments, time, late
    penalty) and notebooks; manual grades ``previous`` holds are kept where they still hold."""
    said = gradebook.copy_submission(source, dest, assignment, assignment, student, previous)
    for stage in ("submitted", "autograded"):
        if (source / stage / student).exists():
            shutil.copytree(source / stage / student, dest / stage / student, dirs_exist_ok=True)
    return said


def merge(outputs: list[Path], dest: Path, log=print) -> list[dict]:
    """Merge grading outputs into ``dest``; return the merged rows in export order."""
    if not outputs:
        raise ValueError("merge needs at least one grading output")
    manifests = [_manifest(o) for o in outputs]
    first = manifests[0]
    for folder, m in zip(outputs, manifests):
        if (m["assignment"], m["students"]) != (first["assignment"], first["students"]):
            raise ValueError(f"{folder} graded another assignment or another export than "
                             f"{outputs[0]}; merge only the shards of one run")
    owner: dict[str, Path] = {}
    rows: dict[str, dict] = {}
    for folder in outputs:
        for row in read_grades(Path(folder) / "grades.csv"):
            student = row["student_id"]
            if student in owner:
                raise ValueError(f"{student} was graded in both {owner[student]} and {folder}; "
                                 "shards must not overlap")
            owner[student], rows[student] = Path(folder), row
    missing = [s for s in first["students"] if s not in rows]
    if missing:
        raise ValueError(f"{len(missing)} student(s) of the export are in no shard: "
                         f"{', '.join(missing)}; grade the missing shard(s) first")
    dest = Path(dest).resolve()
    assignment = first["assignment"]
    staging = Path(tempfile.mkdtemp(prefix=".merge-", dir=dest.parent))
    try:
        base = Path(outputs[0]) / "course"
        shutil.copytree(base, staging / "course", ignore=shutil.ignore_patterns(
            "gradebook.db", "submitted", "autograded"))
        (staging / "course" / "gradebook.db").write_bytes((base / "gradebook.db").read_bytes())
        _reset_gradebook(staging / "course", assignment)
        ordered = [rows[s] for s in first["students"]]
        (staging / "course" / gradebook.DIGESTS).unlink(missing_ok=True)
        previous = dest / "course" if (dest / "course").exists() else None
        said = []
        for row in ordered:
            student = row["student_id"]
            said += _replay(owner[student] / "course", staging / "course", assignment, student,
                            previous)
            if (owner[student] / "feedback" / student).exists():
                shutil.copytree(owner[student] / "feedback" / student,
                                staging / "feedback" / student)
        write_grades(staging / "grades.csv", ordered)
        rank = {s: i for i, s in enumerate(first["students"])}
        matches = sorted((m for folder in outputs for m in similarity.read_report(folder)),
                         key=lambda m: rank[m.student_id])  # stable: each shard's order kept
        similarity.write_report(matches, out=staging)
        (staging / "manifest.json").write_text(json.dumps(
            {**first, "shard": None, "responsible": first["students"]}, indent=1))
        sync(staging, None, log=lambda *a: None)  # the manual grades kept, in the rows
        name_students_of(staging, log)
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for line in said:  # manual grades of an earlier merge kept or invalidated
        log(line)
    log(f"merged {len(outputs)} output(s): {len(ordered)} student(s) in {dest / 'grades.csv'}")
    return ordered


def _reset_gradebook(course: Path, assignment: str) -> None:
    """Keep the assignment and its tests; drop the copied shard's submissions."""
    from nbgrader.api import Gradebook

    with warnings.catch_warnings(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        warnings.simplefilter("ignore")
        for sub in list(gb.find_assignment(assignment).submissions):
            gb.remove_submission(assignment, sub.student.id)
