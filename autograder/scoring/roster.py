"""Who the students are: names, emails and LMS ids, from the export and from an LMS roster.

An LMS export names students as its layout allows: Moodle folders and Brightspace names carry
full names, Canvas file names only "lastfirst" squashed, a folder per student nothing. A roster
(the LMS's own export of its people) carries more: Canvas's gradebook export gives the sortable
name "Last, First", the SIS ids and the section for each Canvas user id; Moodle's participants
or grade export gives first and last names and the email its gradebook import can key by;
Brightspace's grade export gives the OrgDefinedId and Username its import keys by. The grader
writes what it knows into nbgrader's gradebook, so formgrader shows people, not "None, None".

A roster row is matched to a student by the LMS user id where the export carries one (Canvas),
else by full name (Moodle, Brightspace), never by a guess: a name two people share matches
nobody, and the caller says so.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class Person:
    """One student as the LMS knows them; "" where unknown."""

    name: str = ""  # the display name the export or roster gives
    first: str = ""
    last: str = ""
    email: str = ""
    lms_id: str = ""  # Canvas user id, Brightspace OrgDefinedId
    username: str = ""  # Brightspace Username, Moodle username
    sis_user_id: str = ""  # Canvas
    sis_login_id: str = ""  # Canvas
    section: str = ""  # Canvas


@dataclass
class Roster:
    """An LMS's export of its people (``kind``), and the gradebook columns it lists (Canvas
    assignments as "Title (id)", Brightspace grade items by name), for titling ours."""

    kind: str
    people: list[Person] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)


def from_export(name: str, lms: str) -> Person:
    """A student as the export names them. A full name (Moodle, Brightspace: "First Last" by
    default) is split at its last space, which a roster corrects; Canvas's squashed "lastfirst"
    and a Blackboard username cannot be split and stay whole, as the last name."""
    name = " ".join(name.split())
    if lms in ("moodle", "d2l") and " " in name:
        first, last = name.rsplit(" ", 1)
        return Person(name=name, first=first, last=last)
    return Person(name=name, last=name)


def normal(name: str) -> str:
    """A name as compared: Unicode-normalised, case-folded, Moodle's underscores as spaces
    (its download names replace them), whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", name).replace("_", " ").casefold().split())


# ------------------------------------------------------------------------- reading rosters
def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"roster {path} cannot be read as a UTF-8 CSV file ({err}); export "
                         "it from the LMS again as CSV") from None
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"roster {path} is empty")
    return [h.strip() for h in rows[0]], rows[1:]


def _column(header: list[str], *names: str) -> int | None:
    lowered = [h.casefold() for h in header]
    for name in names:
        if name.casefold() in lowered:
            return lowered.index(name.casefold())
    return None


def read_roster(path: Path) -> Roster:
    """The people of a Canvas gradebook export, a Moodle participants (or grade, or grading
    worksheet) export, or a Brightspace grade export, told apart by their headers; ValueError
    naming what a roster needs when the file is none of them."""
    path = Path(path)
    header, rows = _rows(path)

    def get(row, index):
        return row[index].strip() if index is not None and index < len(row) else ""

    if header and header[0].startswith("Student") and _column(header, "ID") == 1:
        ids = [_column(header, n) for n in ("ID", "SIS User ID", "SIS Login ID", "Section")]
        people = []
        for row in rows:
            if "Points Possible" in row[0] or not get(row, ids[0]).isdigit():
                continue  # Canvas's points-possible and muted/posting-policy rows
            last, _, first = get(row, 0).partition(", ")
            people.append(Person(get(row, 0), first, last, "", get(row, ids[0]), "",
                                 get(row, ids[1]), get(row, ids[2]), get(row, ids[3])))
        titles = [h for h in header if re.search(r"\(\d+\)$", h)]
        return Roster("canvas", people, titles)
    org, user = _column(header, "OrgDefinedId"), _column(header, "Username")
    if org is not None or (user is not None and
                           _column(header, "End-of-Line Indicator") is not None):
        first, last = _column(header, "First Name"), _column(header, "Last Name")
        email = _column(header, "Email")
        people = [Person(f"{get(r, first)} {get(r, last)}".strip(), get(r, first),
                         get(r, last), get(r, email), get(r, org).lstrip("#"),
                         get(r, user).lstrip("#")) for r in rows]
        items = [re.sub(r" Points Grade.*$", "", h) for h in header if " Points Grade" in h]
        return Roster("d2l", people, items)
    first, last = _column(header, "First name"), _column(header, "Last name", "Surname")
    email, user = _column(header, "Email address", "Email"), _column(header, "Username")
    if first is not None and last is not None:
        people = [Person(f"{get(r, first)} {get(r, last)}".strip(), get(r, first),
                         get(r, last), get(r, email), "", get(r, user)) for r in rows]
        return Roster("moodle", people)
    full = _column(header, "Full name")
    if full is not None and email is not None:  # e.g. an assignment's grading worksheet
        people = [replace(from_export(get(r, full), "moodle"), email=get(r, email),
                          username=get(r, user)) for r in rows]
        return Roster("moodle", people)
    raise ValueError(
        f"roster {path} is not an LMS export this grader reads (its columns: "
        f"{', '.join(header[:8])}); pass Canvas's gradebook export (Student, ID, SIS User ID, "
        "SIS Login ID, Section), Moodle's participants or grade export (First name, Last "
        "name, Email address; or Full name, Email address) or Brightspace's grade export "
        "(OrgDefinedId, Username, ...)")


# ------------------------------------------------------------------------ matching students
def match(roster: Roster, person: Person, lms_id: str = "") -> tuple[Person | None, str]:
    """(the roster's entry for a student, "") or (None, why not): by LMS user id where the
    export has one, else by full name in either order, never when two people share it."""
    if lms_id and roster.kind == "canvas":
        found = [p for p in roster.people if p.lms_id == lms_id]
    else:
        key = normal(person.name)
        found = [p for p in roster.people if key and key in
                 (normal(f"{p.first} {p.last}"), normal(f"{p.last} {p.first}"), normal(p.name))]
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, "not in the roster"
    return None, f"{len(found)} people in the roster share that name"


def merged(person: Person, entry: Person | None) -> Person:
    """The export's view of a student completed (names corrected) by their roster entry."""
    if entry is None:
        return person
    return replace(entry, name=entry.name or person.name, first=entry.first or person.first,
                   last=entry.last or person.last, lms_id=entry.lms_id or person.lms_id)


# ------------------------------------------------------------------------ into the gradebook
def name_students(work: Path, people: dict[str, Person], overwrite: bool = False) -> None:
    """Every student of ``people`` in the gradebook of ``work`` (nbgrader's course), with the
    names, email and LMS id known: formgrader lists them by name, and ``nbgrader export``
    lists every student, ungradable ones included. Names a roster gave earlier are kept
    unless ``overwrite`` (the roster's own run). Each is stored as a spreadsheet shows data
    (``spreadsheet.cell``): ``nbgrader export`` writes them into a CSV as they are."""
    from nbgrader.api import Gradebook

    from .spreadsheet import cell

    with warnings.catch_warnings(), Gradebook(f"sqlite:///{Path(work) / 'gradebook.db'}") as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy notes from inside nbgrader
        for student, person in people.items():
            known = {"first_name": person.first, "last_name": person.last,
                     "email": person.email, "lms_user_id": person.lms_id}
            record = gb.update_or_create_student(student)
            for column, value in known.items():
                if value and (overwrite or not getattr(record, column)):
                    setattr(record, column, cell(value))
        gb.db.commit()
