"""Grades back to the LMS, checked against each LMS's own documented import format.

Every test builds an LMS export the way that LMS names its files, reads it with the grader's own
intake (``collect``), writes the grading output ``grade`` would leave for it (grades.csv,
manifest, feedback: no sandbox, no notebook runs), exports it, and parses the import file back
with a reader written here from the LMS's documentation and source, never from ``lms.py``: the
round trip export -> grades -> import file -> the same ids.
"""

import json
import os
import re
import sys
import zipfile
from pathlib import Path

import pytest
from lms_formats import (
    canvas_comments,
    canvas_import,
    d2l_import,
    moodle_feedback_zip,
    moodle_gradebook,
    moodle_worksheet,
    read_csv,
)

from autograder.__main__ import main
from autograder.intake.submissions import collect
from autograder.scoring.feedback import write_feedback
from autograder.scoring.grade import _write_manifest, name_students_of, write_grades
from autograder.scoring.lms import export

A, B = "01_language_models", "02_rnn_backprop"
MAX = 18.0
NOTEBOOK = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def lms_zip(path, files: dict) -> None:
    """An LMS's "download all submissions" zip: file name -> content."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)


@pytest.fixture(scope="module")
def empty_gradebook(tmp_path_factory) -> bytes:
    """One empty nbgrader gradebook (creating one runs nbgrader's ``alembic``, slow on a busy
    machine), copied into each output as ``generate_assignment`` would have left it."""
    from nbgrader.api import Gradebook

    path = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        Gradebook(f"sqlite:///{path}").close()
    return path.read_bytes()


@pytest.fixture
def graded(tmp_path, empty_gradebook):
    """``graded(name, export_zip, assignment, scores)``: the output ``grade`` leaves for the
    export: every student the intake finds gets the row ``scores`` gives (score, status,
    written answers still to grade), a feedback file and a gradebook entry with the name the
    export gave. Returns (output folder, submissions)."""
    return lambda *args: _graded(tmp_path, empty_gradebook, *args)


def _graded(tmp, gradebook, name, export_zip, assignment, scores: dict) -> tuple:
    out = tmp / name
    out.mkdir()
    subs = collect(export_zip, assignment, tmp / f"{name}-scratch")
    _write_manifest(out, assignment, subs, subs, None, MAX, finished=True)
    rows = []
    for sub in subs:
        score, status, pending = scores[sub.student_id]
        row = {"student_id": sub.student_id, "name": sub.name, "assignment": assignment,
               "score": "" if pending else score, "max_score": MAX, "auto_score": score,
               "manual_score": 0.0, "needs_manual": pending, "status": status,
               "message": sub.problem, "flags": ""}
        manual = [{"cell": "explain", "max_points": 2.0, "blank": False, "digest": "d",
                   "rubric": []}] if pending else []
        write_feedback(out / "feedback" / sub.student_id, row, [], manual)
        rows.append(row)
    write_grades(out / "grades.csv", rows)
    (out / "course").mkdir()
    (out / "course" / "gradebook.db").write_bytes(gradebook)
    name_students_of(out, print)  # what grade does at its end: formgrader shows names
    return out, subs


def students_in_gradebook(out) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        return {s.id: (s.first_name, s.last_name, s.email) for s in gb.students}


# ---------------------------------------------------------------------------------- Canvas
CANVAS = {  # Canvas's download: <lastfirst>[_LATE]_<user id>_<file id>_<file name>
    "doejane_789_1003_01_language_models.ipynb": NOTEBOOK,
    "doejane_789_1010_01_language_models-1.ipynb": NOTEBOOK,  # resubmitted: 1010 is graded
    "leebob_321_1004_report.pdf": b"%PDF-1.4",  # ungradable
    "latefox_LATE_222_1008_01_language_models.ipynb": NOTEBOOK,
    "smithjohn_123_1001_01_language_models.ipynb": NOTEBOOK,
    "smithjohn_456_1002_01_language_models.ipynb": NOTEBOOK,  # a namesake, another user
    "kimann_654_1005_01_language_models.ipynb": NOTEBOOK,  # the grader failed on it
}
CANVAS_SCORES = {"789": (18.0, "graded", 0), "321": (0.0, "ungradable", 0),
                 "222": (14.4, "graded", 0), "123": (16.0, "needs manual grading", 1),
                 "456": (9.5, "graded", 0), "654": (0.0, "error", 0)}
CANVAS_ROSTER = (  # Canvas's gradebook export: Gradebook > Export
    "Student,ID,SIS User ID,SIS Login ID,Section,01 language models (4242),Current Score\n"
    "    Points Possible,,,,,18,(read only)\n"
    '"Doe, Jane",789,S789,jdoe,Section A,,\n"Lee, Bob",321,S321,blee,Section A,,\n'
    '"Fox, Late",222,S222,lfox,Section B,,\n"Smith, John",123,S123,jsmith1,Section A,,\n'
    '"Smith, John",456,S456,jsmith2,Section B,,\n"=2+2, Eve",999,S999,eve,Section B,,\n')


@pytest.fixture
def canvas_class(tmp_path, graded):
    lms_zip(tmp_path / "canvas.zip", CANVAS)
    return graded("out", tmp_path / "canvas.zip", A, CANVAS_SCORES)


def test_canvas_round_trip(canvas_class, tmp_path):
    """Canvas's gradebook import (its guide "How do I import grades in the Gradebook?",
    https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807,
    and its importer, canvas-lms app/models/gradebook_importer.rb: Student, ID, SIS User ID, SIS
    Login ID, Section, then one column per assignment; a "Points Possible" row; a student
    found by the Canvas user id in ID; an empty cell is no score) and its Re-Upload
    Submissions zip (canvas-lms app/models/assignment.rb, infer_comment_context_from_filename:
    the first two all-digit "_" parts of a name are the user id and the id of a file of their
    submission), read back by ``lms_formats``. Grades not final (a written answer waiting, a
    grading failure) are refused, then left empty; the ungradable student is there with 0."""
    out, subs = canvas_class
    said = []
    with pytest.raises(ValueError, match=r"2 grade\(s\) are not final: 01_language_models: 123 "
                                         r"\(1 written answer\(s\) to grade\); 01_language_"
                                         r"models: 654 \(grading failed: regrade it\).*sync"):
        export([out], "canvas", tmp_path / "up", log=said.append)
    assert not (tmp_path / "up").exists()  # a refusal writes nothing
    export([out], "canvas", tmp_path / "up", allow_pending=True, log=said.append)
    book = canvas_import(tmp_path / "up" / "canvas_grades.csv")
    users = {re.match(r"^[a-z]+(?:_LATE)?_(\d+)_", name)[1] for name in CANVAS}
    assert set(book["grades"]) == users == {s.student_id for s in subs}  # nobody dropped
    assert book["columns"] == [A] and book["points"] == {A: "18"}  # a new Canvas assignment
    assert {u: g[A] for u, g in book["grades"].items()} == {
        "789": "18", "321": "0", "222": "14.4", "123": "", "456": "9.5", "654": ""}
    assert book["rows"]["456"][0] == "smithjohn"  # what the flat files carry, the id decides
    # the feedback goes to the submitted file Canvas graded: Jane's resubmission, Bob's PDF
    assert canvas_comments(tmp_path / "up" / f"canvas_feedback_{A}.zip") == {
        "789": ["1010"], "321": ["1004"], "222": ["1008"], "123": ["1001"], "456": ["1002"],
        "654": ["1005"]}
    assert any("2 not final, left empty" in line for line in said), said


def test_canvas_with_its_gradebook_export_as_roster(canvas_class, tmp_path):
    """The roster gives Canvas's names, SIS ids, sections and the assignment's column (its id
    4242, so the import updates that assignment), and formgrader's names and ids."""
    out, _ = canvas_class
    (tmp_path / "roster.csv").write_text(CANVAS_ROSTER)
    said = []
    export([out], "canvas", tmp_path / "up", roster=tmp_path / "roster.csv",
           allow_pending=True, log=said.append)
    book = canvas_import(tmp_path / "up" / "canvas_grades.csv")
    assert book["columns"] == ["01 language models (4242)"]
    assert book["rows"]["456"][:5] == ["Smith, John", "456", "S456", "jsmith2", "Section B"]
    assert book["rows"]["789"][:5] == ["Doe, Jane", "789", "S789", "jdoe", "Section A"]
    assert any("1 student(s) of the roster submitted nothing" in line for line in said)
    people = students_in_gradebook(out)
    assert people["456"] == ("John", "Smith", None) and people["321"] == ("Bob", "Lee", None)


def test_canvas_refuses_another_lms_output(tmp_path, graded):
    moodle_out, _ = graded("m", _moodle_zip(tmp_path, "m.zip", MOODLE), A,
                           MOODLE_SCORES)
    with pytest.raises(ValueError, match="graded from a Moodle export: its ids mean nothing "
                                         "to Canvas; pass --lms moodle"):
        export([moodle_out], "canvas", tmp_path / "up")


# ---------------------------------------------------------------------------------- Moodle
MOODLE = {  # Moodle's download: a folder "<Full Name>_<participant id>_assignsubmission_file_"
    "Jane Doe_101_assignsubmission_file_/01_language_models.ipynb": NOTEBOOK,
    "Ana María Núñez_103_assignsubmission_file_/01_language_models.ipynb": NOTEBOOK,
    "Bob Lee_104_assignsubmission_file_/report.pdf": b"%PDF-1.4",
    "Wei Chen_105_assignsubmission_file/01_language_models.ipynb": NOTEBOOK,  # Moodle >= 4.1
}
MOODLE_SCORES = {"101": (17.0, "graded", 0), "103": (12.0, "graded", 0),
                 "104": (0.0, "ungradable", 0), "105": (11.0, "graded", 0)}
# the same people in assignment 02: Moodle gives them other participant ids there
MOODLE_02 = {"Jane Doe_201_assignsubmission_file_/02.ipynb": NOTEBOOK,
             "Ana María Núñez_203_assignsubmission_file_/02.ipynb": NOTEBOOK,
             "Wei Chen_205_assignsubmission_file_/02.ipynb": NOTEBOOK}
MOODLE_02_SCORES = {"201": (10.0, "graded", 0), "203": (9.0, "graded", 0),
                    "205": (8.0, "needs manual grading", 1)}
MOODLE_ROSTER = (  # Moodle's participants page, "Download table data as" CSV
    "First name,Last name,Email address,Roles,Groups,Last access to course\n"
    "Jane,Doe,jane@uni.example,Student,,Never\nAna María,Núñez,ana@uni.example,Student,,Never\n"
    "Bob,Lee,bob@uni.example,Student,,Never\nWei,Chen,wei@uni.example,Student,,Never\n"
    "Tom,Teacher,tom@uni.example,Teacher,,Never\n")


def _moodle_zip(tmp, name, files):
    lms_zip(tmp / name, files)
    return tmp / name


def test_moodle_round_trip_per_assignment_and_for_the_course(tmp_path, graded):
    """Moodle's per-assignment uploads (https://docs.moodle.org/en/Assignment_settings,
    feedback types "Offline grading worksheet" and "Feedback files"): the grading worksheet
    keyed by "Participant <id>" and the feedback zip of folders "<Full Name>_<id>_
    assignsubmission_file_" (mod/assign/feedback/offline/importgradeslib.php,
    mod/assign/feedback/file/importziplib.php), with the participant ids the download carried;
    and the course gradebook's "Import > CSV file" (https://docs.moodle.org/en/Import_grades,
    grade/import/csv/classes/load_data.php), keyed by email from the participants export,
    which joins assignments whose participant ids differ."""
    out1, _ = graded("o1", _moodle_zip(tmp_path, "a.zip", MOODLE), A, MOODLE_SCORES)
    # without a roster: per assignment, keyed by the participant ids the folders carried
    said = []
    export([out1], "moodle", tmp_path / "up", log=said.append)
    sheet = moodle_worksheet(tmp_path / "up" / f"moodle_worksheet_{A}.csv")
    assert {k: v[0] for k, v in sheet.items()} == {"101": "17", "103": "12", "104": "0",
                                                   "105": "11"}
    assert sheet["104"][1].startswith(f"{A}: 0 / 18 (ungradable). no notebook found: a PDF")
    assert moodle_feedback_zip(tmp_path / "up" / f"moodle_feedback_{A}.zip") == {
        "101": ["feedback.html"], "103": ["feedback.html"], "104": ["feedback.html"],
        "105": ["feedback.html"]}
    assert not (tmp_path / "up" / "moodle_grades.csv").exists()
    assert any("moodle_grades.csv not written: no roster" in line for line in said), said
    # formgrader shows the full names the folders carried, ungradable Bob too
    assert students_in_gradebook(out1) == {"101": ("Jane", "Doe", None),
                                           "103": ("Ana María", "Núñez", None),
                                           "104": ("Bob", "Lee", None),
                                           "105": ("Wei", "Chen", None)}

    # the course so far: assignment 02 gives the same people other participant ids; the
    # gradebook import joins them by the roster's emails
    out2, _ = graded("o2", _moodle_zip(tmp_path, "b.zip", MOODLE_02), B,
                     MOODLE_02_SCORES)
    (tmp_path / "participants.csv").write_text(MOODLE_ROSTER, encoding="utf-8")
    export([out1, out2], "moodle", tmp_path / "course", roster=tmp_path / "participants.csv",
           allow_pending=True, log=said.append)
    book = moodle_gradebook(tmp_path / "course" / "moodle_grades.csv")
    assert {e: (r[A], r[B]) for e, r in book.items()} == {
        "jane@uni.example": ("17", "10"), "ana@uni.example": ("12", "9"),
        "bob@uni.example": ("0", ""), "wei@uni.example": ("11", "")}  # Wei's 02 is pending
    assert "explain: not graded yet" in book["wei@uni.example"][f"{B} feedback"]
    assert moodle_worksheet(tmp_path / "course" / f"moodle_worksheet_{B}.csv")["205"][0] == ""
    assert students_in_gradebook(out2)["203"] == ("Ana María", "Núñez", "ana@uni.example")


def test_moodle_namesakes_are_never_guessed(tmp_path, graded):
    """Two Jane Does: the worksheet keys each by participant id; the gradebook import, which
    can only tell them apart by an email the roster cannot assign, is not written."""
    files = {**MOODLE, "Jane Doe_102_assignsubmission_file_/01_language_models.ipynb": NOTEBOOK}
    out, _ = graded("o", _moodle_zip(tmp_path, "a.zip", files), A,
                    {**MOODLE_SCORES, "102": (3.0, "graded", 0)})
    roster = MOODLE_ROSTER + "Jane,Doe,jane.two@uni.example,Student,,Never\n"
    (tmp_path / "participants.csv").write_text(roster, encoding="utf-8")
    said = []
    export([out], "moodle", tmp_path / "up", roster=tmp_path / "participants.csv",
           log=said.append)
    assert {k: v[0] for k, v in moodle_worksheet(
        tmp_path / "up" / f"moodle_worksheet_{A}.csv").items()}["102"] == "3"
    assert not (tmp_path / "up" / "moodle_grades.csv").exists()
    assert any("Jane Doe (101: 2 people in the roster share that name)" in line
               for line in said), said


# ----------------------------------------------------------------------------- Brightspace
D2L = {  # Brightspace's download: "<id>-<id> - <Full Name> - <date> - <file>"
    "1201-3301 - Jane Doe - Nov 1, 2026 1000 AM - 01_language_models.ipynb": NOTEBOOK,
    "1202-3302 - Bob Lee - Nov 1, 2026 1100 AM - report.pdf": b"%PDF-1.4",
    "1203-3303 - Ana María Núñez - Nov 2, 2026 0900 AM - 01_language_models.ipynb": NOTEBOOK,
}
D2L_SCORES = {"Jane_Doe": (15.0, "graded", 0), "Bob_Lee": (0.0, "ungradable", 0),
              "Ana_Mar_a_N_ez": (18.0, "graded", 0)}
D2L_ROSTER = (  # Brightspace's Grades > Export, key field "Both", with names and emails
    "OrgDefinedId,Username,Last Name,First Name,Email,"
    "01 language models Points Grade <Numeric MaxPoints:18>,End-of-Line Indicator\n"
    "#00417,#jdoe,Doe,Jane,jdoe@uni.example,,#\n#00418,#blee,Lee,Bob,blee@uni.example,,#\n"
    "#00419,#anunez,Núñez,Ana María,anunez@uni.example,,#\n")


def test_brightspace_round_trip(tmp_path, graded):
    """Brightspace's grade import ("Importing grades",
    https://community.d2l.com/brightspace/kb/articles/3538-importing-grades: OrgDefinedId
    and/or Username, "<item> Points Grade"; the pound signs and End-of-Line Indicator its export
    writes, https://kb.wisc.edu/page.php?id=4330): its download names students by full name
    only, so the ids come from its grade export, matched by name; a student it lacks is
    refused, never dropped."""
    lms_zip(tmp_path / "d2l.zip", D2L)
    out, subs = graded("out", tmp_path / "d2l.zip", A, D2L_SCORES)
    assert {s.student_id for s in subs} == set(D2L_SCORES)
    with pytest.raises(ValueError, match="OrgDefinedId or Username.*--roster"):
        export([out], "d2l", tmp_path / "up")
    (tmp_path / "roster.csv").write_text(D2L_ROSTER, encoding="utf-8")
    export([out], "d2l", tmp_path / "up", roster=tmp_path / "roster.csv")
    assert d2l_import(tmp_path / "up" / "d2l_grades.csv") == {
        ("00417", "jdoe"): {"01 language models": "15"},
        ("00418", "blee"): {"01 language models": "0"},
        ("00419", "anunez"): {"01 language models": "18"}}
    # a roster without one of them: refused, never dropped
    (tmp_path / "short.csv").write_text(D2L_ROSTER.rsplit("#00419", 1)[0], encoding="utf-8")
    with pytest.raises(ValueError, match=r"Ana María Núñez \(Ana_Mar_a_N_ez: not in the "
                                         r"roster\)"):
        export([out], "d2l", tmp_path / "up2", roster=tmp_path / "short.csv")
    # two names of the export that fit one person of the roster: neither is guessed
    lms_zip(tmp_path / "two.zip", {**D2L, "1204-3304 - Doe Jane - Nov 1, 2026 1000 AM - "
                                          "01_language_models.ipynb": NOTEBOOK})
    out, _ = graded("two", tmp_path / "two.zip", A,
                    {**D2L_SCORES, "Doe_Jane": (1.0, "graded", 0)})
    with pytest.raises(ValueError, match=r"Doe Jane \(Doe_Jane: the roster's Jane Doe matches "
                                         r"Jane_Doe too\), Jane Doe \(Jane_Doe: .* matches "
                                         r"Doe_Jane too\)"):
        export([out], "d2l", tmp_path / "up3", roster=tmp_path / "roster.csv")


# ----------------------------------------------------------------------------------- plain
def test_plain_and_the_command_line(canvas_class, tmp_path):
    """``python -m autograder export``: errors exit 2 with the message; the plain CSV has every
    student; --title names the LMS's column (Canvas matches "Title (id)" by its id)."""
    out, _ = canvas_class
    assert main(["export", str(out), "--lms", "plain", "--out", str(tmp_path / "up")]) == 2
    assert main(["export", str(out), "--lms", "canvas", "--out", str(tmp_path / "up"),
                 "--title", "no-equals-sign"]) == 2
    (tmp_path / "odd.csv").write_text("who,what\nme,this\n")
    (tmp_path / "moodle.csv").write_text(MOODLE_ROSTER, encoding="utf-8")
    for roster, said in (("odd.csv", "is not an LMS export this grader reads"),
                         ("moodle.csv", "is a Moodle export; --lms canvas needs Canvas's")):
        with pytest.raises(ValueError, match=said):
            export([out], "canvas", tmp_path / "up", roster=tmp_path / roster,
                   allow_pending=True)
    assert main(["export", str(out), "--lms", "plain", "--out", str(tmp_path / "up"),
                 "--allow-pending"]) == 0
    header, *rows = read_csv(tmp_path / "up" / "grades_plain.csv")
    plain = {r[0]: dict(zip(header, r)) for r in rows}
    assert set(plain) == set(CANVAS_SCORES)
    assert (plain["321"]["score"], plain["321"]["status"]) == ("0", "ungradable")
    assert (plain["123"]["score"], plain["123"]["status"]) == ("", "needs manual grading")
    assert main(["export", str(out), "--lms", "canvas", "--out", str(tmp_path / "up"),
                 "--allow-pending", "--title", f"{A}=Assignment 1 (77)"]) == 0
    assert canvas_import(tmp_path / "up" / "canvas_grades.csv")["columns"] == [
        "Assignment 1 (77)"]


def test_a_name_a_spreadsheet_would_run_stays_text(canvas_class, tmp_path):
    """A name the LMS lets a student set reaches the import file and the gradebook (which
    ``nbgrader export`` writes to a CSV as it is) as text, never as a formula."""
    out, _ = canvas_class
    (tmp_path / "roster.csv").write_text(CANVAS_ROSTER.replace('"Doe, Jane"', '"=2+2, Jane"'))
    export([out], "canvas", tmp_path / "up", roster=tmp_path / "roster.csv",
           allow_pending=True, log=lambda *a: None)
    assert canvas_import(tmp_path / "up" / "canvas_grades.csv")["rows"]["789"][0] == \
        "'=2+2, Jane"
    assert students_in_gradebook(out)["789"] == ("Jane", "'=2+2", None)
