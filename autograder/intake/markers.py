"""The instructor's markers in a master notebook, read one way everywhere: the solution and
hidden-test regions (``### BEGIN SOLUTION`` ... ``### END SOLUTION``, ``### BEGIN HIDDEN TESTS``
... ``### END HIDDEN TESTS``), which the release removes, grading's feedback keeps secret and
Gradescope's visibility follows."""

from __future__ import annotations

import re

# Lenient on purpose: a misspelled "### BEGIN HIDEN TESTS" still marks a secret region, which
# nbgrader would otherwise release as ordinary code.
BEGIN = re.compile(r"^#+\s*BEGIN\b", re.IGNORECASE)
END = re.compile(r"^#+\s*END\b", re.IGNORECASE)


def hidden_lines(source: str) -> set[int]:
    """Line numbers (1-based) inside the hidden-test regions of a test cell: the one reading of
    the markers that release, grading feedback and Gradescope's visibility share."""
    inside, lines = False, set()
    for number, line in enumerate(source.splitlines(), 1):
        text = line.strip()
        if BEGIN.match(text):
            inside = "HID" in text.upper()
        elif END.match(text):
            inside = False
        elif inside:
            lines.add(number)
    return lines


def public_source(source: str) -> str:
    """A test cell's source as its release shows it: without its hidden-test regions, their
    marker lines included (as nbgrader's ClearHiddenTests leaves it; read leniently, so a
    misspelled marker hides more, never less)."""
    hidden = hidden_lines(source)
    kept, inside = [], False
    for number, line in enumerate(source.splitlines(), 1):
        text = line.strip()
        if BEGIN.match(text) and "HID" in text.upper():
            inside = True
        elif inside and END.match(text):
            inside = False
        elif not inside and number not in hidden:
            kept.append(line)
    return "\n".join(kept)


def has_visible_code(source: str) -> bool:
    """Whether a test cell has code outside its hidden regions (the tests a student sees)."""
    hidden = hidden_lines(source)
    return any(line.strip() and not line.lstrip().startswith("#") and n not in hidden
               for n, line in enumerate(source.splitlines(), 1))
