"""Grades back to the LMS: each LMS's own import file, keyed by the id its export carried, and
each student's feedback bundled the way that LMS takes files back.

- **Canvas**: the gradebook import CSV (Student, ID, SIS User ID, SIS Login ID, Section, one
  column per assignment, a "Points Possible" row), keyed by the Canvas user id in the export's
  file names; and a "Re-Upload Submissions" zip, one feedback file per student named as Canvas
  named the file they submitted (user id and file id), which Canvas attaches as a comment.
- **Moodle**: its ids differ by use. The download names each folder "<Full Name>_<id>_
  assignsubmission_file_" with the assignment's participant id, which is not a user id. So, per
  assignment, the offline grading worksheet ("Participant <id>", grade, feedback comments) and
  the "Upload multiple feedback files in a zip" zip (one folder per student, named as the
  download named it) key by that id; the course gradebook's "Import > CSV file" keys by email,
  which only a roster gives (Moodle's participants export).
- **Brightspace (D2L)**: its grade import (OrgDefinedId and/or Username, "<Item> Points Grade",
  End-of-Line Indicator); its export names students by full name only, so a roster (its grade
  export) gives the ids.
- **plain**: one row per student and assignment, with names, emails and the feedback text.

A grade that is not final (written answers waiting for a grader, or a grading failure) is not
written as a grade: ``export`` refuses while any is left and says what to do; with
``allow_pending`` it is left empty, each LMS's "no grade", never the autograded part alone,
which would read as a final, lower grade. An ungradable submission scores 0, as grades.csv
says, and its feedback says why. Nobody is dropped: every student of every output is in every
file, or the file is not written and the log says why.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from ..intake.submissions import name_parts
from .results import Status
from .roster import Person, Roster, from_export, match, merged, name_students, normal, read_roster
from .spreadsheet import write_csv

FORMATS = ("canvas", "moodle", "d2l", "plain")
NAMES = {"canvas": "Canvas", "moodle": "Moodle", "d2l": "Brightspace", "plain": "a plain CSV",
         "blackboard": "Blackboard"}
CANVAS_PEOPLE = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "    Points Possible"  # as Canvas's own export writes that row
PARTICIPANT = "Participant "  # Moodle's "hiddenuser" string, before a participant id
WORKSHEET = ("Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
             "Grade can be changed", "Last modified (submission)", "Last modified (grade)",
             "Feedback comments")
PLAIN = ("student_id", "name", "first_name", "last_name", "email", "assignment", "score",
         "max_score", "status", "feedback")


@dataclass
class Output:
    """One grading output (the ``--out`` of ``grade`` or ``merge``), as ``export`` reads it."""

    folder: Path
    assignment: str
    max_score: float
    rows: list[dict]  # grades.csv, as written
    origin: dict[str, dict]  # student -> {"name", "lms", "exported"}: the manifest's "people"

    def lms(self, student: str) -> str:
        return self.origin.get(student, {}).get("lms", "")

    def parts(self, student: str) -> dict[str, str]:
        """The ids the LMS put in this student's file or folder name (``name_parts``)."""
        origin = self.origin.get(student, {})
        return name_parts(origin.get("lms", ""), origin.get("exported", ""))

    def feedback(self, student: str) -> dict:
        path = self.folder / "feedback" / student / "feedback.json"
        return json.loads(path.read_text()) if path.exists() else {}


def read_output(folder: Path) -> Output:
    """A grading output's grades.csv and manifest; ValueError when ``folder`` is none."""
    from .grade import read_grades

    folder = Path(folder)
    if not (folder / "manifest.json").exists() or not (folder / "grades.csv").exists():
        raise ValueError(f"{folder} is not a grading output (no grades.csv and manifest.json); "
                         "pass the --out folders of `python -m autograder grade` or `merge`")
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = read_grades(folder / "grades.csv")
    if not rows:
        raise ValueError(f"{folder / 'grades.csv'} holds no student")
    origin = manifest.get("people") or {  # outputs graded before the export's names were kept
        r["student_id"]: {"name": r["name"], "lms": "", "exported": ""} for r in rows}
    return Output(folder, manifest["assignment"], float(rows[0]["max_score"]), rows, origin)


def final(row: dict) -> bool:
    """Whether a row's score is a grade: nothing left to grade by hand, no grading failure."""
    return row["score"] != "" and row["status"] != Status.ERROR


def points(value) -> str:
    """A number as an LMS reads it: up to four decimals, no trailing zeros ("" stays "")."""
    if value in ("", None):
        return ""
    return f"{float(value):.4f}".rstrip("0").rstrip(".")


def grade_of(row: dict) -> str:
    return points(row["score"]) if final(row) else ""


def feedback_text(out: Output, row: dict) -> str:
    """The feedback as one paragraph of text, for an LMS's feedback comment column: the
    score, the row's message and each written answer's points and grader's comment."""
    score = grade_of(row) or "not final"
    parts = [f"{out.assignment}: {score} / {points(out.max_score)} ({row['status']})."]
    if row["message"]:
        parts.append(row["message"])
    for answer in out.feedback(row["student_id"]).get("manual", []):
        given = ("not graded yet" if answer.get("points") is None
                 else f"{points(answer['points'])} / {points(answer['max_points'])}")
        comment = f": {answer['comment']}" if answer.get("comment") else ""
        said = f"{answer['cell']}: {given}{comment}"
        parts.append(said if said.endswith((".", "!", "?")) else f"{said}.")
    return " ".join(parts)


@dataclass
class File:
    """One file ``export`` writes: a CSV (``columns``, ``rows``) or a zip (``members``)."""

    name: str
    how: str  # where it goes in the LMS
    columns: tuple = ()
    rows: list = field(default_factory=list)
    members: dict[str, bytes] | None = None


# ------------------------------------------------------------------------------ the students
def _people(out: Output, lms: str, roster: Roster | None) -> tuple[dict[str, Person],
                                                                    dict[str, str]]:
    """(student -> who they are, student -> why the roster has no entry for them). Two
    students never share an entry: both are unmatched then."""
    exported, people, unmatched, taken = {}, {}, {}, {}
    for row in out.rows:
        sid = row["student_id"]
        person = from_export(out.origin.get(sid, {}).get("name") or row["name"], out.lms(sid))
        if lms == "canvas" or out.lms(sid) == "canvas":
            person = replace(person, lms_id=out.parts(sid).get("uid") or sid)
        exported[sid] = people[sid] = person
        if roster is None:
            continue
        entry, why = match(roster, person, person.lms_id)
        if entry in taken:  # the other one is no more certain than this one
            other = taken[entry]
            unmatched[other] = f"the roster's {entry.name} matches {sid} too"
            people[other] = exported[other]
            entry, why = None, f"the roster's {entry.name} matches {other} too"
        if why:
            unmatched[sid] = why
        else:
            taken[entry] = sid
            people[sid] = merged(person, entry)
    return people, unmatched


def _check_layout(out: Output, lms: str) -> None:
    """The export ``out`` was graded from must be ``lms``'s: another LMS's ids mean nothing."""
    found = sorted({o["lms"] for o in out.origin.values() if o.get("lms")})
    if found and found != [lms]:
        raise ValueError(f"{out.folder} was graded from a {' and '.join(NAMES[f] for f in found)} "
                         f"export: its ids mean nothing to {NAMES[lms]}; pass --lms "
                         f"{found[0] if found[0] in FORMATS else 'plain'}")
    if not found and lms in ("canvas", "moodle") and not all(
            r["student_id"].isdigit() for r in out.rows):
        raise ValueError(f"{out.folder} was not graded from a {NAMES[lms]} export (its student "
                         f"ids are not {NAMES[lms]}'s); pass --lms plain")


def _title(assignment: str, roster: Roster | None, titles: dict[str, str]) -> str | None:
    """The LMS's name for ``assignment``: given with --title, else the roster's column of the
    same name (Canvas adds " (id)"), else None: the import creates it."""
    if assignment in titles:
        return titles[assignment]
    for column in roster.columns if roster else ():
        if normal(re.sub(r"\s*\(\d+\)$", "", column)) == normal(assignment):
            return column
    return None


# ------------------------------------------------------------------------------- the formats
def _canvas(outs, people, roster, titles) -> list[File]:
    columns = [*CANVAS_PEOPLE, *(_title(o.assignment, roster, titles) or o.assignment
                                 for o in outs)]
    possible = [POINTS_POSSIBLE, "", "", "", "", *(points(o.max_score) for o in outs)]
    lines: dict[str, list] = {}  # Canvas user id -> its row, across assignments
    files = []
    for i, out in enumerate(outs):
        members = {}
        for row in out.rows:
            sid, person = row["student_id"], people[out.assignment][row["student_id"]]
            line = lines.setdefault(person.lms_id, [
                person.name, person.lms_id, person.sis_user_id, person.sis_login_id,
                person.section, *[""] * len(outs)])
            line[len(CANVAS_PEOPLE) + i] = grade_of(row)
            parts, html = out.parts(sid), out.folder / "feedback" / sid / "feedback.html"
            if parts and html.exists():  # Canvas reads the user and file ids from the name
                members[f"{parts['name']}{parts['late']}_{parts['uid']}_{parts['sid']}_"
                        "feedback.html"] = html.read_bytes()
        files.append(File(f"canvas_feedback_{out.assignment}.zip",
                          "Canvas: the assignment in the Gradebook > Re-Upload Submissions "
                          f"({len(members)} of {len(out.rows)} students; each is a comment "
                          "on their submission)", members=members))
    return [File("canvas_grades.csv", "Canvas: Grades > Import", tuple(columns),
                 [possible, *lines.values()]), *files]


def _moodle(outs, people, unmatched, roster, titles) -> tuple[list[File], str]:
    """The files, and why the gradebook import was not written ("" if it was)."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    files = []
    for out in outs:
        rows, members = [], {}
        for row in out.rows:
            sid, person = row["student_id"], people[out.assignment][row["student_id"]]
            participant = out.parts(sid).get("uid") or sid
            rows.append([f"{PARTICIPANT}{participant}", person.name, person.email,
                         row["status"], grade_of(row), points(out.max_score), "Yes", "", now,
                         feedback_text(out, row)])
            folder = (out.origin.get(sid, {}).get("exported") if out.parts(sid) else None) or \
                f"{person.name.replace('_', ' ')}_{participant}_assignsubmission_file_"
            html = out.folder / "feedback" / sid / "feedback.html"
            if html.exists():
                members[f"{folder}/feedback.html"] = html.read_bytes()
        files += [File(f"moodle_worksheet_{out.assignment}.csv",
                       "Moodle: the assignment > View all submissions > Upload grading "
                       "worksheet (feedback type 'Offline grading worksheet')", WORKSHEET, rows),
                  File(f"moodle_feedback_{out.assignment}.zip",
                       "Moodle: the assignment > View all submissions > Upload multiple "
                       "feedback files in a zip (feedback type 'Feedback files')",
                       members=members)]
    if roster is None:
        return files, "no roster: pass Moodle's participants export as --roster for the " \
                      "gradebook import (it keys by email)"
    if unmatched or any(not p.email for ps in people.values() for p in ps.values()):
        who = sorted({f"{people[a][s].name} ({s}: {why})" for a, ws in unmatched.items()
                      for s, why in ws.items()} |
                     {f"{p.name} (no email)" for ps in people.values() for p in ps.values()
                      if not p.email and p.name})
        return files, (f"the gradebook import keys by email and {len(who)} student(s) have none "
                       f"from the roster: {', '.join(who)}; the grading worksheets cover them")
    columns = ["First name", "Last name", "Email address"]
    lines: dict[str, list] = {}
    for i, out in enumerate(outs):
        title = _title(out.assignment, roster, titles) or out.assignment
        columns += [title, f"{title} feedback"]
        for row in out.rows:
            person = people[out.assignment][row["student_id"]]
            line = lines.setdefault(person.email, [person.first, person.last, person.email,
                                                   *[""] * (2 * len(outs))])
            line[3 + 2 * i:5 + 2 * i] = [grade_of(row), feedback_text(out, row)]
    files.append(File("moodle_grades.csv", "Moodle: Grades > Import > CSV file; map from "
                      "'Email address' to 'Email address', each assignment column to its grade "
                      "item and '<assignment> feedback' to its feedback", tuple(columns),
                      list(lines.values())))
    return files, ""


def _d2l(outs, people, unmatched, roster, titles) -> list[File]:
    if roster is None:
        raise ValueError("Brightspace's import keys by OrgDefinedId or Username, which its "
                         "submission download does not carry: pass its grade export (Grades > "
                         "Export, key field 'Both') as --roster")
    if unmatched:
        who = sorted(f"{people[a][s].name} ({s}: {why})" for a, ws in unmatched.items()
                     for s, why in ws.items())
        raise ValueError(f"{len(who)} student(s) cannot be keyed for Brightspace: "
                         f"{', '.join(who)}; fix the roster (its grade export, all users)")
    keys = [k for k, f in (("OrgDefinedId", "lms_id"), ("Username", "username"))
            if any(getattr(p, f) for ps in people.values() for p in ps.values())]
    columns = list(keys)
    for out in outs:
        item = _title(out.assignment, roster, titles)
        columns.append(f"{item} Points Grade" if item else  # a new item, as its import makes one
                       f"{out.assignment} Points Grade <Numeric MaxPoints:"
                       f"{points(out.max_score)}>")
    lines: dict[tuple, list] = {}
    for i, out in enumerate(outs):
        for row in out.rows:
            person = people[out.assignment][row["student_id"]]
            ids = [f"#{person.lms_id}" if k == "OrgDefinedId" else f"#{person.username}"
                   for k in keys]
            line = lines.setdefault(tuple(ids), [*ids, *[""] * len(outs), "#"])
            line[len(keys) + i] = grade_of(row)
    return [File("d2l_grades.csv", "Brightspace: Grades > Enter Grades > Import",
                 (*columns, "End-of-Line Indicator"), list(lines.values()))]


def _plain(outs, people) -> list[File]:
    rows = [[row["student_id"], p.name, p.first, p.last, p.email, out.assignment,
             grade_of(row), points(out.max_score), row["status"], feedback_text(out, row)]
            for out in outs for row in out.rows
            for p in [people[out.assignment][row["student_id"]]]]
    return [File("grades_plain.csv", "any spreadsheet", PLAIN, rows)]


# ------------------------------------------------------------------------------- the command
def export(outputs: list[Path], lms: str, dest: Path, roster: Path | None = None,
           allow_pending: bool = False, titles: dict[str, str] | None = None,
           log=print) -> list[Path]:
    """Write ``lms``'s import files for the grading ``outputs`` (one per assignment: the
    course so far) into ``dest``; return their paths. ``roster``: the LMS's export of its
    people (names, emails, ids), whose names and emails also go into each output's gradebook;
    ``titles``: assignment -> the LMS's name for it. ValueError, before anything is written,
    when a grade is not final (unless ``allow_pending``) or a student cannot be keyed."""
    if lms not in FORMATS:
        raise ValueError(f"lms must be one of {', '.join(FORMATS)}, got {lms!r}")
    if not outputs:
        raise ValueError("export needs at least one grading output")
    outs = [read_output(o) for o in outputs]
    seen: dict[str, Path] = {}
    for out in outs:
        if out.assignment in seen:
            raise ValueError(f"{seen[out.assignment]} and {out.folder} both graded "
                             f"{out.assignment}; merge them first (python -m autograder merge)")
        seen[out.assignment] = out.folder
    book = read_roster(roster) if roster else None
    if book is not None and lms != "plain" and book.kind != lms:
        raise ValueError(f"roster {roster} is a {NAMES[book.kind]} export; --lms {lms} needs "
                         f"{NAMES[lms]}'s")
    if lms != "plain":
        for out in outs:
            _check_layout(out, lms)
    waiting = [f"{o.assignment}: {r['student_id']} ({_why_not_final(r)})"
               for o in outs for r in o.rows if not final(r)]
    if waiting and not allow_pending:
        named = "; ".join(waiting[:20]) + (f"; and {len(waiting) - 20} more"
                                           if len(waiting) > 20 else "")
        raise ValueError(
            f"{len(waiting)} grade(s) are not final: {named}. Grade the written "
            "answers in formgrader and run `python -m autograder sync OUT`, regrade a failure "
            "with `grade ... --only ID`, or pass --allow-pending to leave these grades empty")
    people, unmatched = {}, {}
    for out in outs:
        people[out.assignment], missing = _people(out, lms, book)
        if missing:
            unmatched[out.assignment] = missing
    note = ""
    if lms == "canvas":
        files = _canvas(outs, people, book, titles or {})
    elif lms == "moodle":
        files, note = _moodle(outs, people, unmatched, book, titles or {})
    elif lms == "d2l":
        files = _d2l(outs, people, unmatched, book, titles or {})
    else:
        files = _plain(outs, people)
    written = _write(files, Path(dest))
    for file, path in zip(files, written):
        log(f"{path}: {file.how}")
    if note:
        log(f"moodle_grades.csv not written: {note}")
    _summary(outs, lms, people, book, waiting, log)
    if book is not None:  # formgrader shows the roster's names and emails from now on
        for out in outs:
            if (out.folder / "course" / "gradebook.db").exists():
                name_students(out.folder / "course", people[out.assignment], overwrite=True)
        log(f"names and emails from {roster} recorded in each output's gradebook")
    return written


def _why_not_final(row: dict) -> str:
    if row["status"] == Status.ERROR:
        return "grading failed: regrade it"
    count = int(row.get("needs_manual") or 0)
    return f"{count} written answer(s) to grade" if count else "no score"


def _summary(outs, lms, people, book, waiting, log) -> None:
    ungradable = sum(r["status"] == Status.UNGRADABLE for o in outs for r in o.rows)
    log(f"{sum(len(o.rows) for o in outs)} grade(s) of {len(outs)} assignment(s); "
        f"{ungradable} ungradable (scored 0, the feedback says why)"
        + (f"; {len(waiting)} not final, left empty" if waiting else ""))
    above = [f"{o.assignment}: {r['student_id']}" for o in outs for r in o.rows
             if final(r) and float(r["score"]) > o.max_score]
    if above and lms in ("moodle", "d2l"):
        log(f"{len(above)} score(s) above the maximum (extra credit: {', '.join(above)}): "
            "Moodle's worksheet skips a grade above the assignment's maximum, Brightspace caps "
            "it unless the grade item may exceed it")
    if book is not None and book.kind == "canvas":
        ids = {p.lms_id for ps in people.values() for p in ps.values()}
        absent = [p for p in book.people if p.lms_id not in ids]
        if absent:
            log(f"{len(absent)} student(s) of the roster submitted nothing in these outputs; "
                "their grades in the LMS are left as they are")


def _write(files: list[File], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for file in files:
        path = dest / file.name
        if file.members is None:
            write_csv(path, file.columns, file.rows)
        else:  # whole or not at all, as write_csv writes
            fd, tmp = tempfile.mkstemp(dir=dest, prefix=f".{file.name}")
            with os.fdopen(fd, "wb") as handle, zipfile.ZipFile(handle, "w",
                                                               zipfile.ZIP_DEFLATED) as zf:
                for name, data in file.members.items():
                    zf.writestr(name, data)
            os.replace(tmp, path)
        paths.append(path)
    return paths
