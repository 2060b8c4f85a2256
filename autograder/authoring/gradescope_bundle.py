"""Gradescope: the bundle to upload as a programming assignment's autograder, which grades one
submission in Gradescope's container with the same sandbox (``scoring.gradescope.run``).

``bundle`` writes the zip: ``setup.sh`` (builds the image: bubblewrap, a venv with this
project), ``run_autograder`` (grades ``/autograder/submission`` and writes
``/autograder/results/results.json``), the course's master notebook (hidden tests; outside the
sandbox's view), its release (the given code the similarity check subtracts) and this project's
source. Set ``AUTOGRADER_ROOT`` (and ``AUTOGRADER_PYTHON``) to try a bundle outside Gradescope,
against a folder laid out like ``/autograder``.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

from ..course import COURSE, check_assignment, source_notebook
from ..isolation.limits import Limits
from .release import release

PROJECT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "lib/seqlab", "autograder")

SETUP = """#!/usr/bin/env bash
# Gradescope image setup: choose the Ubuntu 24.04 base image (Python 3.12). AUTOGRADER_ROOT,
# AUTOGRADER_TORCH (a pip requirement for torch) and AUTOGRADER_PIP_FLAGS let the same script
# build a copy elsewhere (the project's tests do).
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
# Gradescope has no GPU: the CPU wheel of torch is a tenth of the size.
TORCH="${AUTOGRADER_TORCH:-torch --index-url https://download.pytorch.org/whl/cpu}"
if ! command -v bwrap >/dev/null || ! python3 -c "import ensurepip, venv" 2>/dev/null; then
    apt-get update
    apt-get install -y --no-install-recommends bubblewrap python3 python3-venv python3-pip
fi
FLAGS="${AUTOGRADER_PIP_FLAGS---no-cache-dir}"
python3 -m venv "$ROOT/venv"
"$ROOT/venv/bin/pip" install -q $FLAGS $TORCH
"$ROOT/venv/bin/pip" install -q $FLAGS "$ROOT/source/project[grader]"
# the uid fallback's sandboxes are other users: the packages answers may not use are closed to
# them (from where run_autograder starts, so that the venv's copies are the ones found)
cd "$ROOT/source" && "$ROOT/venv/bin/python" -m autograder hide-withheld
"""

RUN = """#!/usr/bin/env bash
# Grades /autograder/submission into /autograder/results/results.json (paths overridable).
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}}"
mkdir -p "$ROOT/results"
# the uid fallback's sandboxes must not read the hidden tests, the results or the submission
chmod -R go-rwx "$ROOT/source" "$ROOT/results" "$ROOT/submission"
cd "$ROOT/source"
exec "$PYTHON" -m autograder --course "$ROOT/source/course" gradescope-run {assignment} \\
    --submission "$ROOT/submission" --results "$ROOT/results/results.json" {flags}
"""


def bundle(assignment: str, out: Path, course: Path = COURSE,
           limits: Limits | None = None) -> Path:
    """Write the Gradescope autograder zip for ``assignment``; return its path."""
    check_assignment(assignment, course)
    limits = limits or Limits()
    flags = (f"--timeout-cell {limits.timeout_cell:g} --timeout-notebook "
             f"{limits.timeout_notebook:g} --memory-mb {limits.memory_mb} "
             f"--max-procs {limits.max_procs} --cpus {limits.cpus:g}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in (("setup.sh", SETUP),
                           ("run_autograder", RUN.format(assignment=assignment, flags=flags))):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100755 << 16  # executable: Gradescope runs them directly
            zf.writestr(info, text)
        zf.write(course / "nbgrader_config.py", "course/nbgrader_config.py")
        zf.write(source_notebook(assignment, course),
                 f"course/source/{assignment}/{assignment}.ipynb")
        with tempfile.TemporaryDirectory() as folder:  # given code, for the similarity report
            released = release(assignment, Path(folder), course) / f"{assignment}.ipynb"
            zf.write(released, f"course/release/{assignment}/{assignment}.ipynb")
        for entry in SOURCES:
            path = PROJECT / entry
            files = [path] if path.is_file() else sorted(
                p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            for file in files:
                zf.write(file, f"project/{file.relative_to(PROJECT)}")
    os.replace(tmp, out)
    return out
