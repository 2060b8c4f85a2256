"""Find every student's notebook in an LMS export, as a zip or unzipped into a folder.

Recognised layouts (the README shows an example name of each):

- Canvas: flat files ``<lastfirst>[_LATE]_<user id>_<submission id>_<original name>``;
- Moodle: a folder ``<Full Name>_<id>_assignsubmission_file_`` per student;
- Blackboard: flat files ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>``;
- Brightspace (D2L): ``<id>-<id> - <Full Name> - <Mon D, YYYY HMM AM> - <file>``, flat or one
  folder per submission;
- a folder per student (the folder's name is the id), or loose files named after students.

A student is keyed by the LMS's user id where the layout has one (Canvas, Moodle, Blackboard),
never by a display name alone, which namesakes share; Brightspace puts no user id in its names,
so there the full name is the key. Every student in the export gets exactly one
``Submission``: the file the LMS recorded last among those that hold a notebook (a renamed
``.ipynb.txt``, JSON, or a zip with one notebook inside are salvaged, with a note), or a reason
the instructor can forward when nothing does.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from .normalize import RESUBMIT, parse_json

MAX_MEMBER = 200 * 2**20  # bytes; zipfile never inflates a member past its declared size
_IGNORED = ("__MACOSX", ".DS_Store", "index.html", "Thumbs.db")

_CANVAS = re.compile(r"^(?P<name>[A-Za-z0-9-]+?)(?P<late>_LATE)?_(?P<uid>\d+)_(?P<sid>\d+)_"
                     r"(?P<file>.+)$")
_BLACKBOARD = re.compile(r"^(?P<assignment>.+?)_(?P<uid>[^_]+)_attempt_"
                         r"(?P<when>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2})(?:_(?P<file>.+))?$")
_D2L = re.compile(r"^(?P<sid>\d+)-(?P<fid>\d+) - (?P<name>.+?) - (?P<when>[A-Z][a-z]{2} \d{1,2}, "
                  r"\d{4} \d{3,4} [AP]M)(?: - (?P<file>.+))?$")
_MOODLE = re.compile(r"^(?P<name>.+)_(?P<uid>\d+)_assignsubmission_[a-z]+_?$")


@dataclass
class Entry:
    """One file the LMS exported for a student."""

    path: Path
    original: str  # the name the student gave it
    when: datetime | None = None  # the LMS's time for it, when the layout or zip records one
    rank: tuple = ()  # extra ordering the LMS gives (a submission id), newest last
    unreadable: str = ""  # why the export's copy of it could not be unpacked ("" if it could)
    lms: str = ""  # the layout that named it: canvas, moodle, blackboard, d2l ("" if none)
    exported: str = ""  # the name that identifies the student in the export (file or folder)


@dataclass
class Submission:
    student_id: str
    notebook: Path | None  # None when there is nothing gradable; ``problem`` says why
    problem: str = ""
    name: str = ""  # the display name, when the LMS gives one
    note: str = ""  # what was salvaged, graded or ignored
    when: datetime | None = None  # the LMS's time for the graded file
    lms: str = ""  # the layout the export had (``Entry.lms``): grades go back in its format
    exported: str = ""  # the name the LMS gave the graded file or the student's folder, which
    # its feedback upload expects back (Canvas: user and file ids; Moodle: participant id)

    @property
    def timestamp(self) -> datetime | None:
        """When the LMS recorded the graded file, else when it arrived on disk."""
        if self.when is not None:
            return self.when
        if self.notebook is None:
            return None
        return datetime.fromtimestamp(self.notebook.stat().st_mtime, timezone.utc)


@dataclass
class _Student:
    key: str
    name: str = ""
    entries: list[Entry] = field(default_factory=list)
    problem: str = ""  # why this student's files could not be read at all


def safe_id(name: str) -> str:
    """A student id nbgrader can use as a folder name, and a spreadsheet shows as text (it
    never starts with a dash, which also reads as an option on a command line)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lstrip("._-").rstrip("._") or "student"


def _utc(text: str, fmt: str) -> datetime | None:
    try:
        return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.lstat().st_mtime, timezone.utc)


NAME_BYTES = 255  # the longest file name most file systems take, in bytes


def fit_name(name: str) -> str:
    """``name`` as a file name this system can create: no NUL or slash, and at most NAME_BYTES
    bytes of UTF-8. A longer name (96 CJK characters are 288 bytes: legal on macOS and Windows,
    too long for Linux) keeps its start, where LMSs put the student's id, and its extension,
    with a short hash of the whole between them so two long names stay two."""
    name = name.replace("\0", "_").replace("/", "_")
    if len(name.encode()) <= NAME_BYTES:
        return name
    stem, dot, suffix = name.rpartition(".")
    suffix = f".{suffix}" if dot and len(suffix.encode()) <= 16 else ""
    stem = name[:len(name) - len(suffix)]
    tag = f"~{zlib.crc32(name.encode()):08x}"
    room = NAME_BYTES - len(tag.encode()) - len(suffix.encode())
    return stem.encode()[:room].decode("utf-8", "ignore") + tag + suffix


def _unreadable_member(err: BaseException) -> str:
    """Why one file of an export could not be unpacked, in words a student can act on."""
    text = str(err)
    if isinstance(err, NotImplementedError) or "compression method" in text:
        return ("it was compressed with a method that cannot be read here (Windows' Deflate64, "
                "say); submit the .ipynb file itself, not a zip of it")
    if isinstance(err, RuntimeError) and "encrypted" in text:
        return "it is password-protected; submit the .ipynb file without a password"
    if "CRC" in text or isinstance(err, (zlib.error, EOFError, zipfile.BadZipFile)):
        return "the file is damaged in the export (a bad checksum); submit it again"
    return f"it could not be unpacked ({type(err).__name__}: {text[:120]}); submit it again"


def _extract(archive: Path, dest: Path) -> dict[Path, str]:
    """Unzip safely, member by member: members that would land outside ``dest`` are skipped;
    each file keeps the time the zip stored for it. A member that cannot be unpacked (damaged,
    password-protected, compressed in a way Python cannot read, larger than MAX_MEMBER) is one
    student's problem, not the export's: an empty file stands in for it, so its student is found
    as usual, and the returned ``{path: why}`` says why it could not be graded. Only a file that
    is not a readable zip at all is the whole export's fault (ValueError)."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    try:
        zf = zipfile.ZipFile(archive)
        members = zf.infolist()
    except Exception as err:
        shutil.rmtree(dest, ignore_errors=True)
        raise ValueError(f"{archive} is a corrupt or truncated zip ({type(err).__name__}: "
                         f"{str(err)[:200]}); download the export again") from None
    unreadable: dict[Path, str] = {}
    with zf:
        for member in members:
            parts = [fit_name(p) for p in member.filename.split("/") if p]
            target = dest.joinpath(*parts).resolve() if parts else root
            if root not in target.parents or member.is_dir():
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                if member.file_size > MAX_MEMBER:
                    raise ValueError("too large")
                target.write_bytes(zf.read(member))
            except Exception as err:  # this member only: whatever it is, its student's row
                unreadable[target] = (
                    f"larger than {MAX_MEMBER // 2**20} MB; submit the .ipynb notebook (with "
                    "its outputs cleared if they are large)" if member.file_size > MAX_MEMBER
                    else _unreadable_member(err))
                try:
                    target.write_bytes(b"")
                except OSError:
                    continue
            stamp = datetime(*member.date_time, tzinfo=timezone.utc).timestamp()
            with contextlib.suppress(OSError, ValueError, OverflowError):
                os.utime(target, (stamp, stamp))
    return unreadable


def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if p.name not in _IGNORED and not p.name.startswith("."))


def student_files(folder: Path) -> list[Path]:
    """Every file in a student's folder, without checkpoints and hidden or system files.
    Symbolic links are listed as they are, never followed (``_gradable`` refuses them): a
    link could point the grader at the instructor's solution or any other file."""
    found = []
    for top, dirs, files in os.walk(folder):  # does not descend into linked folders
        here = Path(top)
        found += [here / name for name in files]
        found += [here / name for name in dirs if (here / name).is_symlink()]
    return sorted(p for p in found if not any(
        part in _IGNORED or part.startswith(".") for part in p.relative_to(folder).parts))


def _flat_file(path: Path) -> tuple[str, str, Entry] | None:
    """(key, display name, entry) for a loose file named by an LMS, or None for a stray file
    (Blackboard's per-attempt .txt receipt)."""
    name = path.name
    if m := _CANVAS.match(name):
        return m["uid"], m["name"], Entry(path, m["file"], _mtime(path), (int(m["sid"]),),
                                          lms="canvas", exported=name)
    if m := _BLACKBOARD.match(name):
        if m["file"] is None:
            return None  # the attempt's receipt, not a submission
        when = _utc(m["when"], "%Y-%m-%d-%H-%M-%S")
        return m["uid"], m["uid"], Entry(path, m["file"], when, lms="blackboard", exported=name)
    if m := _D2L.match(name):
        when = _utc(m["when"], "%b %d, %Y %I%M %p")
        return m["name"], m["name"], Entry(path, m["file"] or name, when, (int(m["sid"]),),
                                           lms="d2l", exported=name)
    return path.name.split(".")[0], "", Entry(path, name, _mtime(path), exported=name)


def _student_folder(folder: Path) -> tuple[str, str, list[Entry]]:
    """(key, display name, entries) for a folder holding one student's files."""
    entries = []
    for path in student_files(folder):
        flat = _flat_file(path) if _D2L.match(path.name) else None
        entries.append(flat[2] if flat else Entry(path, path.name, _mtime(path)))
    if m := _MOODLE.match(folder.name):
        return m["uid"], m["name"], [replace(e, lms="moodle", exported=folder.name)
                                     for e in entries]
    if m := _D2L.match(folder.name):
        when = _utc(m["when"], "%b %d, %Y %I%M %p")
        return m["name"], m["name"], [Entry(e.path, e.original, when, (int(m["sid"]),),
                                            lms="d2l", exported=folder.name) for e in entries]
    return folder.name, "", [replace(e, exported=folder.name) for e in entries]


def _students(root: Path) -> list[_Student]:
    items = _visible(root)
    # one folder around the whole export? (never a link: links are not followed)
    if len(items) == 1 and items[0].is_dir() and not items[0].is_symlink():
        inner = _visible(items[0])
        if inner and (all(p.is_dir() for p in inner) or any(map(_known, inner))):
            items = inner
    students: dict[str, _Student] = {}
    for item in items:
        try:
            if item.is_symlink():
                key, name, entries = item.name.split(".")[0], "", [Entry(item, item.name)]
            elif item.is_dir():
                key, name, entries = _student_folder(item)
            else:
                flat = _flat_file(item)
                if flat is None:
                    continue
                key, name, entry = flat
                entries = [entry]
        except Exception as err:  # this item is one student's, whatever went wrong with it
            key, name, entries = item.name.split(".")[0] or item.name, "", []
            students.setdefault(key, _Student(key, name)).problem = (
                f"{item.name} could not be read ({type(err).__name__}: {str(err)[:150]})")
            continue
        student = students.setdefault(key, _Student(key, name))
        student.entries += entries
    return [students[k] for k in sorted(students)]


def name_parts(lms: str, exported: str) -> dict[str, str]:
    """The parts of the name ``lms`` gave a student's file or folder (``Submission.exported``):
    Canvas's name, late mark, user id (uid), submitted file's id (sid) and file; Moodle's full
    name and participant id (uid); Brightspace's submission ids and full name; {} when the
    name is not of that layout."""
    pattern = {"canvas": _CANVAS, "moodle": _MOODLE, "blackboard": _BLACKBOARD, "d2l": _D2L}
    found = pattern[lms].match(exported) if lms in pattern else None
    return found.groupdict(default="") if found else {}


def _known(path: Path) -> bool:
    """Named as an LMS names its files."""
    return path.is_file() and any(p.match(path.name) for p in (_CANVAS, _BLACKBOARD, _D2L))


def collect(path: Path, assignment: str, scratch: Path) -> list[Submission]:
    """One ``Submission`` per student of the export at ``path`` (a folder or a zip).

    Everything done for one student here (finding, unpacking and choosing their files) is
    theirs alone: whatever goes wrong with it (a damaged or password-protected file, JSON
    nested too deeply, a name too long for this system) becomes that student's ``problem``, a
    message they can act on, and every other student is read as usual. Only a fault of the
    export as a whole (not a zip at all, no student in it) raises ValueError."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"submissions path {path} does not exist")
    unreadable: dict[Path, str] = {}
    if path.is_file():
        if not zipfile.is_zipfile(path) and path.suffix.lower() != ".zip":
            raise ValueError(f"submissions path {path} is a file but not a zip; pass the LMS "
                             "export (.zip) or a folder")  # a truncated .zip: _extract says so
        unreadable = _extract(path, scratch / "unzipped")
        path = scratch / "unzipped"
    students = _students(path)
    if not students:
        raise ValueError(f"no submission found in {path}: expected one folder per student, or "
                         "files named as an LMS exports them (Canvas, Moodle, Blackboard, "
                         "Brightspace; see the README)")
    seen: dict[str, int] = {}
    out = []
    for student in students:
        sid = safe_id(student.key)
        if sid in seen:  # two keys that sanitise to the same folder name
            seen[sid] += 1
            sid = f"{sid}-{seen[sid]}"
        seen.setdefault(sid, 1)
        out.append(_submission(sid, student, assignment, scratch / "salvaged" / sid,
                               unreadable))
    return out


def _submission(sid: str, student: _Student, assignment: str, scratch: Path,
                unreadable: dict[Path, str]) -> Submission:
    """The student's ``Submission``; any failure while reading their files is its problem."""
    if student.problem:
        return Submission(sid, None, f"{student.problem}; {RESUBMIT}", student.name)
    for entry in student.entries:
        entry.unreadable = unreadable.get(entry.path.resolve(), "")
    return choose_notebook(sid, student.entries, assignment, scratch, student.name)


# ---------------------------------------------------------------------- what was submitted
def _notebook_json(path: Path) -> tuple[bool, str]:
    """(whether the file is a notebook under another name, why it cannot be read if it is
    JSON that ``parse_json``'s limits refuse)."""
    try:
        nb = parse_json(path.read_bytes())
    except ValueError as err:
        return False, (str(err) if "not valid JSON" not in str(err) else "")
    return isinstance(nb, dict) and isinstance(nb.get("cells"), list), ""


_KINDS = {".pdf": "a PDF", ".py": "a Python script", ".html": "an HTML export",
          ".docx": "a Word document", ".txt": "a text file", ".png": "an image",
          ".jpg": "an image", ".md": "a Markdown file"}


def _gradable(entry: Entry, scratch: Path) -> tuple[Path | None, str]:
    """(notebook to grade, note) or (None, why it is not a notebook)."""
    path, original = entry.path, entry.original
    if entry.unreadable:
        return None, f"{original} could not be taken from the export: {entry.unreadable}"
    if path.is_symlink():
        return None, (f"{original} is a symbolic link, which is never followed; submit the "
                      "notebook file itself")
    if path.stat().st_size > MAX_MEMBER:
        return None, f"{original} is larger than {MAX_MEMBER // 2**20} MB; submit the .ipynb " \
                     "notebook (with its outputs cleared if they are large)"
    if original.endswith(".ipynb"):
        return path, ""
    if zipfile.is_zipfile(path):
        try:
            return _notebook_in_zip(path, original, scratch)
        except Exception as err:  # damaged, encrypted, Deflate64: the student's to fix
            return None, f"the zip {original} could not be read: {_unreadable_member(err)}"
    if original.lower().endswith(".zip"):
        return None, (f"the zip {original} could not be read: it is damaged or truncated; "
                      "submit the .ipynb notebook itself")
    is_notebook, problem = _notebook_json(path)
    if is_notebook:
        return path, f"{original} is a notebook saved under another name; it was graded"
    if problem:
        return None, f"{original}: {problem}"
    suffix = Path(original).suffix.lower()
    kind = _KINDS.get(suffix, f"a {suffix or 'file without extension'} file")
    return None, f"{kind} was submitted ({original}); submit the .ipynb notebook"


def _notebook_in_zip(path: Path, original: str, scratch: Path) -> tuple[Path | None, str]:
    """The one notebook inside a zip a student submitted, unpacked into ``scratch``."""
    with zipfile.ZipFile(path) as zf:
        inside = [m for m in zf.infolist() if m.filename.endswith(".ipynb") and
                  "__MACOSX" not in m.filename and ".ipynb_checkpoints" not in m.filename]
        if len(inside) == 1 and inside[0].file_size <= MAX_MEMBER:
            scratch.mkdir(parents=True, exist_ok=True)
            target = scratch / fit_name(Path(inside[0].filename).name)
            target.write_bytes(zf.read(inside[0]))
            return target, f"the notebook inside the zip {original} was graded"
    return None, f"{original} is a zip with {len(inside)} notebooks; submit exactly one .ipynb"


def choose_notebook(student_id: str, entries, assignment: str, scratch: Path | None = None,
                    name: str = "") -> Submission:
    """The submission to grade among a student's files: the latest that holds a notebook.
    Whatever goes wrong while reading them is this submission's ``problem``, never an
    exception."""
    try:
        return _choose(student_id, entries, assignment, scratch, name)
    except Exception as err:
        return Submission(student_id, None, f"the submission could not be read "
                                            f"({type(err).__name__}: {str(err)[:150]}); "
                                            f"{RESUBMIT}", name)


def _choose(student_id: str, entries, assignment: str, scratch: Path | None,
            name: str) -> Submission:
    entries = [e if isinstance(e, Entry) else Entry(Path(e), Path(e).name, _mtime(Path(e)))
               for e in entries]
    if not entries:
        return Submission(student_id, None, "nothing was submitted (no file found)", name)
    scratch = scratch or Path(entries[0].path).parent / ".salvaged"
    usable, problems = [], []
    for entry in entries:
        notebook, note = _gradable(entry, scratch / str(len(usable)))
        (usable if notebook else problems).append((entry, notebook, note))
    if not usable:
        latest = max(entries, key=lambda e: (e.when or datetime.min.replace(tzinfo=timezone.utc),
                                             e.rank))
        return Submission(student_id, None, "no notebook found: " +
                          "; ".join(note for *_, note in problems), name,
                          lms=latest.lms, exported=latest.exported)
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    usable.sort(key=lambda u: (u[0].when or epoch, u[0].rank, _resubmission(u[0].original)))
    entry, notebook, note = usable[-1]
    ignored = [e.original for e, *_ in usable[:-1]] + [e.original for e, *_ in problems]
    notes = [note] if note else []
    if ignored:
        notes.append(f"graded {entry.original}, the latest submitted; ignored "
                     f"{', '.join(ignored)}")
    return Submission(student_id, notebook, "", name, "; ".join(notes), entry.when, entry.lms,
                      entry.exported)


def _resubmission(name: str) -> int:
    """Copy number in `x (2).ipynb` or `x-2.ipynb`, for files with the same time."""
    m = re.search(r"(?: \((\d+)\)|-(\d+))\.ipynb$", name)
    return int(m.group(1) or m.group(2)) if m else 0
