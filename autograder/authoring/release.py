"""Student releases that provably contain no solution and no hidden test."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat

from ..course import COURSE, check_assignment, generate, source_notebook, working_course
from ..intake.markers import BEGIN, END


class ReleaseLeak(RuntimeError):
    """The generated release still contains solution or hidden-test text."""


def regions(source: nbformat.NotebookNode) -> tuple[set[str], set[str]]:
    """(lines inside solution or hidden-test regions, lines outside them) of the source,
    stripped, without blank and comment lines."""
    secret, public = set(), set()
    for cell in source.cells:
        inside = False
        for line in cell.source.splitlines():
            text = line.strip()
            if BEGIN.match(text):
                inside = True
            elif END.match(text):
                inside = False
            elif text and not text.startswith("#"):
                (secret if inside else public).add(text)
    return secret, public


def _secret_lines(source: nbformat.NotebookNode) -> set[str]:
    """Lines that appear only inside solution or hidden-test regions of the source."""
    secret, public = regions(source)
    return secret - public


def leaks(source_path: Path, release_path: Path) -> list[str]:
    """Solution or hidden-test lines (and region markers) found in the release notebook."""
    source = nbformat.read(source_path, as_version=4)
    release = nbformat.read(release_path, as_version=4)
    secret = _secret_lines(source)
    found = []
    for cell in release.cells:
        for line in cell.source.splitlines():
            text = line.strip()
            if text in secret or BEGIN.match(text) or END.match(text):
                found.append(text)
    return found


def release(assignment: str, out: Path, course: Path = COURSE) -> Path:
    """Write the student version of ``assignment`` to ``out/<assignment>/``; return that folder.

    Raises ``ReleaseLeak`` (and writes nothing) if any solution or hidden-test line survived.
    """
    check_assignment(assignment, course)
    with tempfile.TemporaryDirectory() as tmp:
        work = working_course(assignment, Path(tmp), course)
        released = generate(assignment, work)
        notebook = released / f"{assignment}.ipynb"
        found = leaks(source_notebook(assignment, course), notebook)
        if found:
            raise ReleaseLeak(
                f"the release of {assignment} still contains {len(found)} secret line(s), e.g. "
                f"{found[0]!r}; check the BEGIN/END SOLUTION and HIDDEN TESTS markers"
            )
        target = Path(out) / assignment
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(released, target)
    return target
