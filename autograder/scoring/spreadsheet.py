"""CSV files an instructor opens in a spreadsheet: every cell is data, never a formula.

Students control text that lands in these files (a display name in the LMS, a file name, the
message of an exception their code raised). A spreadsheet evaluates a cell that starts with
``=``, ``+``, ``-`` or ``@`` (and, in some, a tab or carriage return) as a formula, which can
fetch URLs or run commands on the instructor's machine. So, as OWASP recommends for CSV
injection, such a cell is written with a leading apostrophe, which spreadsheets show as text;
numbers (``-0.5``) stay numbers. Writing the same cell again changes nothing more.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def cell(value):
    """``value`` as a spreadsheet will show it: text that a spreadsheet would evaluate gets a
    leading apostrophe; numbers, and text that is a plain number, are kept as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and \
            not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping | Sequence]) -> None:
    """Write ``rows`` (dicts keyed by ``columns``, extra keys ignored, missing ones empty; or
    sequences in the order of ``columns``) under a header, every cell through ``cell``, as a
    whole: a reader never sees half a file."""
    path = Path(path)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(columns)
    for row in rows:
        values = [row.get(c, "") for c in columns] if isinstance(row, Mapping) else row
        writer.writerow([cell(v) for v in values])
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}")
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
        handle.write(text.getvalue())
    os.replace(tmp, path)
