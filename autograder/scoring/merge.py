"""Join the outputs of sharded grading runs (``grade --shard I/N``) into one.

A course of several hundred students can be graded as an array job on a cluster: each task
grades its shard into its own folder, then ``python -m autograder merge`` joins grades.csv,
feedback, the nbgrader gradebooks and the similarity reports. It refuses shards from different
exports or assignments and a student graded twice. A shard whose run was killed (a task over its
time or memory, cancelled, or never started) costs only its students: they get a row with status
``ungraded`` that says which shard and how to resume it, every other row is written, and the
command exits non-zero. Each shard compared its own students with the whole export (every shard
unpacks all of it), so pairs across shards are in the shards' reports already: merging them is
joining them, and the ``flags`` column stays as each shard wrote it, from the same pairs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path

from . import gradebook, similarity
from .grade import in_shard, name_students_of, settled_rows, write_grades
from .handgrading import sync
from .results import Status


def _manifest(folder: Path) -> dict | None:
    """The grading run's manifest in ``folder``; None when no run got that far there (the
    folder is missing or its run stopped before it began: a task that never started)."""
    path = Path(folder) / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def _replay(source: Path, dest: Path, assignment: str, student: str,
            previous: Path | None) -> list[str]:
    """Copy one student's gradebook entry (scores, manual grades, comments, time, late
    penalty) and notebooks; manual grades ``previous`` holds are kept where they still hold."""
    if not (source / "gradebook.db").exists():
        return []  # a run stopped before it generated the assignment graded nobody gradable
    said = gradebook.copy_submission(source, dest, assignment, assignment, student, previous)
    for stage in ("submitted", "autograded"):
        if (source / stage / student).exists():
            shutil.copytree(source / stage / student, dest / stage / student, dirs_exist_ok=True)
    return said


def merge(outputs: list[Path], dest: Path, log=print, resume: str = "") -> list[dict]:
    """Merge grading outputs into ``dest``; return the merged rows in export order.

    Every student of the export gets one row. A student no output holds a final row for (its
    shard's run was killed, timed out or never started: see ``grade.settled_rows``) gets a row
    with status ``ungraded`` and no score, whose message names the shard and how to grade it
    (``resume``, e.g. the command that resubmits it; by default, the shard's grade command
    again, which resumes). Check ``ungraded(rows)`` before using the grades."""
    if not outputs:
        raise ValueError("merge needs at least one grading output")
    manifests = [(Path(o), _manifest(o)) for o in outputs]  # a folder named twice stays twice
    started = [(o, m) for o, m in manifests if m is not None]
    if not started:
        raise ValueError(f"none of {', '.join(map(str, outputs))} holds a grading run (no "
                         "manifest.json); pass the --out folders of `python -m autograder "
                         "grade`")
    first_folder, first = started[0]
    for folder, m in started:
        if (m["assignment"], m["students"]) != (first["assignment"], first["students"]):
            raise ValueError(f"{folder} graded another assignment or another export than "
                             f"{first_folder}; merge only the shards of one run")
    assignment = first["assignment"]
    owner: dict[str, Path] = {}
    rows: dict[str, dict] = {}
    for folder, _ in started:
        for row in settled_rows(folder, assignment):
            student = row["student_id"]
            if student in owner:
                raise ValueError(f"{student} was graded in both {owner[student]} and {folder}; "
                                 "shards must not overlap")
            owner[student], rows[student] = folder, row
    for student in first["students"]:
        if student not in rows:
            rows[student] = _ungraded(student, first, manifests, resume)
    # the course to start from: one whose run generated the assignment (nbgrader's release
    # and the gradebook's tests), which a task killed in its first seconds did not
    base = next((f / "course" for f, _ in started
                 if (f / "course" / "release" / assignment).is_dir()), None)
    if base is None:
        raise ValueError("no shard's run got as far as generating the assignment (every task "
                         "stopped in its first seconds): grade the shards again, then merge")
    dest = Path(dest).resolve()
    staging = Path(tempfile.mkdtemp(prefix=".merge-", dir=dest.parent))
    try:
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
            if student not in owner:
                continue  # no shard finished them: their row says so
            said += _replay(owner[student] / "course", staging / "course", assignment, student,
                            previous)
            if (owner[student] / "feedback" / student).exists():
                shutil.copytree(owner[student] / "feedback" / student,
                                staging / "feedback" / student)
        write_grades(staging / "grades.csv", ordered)
        rank = {s: i for i, s in enumerate(first["students"])}
        matches = sorted((m for folder, _ in started for m in similarity.read_report(folder)),
                         key=lambda m: rank[m.student_id])  # stable: each shard's order kept
        similarity.write_report(matches, out=staging)
        missing = ungraded(ordered)
        (staging / "manifest.json").write_text(json.dumps(
            {**first, "shard": None, "responsible": first["students"],
             "finished": not missing}, indent=1))
        sync(staging, None, log=lambda *a: None)  # the manual grades kept, in the rows
        name_students_of(staging, log)
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for line in said:  # manual grades of an earlier merge kept or invalidated
        log(line)
    log(f"merged {len(started)} output(s): {len(ordered)} student(s) in {dest / 'grades.csv'}")
    if missing:
        log(f"{len(missing)} student(s) UNGRADED, their rows say why and how to resume: "
            f"{', '.join(missing)}")
    return ordered


def ungraded(rows: list[dict]) -> list[str]:
    """The students of merged ``rows`` that no shard graded."""
    return [r["student_id"] for r in rows if r["status"] == Status.UNGRADED]


def _ungraded(student: str, manifest: dict, manifests: list[tuple], resume: str) -> dict:
    """The row of a student no output graded: which shard holds them, and how to grade it."""
    count = (manifest.get("shard") or [1, 1])[1]
    index = next(i for i in range(1, count + 1) if in_shard(student, (i, count)))
    folder = next((f for f, m in manifests if m and m.get("shard") == [index, count]), None)
    if folder is None:  # never started: the output named in its place, if the count fits
        folder = manifests[index - 1][0] if len(manifests) == count else None
    where = f"shard {index}/{count}" + (f" ({folder})" if folder else "")
    how = resume or "grade that shard again (the same grade command resumes it), then merge"
    return {"student_id": student, "name": manifest.get("names", {}).get(student, ""),
            "assignment": manifest["assignment"], "score": "",
            "max_score": manifest.get("max_score", ""), "status": Status.UNGRADED,
            "message": f"not graded: the run of {where} stopped before grading this student "
                       f"(its task was killed, ran out of time or memory, or never started); "
                       f"{how}", "flags": ""}


def _reset_gradebook(course: Path, assignment: str) -> None:
    """Keep the assignment and its tests; drop the copied shard's submissions."""
    from nbgrader.api import Gradebook

    with warnings.catch_warnings(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        warnings.simplefilter("ignore")
        for sub in list(gb.find_assignment(assignment).submissions):
            gb.remove_submission(assignment, sub.student.id)
