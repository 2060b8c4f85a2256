"""Late penalties: a rule from the course's config, applied to a time the grader trusts.

The trusted time is the LMS export's (a ``--timestamps`` CSV, or the time a zip export stored for
the file) or the file's arrival on disk. Anything written inside the submission (notebook
metadata, a timestamp.txt) is ignored: the student controls it.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .submissions import safe_id

UTC = timezone.utc


ALL = "*"  # an extension for every assignment


@dataclass(frozen=True)
class LatePolicy:
    """``due``: assignment -> due time (UTC). Each started day late costs ``per_day`` of the
    maximum score; after ``max_days`` days the score is 0. ``extensions``: (student id,
    assignment or ``ALL``) -> that student's own due time, which replaces the assignment's."""

    due: dict[str, datetime] = field(default_factory=dict)
    per_day: float = 0.0
    max_days: float = math.inf
    extensions: dict[tuple[str, str], datetime] = field(default_factory=dict)

    def due_for(self, assignment: str, student: str | None = None) -> datetime | None:
        """The due time of ``assignment`` for ``student``: their extension, if they have one."""
        if student is not None:
            for key in ((student, assignment), (student, ALL)):
                if key in self.extensions:
                    return self.extensions[key]
        return self.due.get(assignment)

    def penalty(self, assignment: str, submitted: datetime | None, raw: float,
                max_score: float, student: str | None = None) -> tuple[float, str]:
        """(points taken off, a sentence for the student; '' when on time)."""
        due = self.due_for(assignment, student)
        if due is None or submitted is None or submitted <= due:
            return 0.0, ""
        days = (submitted - due).total_seconds() / 86400
        if days > self.max_days:
            off = raw
        else:
            off = min(raw, math.ceil(days) * self.per_day * max_score)
        whose = "your extended deadline" if due != self.due.get(assignment) else "the deadline"
        return off, (f"submitted {days:.2f} day(s) after {whose} "
                     f"({due:%Y-%m-%d %H:%M} UTC): {off:g} point(s) off")


def _utc(text: str, where: str) -> datetime:
    try:
        when = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not an ISO 8601 time "
                         "(e.g. 2026-12-01T23:59:00+00:00)") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def load_extensions(path: Path | None) -> dict[tuple[str, str], datetime]:
    """Per-student due dates from a CSV with columns student_id, due (ISO 8601) and, optional,
    assignment (empty or missing: every assignment)."""
    if path is None or not Path(path).exists():
        return {}
    rows = _rows(path, "extensions", ("student_id", "due"), " (and optionally assignment)")
    return {(safe_id(row["student_id"]), (row.get("assignment") or "").strip() or ALL):
            _utc(row["due"], f"{path} ({row['student_id']})") for row in rows}


def _rows(path: Path, what: str, columns: tuple[str, ...], optional: str = "") -> list[dict]:
    """The rows of the CSV ``path``; ValueError naming the columns it needs where it lacks one."""
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or not set(columns) <= set(reader.fieldnames):
            raise ValueError(f"{what} file {path} needs the columns {', '.join(columns)}"
                             f"{optional}; it has {reader.fieldnames}")
        return list(reader)


def load_policy(path: Path | None, extensions: Path | None = None) -> LatePolicy:
    """Read ``[due]`` and ``[penalty]`` (per_day, max_days) from a TOML file, and per-student
    extensions (``load_extensions``) from the CSV ``extensions`` (default: extensions.csv
    beside the TOML file); none: no penalty."""
    if extensions is None and path is not None:
        extensions = Path(path).with_name("extensions.csv")
    granted = load_extensions(extensions)
    if path is None or not Path(path).exists():
        return LatePolicy(extensions=granted)
    import tomllib  # Python 3.11+, as nbgrader needs

    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    due = {name: _utc(value, f"{path} [due] {name}")
           for name, value in data.get("due", {}).items()}
    rule = data.get("penalty", {})
    per_day, max_days = rule.get("per_day", 0.0), rule.get("max_days", math.inf)
    for name, value in (("per_day", per_day), ("max_days", max_days)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{path} [penalty] {name} must be a number >= 0, got {value!r}")
    return LatePolicy(due, float(per_day), float(max_days), granted)


def load_timestamps(path: Path | None) -> dict[str, datetime]:
    """student_id -> submission time from an LMS CSV with columns student_id, timestamp."""
    if path is None:
        return {}
    return {safe_id(row["student_id"]): _utc(row["timestamp"], f"{path} ({row['student_id']})")
            for row in _rows(path, "timestamps", ("student_id", "timestamp"))}
