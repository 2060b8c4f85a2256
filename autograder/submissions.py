"""Find each student's notebook in a folder of submissions or an LMS zip export."""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path


@dataclass
class Submission:
    student_id: str
    notebook: Path | None  # None when there is nothing gradable; ``problem`` says why
    problem: str = ""

    @property
    def timestamp(self) -> datetime | None:
        """When the file arrived (for zip exports: the time the LMS stored for it)."""
        if self.notebook is None:
            return None
        return datetime.fromtimestamp(self.notebook.stat().st_mtime, timezone.utc)


def safe_id(name: str) -> str:
    """A student id nbgrader can use as a folder name."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "student"
    return cleaned


def find_notebooks(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and not p.name.startswith("._"))


MAX_MEMBER = 200 * 2**20  # bytes; zipfile never inflates a member past its declared size


def _extract(archive: Path, dest: Path) -> Path:
    """Unzip safely: members that would land outside ``dest``, and members over MAX_MEMBER
    (zip bombs), are skipped."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with zipfile.ZipFile(archive) as zf:
        for member in zf.infolist():
            target = (dest / member.filename).resolve()
            if root in target.parents and not member.is_dir() and \
                    member.file_size <= MAX_MEMBER:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(member))
                stamp = datetime(*member.date_time, tzinfo=timezone.utc).timestamp()
                os.utime(target, (stamp, stamp))
    return dest


def collect(path: Path, assignment: str, scratch: Path) -> list[Submission]:
    """One ``Submission`` per student.

    ``path`` is a folder with one sub-folder per student, or a zip of such folders, or a zip of
    flat files named ``<student>_<anything>.ipynb`` (the Canvas export style). A student with
    several notebooks is graded on the one named after the assignment, if there is one.
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"submissions path {path} does not exist")
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise ValueError(f"submissions path {path} is neither a folder nor a zip file")
        path = _extract(path, scratch / "unzipped")
        entries = [p for p in path.iterdir() if not p.name.startswith("__MACOSX")]
        flat = [p for p in entries if p.is_file() and p.suffix == ".ipynb"]
        if flat:
            by_student: dict[str, list[Path]] = {}
            for nb in flat:
                by_student.setdefault(safe_id(nb.name.split("_")[0]), []).append(nb)
            return [choose_notebook(sid, nbs, assignment)
                    for sid, nbs in sorted(by_student.items())]
        if len(entries) == 1 and entries[0].is_dir() and all(
            p.is_dir() for p in entries[0].iterdir()
        ):
            path = entries[0]  # a zip holding one top-level folder of student folders
    subs = []
    for folder in sorted(p for p in path.iterdir() if p.is_dir()):
        subs.append(choose_notebook(safe_id(folder.name), find_notebooks(folder), assignment))
    return subs


def choose_notebook(student_id: str, notebooks: list[Path], assignment: str) -> Submission:
    if not notebooks:
        return Submission(student_id, None, "no notebook (.ipynb) found in the submission")
    if len(notebooks) == 1:
        return Submission(student_id, notebooks[0])
    named = [nb for nb in notebooks if nb.stem == assignment]
    if len(named) == 1:
        return Submission(student_id, named[0])
    names = ", ".join(nb.name for nb in notebooks)
    return Submission(student_id, None,
                      f"several notebooks ({names}) and none named {assignment}.ipynb; "
                      "submit exactly one")
