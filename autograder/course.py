"""The nbgrader course: where it lives, and working copies that grading writes into.

Every run works in a copy (``<out>/course``) holding the config and the assignment's source, so
the repository is never written to and each run's gradebook is kept beside its grades.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

COURSE = Path(os.environ.get("SEQLAB_COURSE", Path(__file__).resolve().parents[1] / "assignments"))


def assignments(course: Path = COURSE) -> list[str]:
    """Names of the assignments in ``course/source``."""
    return sorted(p.name for p in (course / "source").iterdir() if p.is_dir())


def check_assignment(name: str, course: Path = COURSE) -> str:
    known = assignments(course)
    if name not in known:
        raise ValueError(f"unknown assignment {name!r}; known: {', '.join(known) or 'none'}")
    return name


def source_notebook(assignment: str, course: Path = COURSE) -> Path:
    return course / "source" / assignment / f"{assignment}.ipynb"


def working_course(assignment: str, dest: Path, course: Path = COURSE) -> Path:
    """Copy the config and one assignment's source into ``dest``; return ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(course / "nbgrader_config.py", dest / "nbgrader_config.py")
    target = dest / "source" / assignment
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(course / "source" / assignment, target)
    return dest


SKIPPED_IMPORTS = ("rfc3987_syntax",)
"""Optional packages grading processes do without. jsonschema (imported by nbformat and
nbgrader) compiles 38 grammars at import for its IRI format checks when rfc3987_syntax is
installed: about a second of CPU in every process (each grading worker, each nbgrader command)
for a check that nothing here makes."""


def skip_slow_imports() -> None:
    """Make ``SKIPPED_IMPORTS`` unimportable in this process (their importers treat them as not
    installed); call before nbformat is imported."""
    for name in SKIPPED_IMPORTS:
        sys.modules.setdefault(name, None)


NBGRADER_MAIN = (f"import runpy, sys; sys.modules.update(dict.fromkeys({SKIPPED_IMPORTS!r})); "
                 "runpy.run_module('nbgrader', run_name='__main__', alter_sys=True)")


def nbgrader(*args: str, cwd: Path, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run an nbgrader command in ``cwd`` with this interpreter's tools on PATH (as
    ``python -m nbgrader`` does, without ``SKIPPED_IMPORTS``)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [sys.executable, "-c", NBGRADER_MAIN, *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=timeout,
    )


def generate(assignment: str, work: Path) -> Path:
    """``nbgrader generate_assignment`` in the working course; return the release folder.

    This also records the assignment, its test cells and points in ``work/gradebook.db``.
    """
    result = nbgrader("generate_assignment", assignment, "--force", cwd=work)
    release = work / "release" / assignment
    if result.returncode != 0 or not release.exists():
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{result.stdout[-3000:]}"
                           f"{result.stderr[-3000:]}")
    return release
