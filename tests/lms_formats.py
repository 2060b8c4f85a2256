"""Readers of each LMS's grade import files and feedback bundles, written from the LMS's own
documentation and source, never from the grader's code: the other end of the round trips in
test_lms.py and test_class.py."""

import csv
import zipfile
from datetime import datetime


def read_csv(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def canvas_import(path) -> dict:
    """Canvas's gradebook import as its importer reads the file (canvas-lms,
    app/models/gradebook_importer.rb; the guide "How do I import grades in the Gradebook?",
    https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807):
    the header's first column holds "Student" and its second "ID", then optionally "SIS User
    ID" and "SIS Login ID", and the last student column "Section"; every later column is an
    assignment, "Title (id)" matched by its id, else by title, else created; a row whose first
    cell contains "Points Possible" sets each assignment's points; every other row is a
    student, found by the Canvas user id in "ID" (then the SIS ids, then the name); an empty
    cell or "-" is no score. Returns {"columns", "points", "grades": {user id: {column: cell}},
    "rows": {user id: row}}."""
    header, *rows = read_csv(path)
    assert "Student" in header[0] and "ID" in header[1]
    assert header[2:5] == ["SIS User ID", "SIS Login ID", "Section"]
    assignments = header[5:]
    possible = [r for r in rows if "Points Possible" in r[0]]
    assert len(possible) == 1
    students = [r for r in rows if "Points Possible" not in r[0]]
    assert all(len(r) == len(header) for r in rows)
    return {"columns": assignments, "points": dict(zip(assignments, possible[0][5:])),
            "grades": {r[1]: dict(zip(assignments, r[5:])) for r in students},
            "rows": {r[1]: r for r in students}}


def canvas_comments(path) -> dict:
    """What Canvas's "Re-Upload Submissions" does with a zip (canvas-lms,
    app/models/assignment.rb, generate_comments_from_files and
    infer_comment_context_from_filename; commit 0d34bd4 "require :manage_grades to Re-Upload
    Submissions"): each file's base name is split on "_" and its first two all-digit parts are
    the user id and the id of a file of that user's submission (the naming "last_name_first_
    name_user_id_attachment_id" it downloads); a file whose ids match nothing is ignored; the
    rest become one comment per user with the files attached. Returns {user id: [file id]}."""
    found: dict[str, list[str]] = {}
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            user, attachment = [p for p in name.rsplit("/", 1)[-1].split("_") if p.isdigit()][:2]
            found.setdefault(user, []).append(attachment)
            assert zf.read(name).startswith(b"<!doctype html>")
    return found


def moodle_worksheet(path) -> dict:
    """Moodle's "Upload grading worksheet" (feedback type "Offline grading worksheet",
    https://docs.moodle.org/en/Assignment_settings) as mod/assign/feedback/offline reads it
    (importgradeslib.php, locallib.php process_import_grades): columns found by their names,
    "Identifier" (get_string('recordid', 'assign')), "Grade" and "Last modified (grade)" are
    required, each enabled feedback plugin's field by its name ("Feedback comments"); the
    participant id is what follows "Participant " (get_string('hiddenuser', 'assign')); an
    empty grade is skipped; a grade changed in Moodle more than 60 s after "Last modified
    (grade)" (read by strtotime) is not overwritten. Returns {participant id: (grade,
    feedback)}."""
    header, *rows = read_csv(path)
    at = {name: header.index(name) for name in ("Identifier", "Grade", "Last modified (grade)",
                                                "Feedback comments")}
    found = {}
    for row in rows:
        assert row[at["Identifier"]].startswith("Participant ")
        datetime.fromisoformat(row[at["Last modified (grade)"]])  # a time strtotime reads
        found[row[at["Identifier"]][len("Participant "):]] = (row[at["Grade"]],
                                                              row[at["Feedback comments"]])
    return found


def moodle_feedback_zip(path) -> dict:
    """Moodle's "Upload multiple feedback files in a zip" (feedback type "Feedback files") as
    mod/assign/feedback/file/importziplib.php reads it: each part of a file's path is split on
    "_" into at most 5 pieces, full name, participant id (numeric, the assignment's
    get_uniqueid_for_user: what its download put in the folder name, mod/assign/locallib.php
    download_submissions), plugin type and plugin name; the first part that fits names the
    student, and the rest is the file's name. Returns {participant id: [file names]}."""
    found: dict[str, list[str]] = {}
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            for i, part in enumerate(parts):
                info = part.split("_", 4)
                if len(info) >= 4 and info[1].isdigit() and info[2] == "assignsubmission":
                    rest = [info[4]] if len(info) == 5 and info[4] else []
                    found.setdefault(info[1], []).append("/".join(rest + parts[i + 1:]))
                    break
    return found


def moodle_gradebook(path) -> dict:
    """Moodle's gradebook "Import > CSV file" (https://docs.moodle.org/en/Import_grades) as
    grade/import/csv/classes/load_data.php reads it: the teacher maps one column to a user
    field (user id, username, ID number or email address) and the others to grade items or
    their feedback; an empty cell or "-" is no grade; one row whose user is not found aborts
    the whole import. Mapped here as the log says: "Email address" to the email, each
    assignment column to its item, "<assignment> feedback" to its feedback. Returns
    {email: {column: cell}}."""
    header, *rows = read_csv(path)
    key = header.index("Email address")
    return {row[key]: dict(zip(header, row)) for row in rows}


def d2l_import(path) -> dict:
    """Brightspace's grade import ("Importing grades",
    https://community.d2l.com/brightspace/kb/articles/3538-importing-grades): a user is
    identified by "OrgDefinedId" and/or "Username" (at least one); a numeric item's column is
    "<item name> Points Grade" (a new item's adds "<Numeric MaxPoints:N>"); and, as its export
    writes them (UW KB 4330, https://kb.wisc.edu/page.php?id=4330), the pound sign before an
    OrgDefinedId or Username is not data and the last column "End-of-Line Indicator" holds
    "#" on every row. Returns {(OrgDefinedId, Username): {item: cell}}."""
    header, *rows = read_csv(path)
    assert header[:2] == ["OrgDefinedId", "Username"] and header[-1] == "End-of-Line Indicator"
    items = {i: h.split(" Points Grade")[0] for i, h in enumerate(header)
             if " Points Grade" in h}
    found = {}
    for row in rows:
        assert row[-1] == "#" and row[0].startswith("#") and row[1].startswith("#")
        found[(row[0][1:], row[1][1:])] = {item: row[i] for i, item in items.items()}
    return found
