"""Gradescope: a bundle that grades one submission in Gradescope's container, same sandbox.

``bundle`` writes the zip to upload as a Gradescope "programming assignment" autograder:
``setup.sh`` (builds the image: bubblewrap, a venv with this project), ``run_autograder`` (grades
``/autograder/submission`` and writes ``/autograder/results/results.json``), the course's master
notebook (hidden tests; outside the sandbox's view) and this project's source. ``run`` is what
``run_autograder`` calls. Gradescope's container has Docker's default capabilities, where
bubblewrap cannot start: grading then uses the uid fallback (``isolation``), for which
``run_autograder`` first makes the hidden tests, the results and the submission root's alone.
Set ``AUTOGRADER_ROOT`` (and ``AUTOGRADER_PYTHON``) to try a bundle outside Gradescope, against
a folder laid out like ``/autograder``.

Gradescope grades one submission at a time, so its similarity report compares the answers with
the course library only, never with classmates (grade the class's export with ``grade`` for
that): in results.json's ``extra_data`` and the autograder's output, which students do not see.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

from ..authoring.course import COURSE, check_assignment, source_notebook
from ..authoring.release import has_visible_code, release
from ..intake.normalize import (
    given_imports,
    master_step,
    plan,
    read_notebook,
    refuses_attention,
    withheld,
)
from ..intake.submissions import choose_notebook, student_files
from ..isolation.kinds import UID, choose, refuse_if_exposed
from ..isolation.runner import remove_tree
from ..isolation.sandbox import WITHHELD, Limits, Sandbox, package_folders, support_folder
from . import similarity
from .results import gradescope_tests

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
if ! command -v bwrap >/dev/null || ! command -v setpriv >/dev/null \\
        || ! python3 -c "import ensurepip, venv" 2>/dev/null; then
    apt-get update
    apt-get install -y --no-install-recommends bubblewrap util-linux python3 python3-venv \\
        python3-pip
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


def _results(score: float, output: str, tests: list[dict]) -> dict:
    return {"score": score, "output": output, "tests": tests, "visibility": "visible",
            "stdout_visibility": "hidden"}


def _library_matches(course: Path, assignment: str, steps) -> list[dict]:
    """The answers of one submission against the course library, printed for the instructor;
    a failure here is reported, and never costs the grade."""
    released = course / "release" / assignment / f"{assignment}.ipynb"
    try:
        found = similarity.library_only(
            answers_of_student=similarity.answers(steps),
            release=read_notebook(released) if released.exists() else None,
            solutions=similarity.solutions(read_notebook(source_notebook(assignment, course))))
    except Exception as err:
        print(f"similarity: not checked ({type(err).__name__}: {err})")
        return [{"error": f"{type(err).__name__}: {err}"}]
    for m in found:
        print(f"similarity: answer {m['cell']} is {m['similarity']:.0%} {m['match']}")
    return found


def run(assignment: str, submission: Path, results: Path, course: Path = COURSE,
        limits: Limits | None = None) -> dict:
    """Grade one Gradescope submission folder; always write ``results``, even on failure."""
    from .execute import grade_steps

    results = Path(results)
    results.parent.mkdir(parents=True, exist_ok=True)
    master = read_notebook(source_notebook(assignment, course))
    steps_master = [master_step(c) for c in master["cells"]]
    zero = [{"name": s.grade_id, "score": 0.0, "max_score": s.points,
             "visibility": "visible" if has_visible_code(s.source) else "hidden"}
            for s in steps_master if s.kind == "test"]
    try:
        isolation = choose()  # RuntimeError saying why there is none
        if isolation.kind == UID:  # no mounts hide the hidden tests: permissions must
            refuse_if_exposed([Path(course), results.parent, Path(submission),
                               *package_folders(WITHHELD)], packages=WITHHELD)
        chosen = choose_notebook("student", student_files(Path(submission)), assignment,
                                 Path(tempfile.mkdtemp()))
        steps, problem = None, chosen.problem
        if not problem:
            try:
                steps = plan(master, read_notebook(chosen.notebook))
            except ValueError as err:  # unreadable, or over a submission's limits
                problem = str(err)
        if problem:
            report = _results(0.0, problem, zero)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                sandbox = Sandbox(support_folder(Path(tmp), isolation), limits or Limits(),
                                  isolation, withhold=withheld(master),
                                  refuse_attention=refuses_attention(master),
                                  preload=given_imports(master))
                try:
                    result = grade_steps(steps, sandbox, f"gradescope-{os.getpid()}")
                finally:
                    sandbox.close_template()
                    remove_tree(sandbox.support)
            tests = gradescope_tests(result, {t["name"]: t["visibility"] for t in zero})
            report = _results(sum(t["score"] for t in tests),
                              f"Graded in isolation: {sandbox.limits_in_force}.\n"
                              f"{result['status']}. {result['message']}".strip(), tests)
            report["extra_data"] = {"similarity": _library_matches(course, assignment, steps)}
    except Exception as err:  # never leave Gradescope without a results.json
        report = _results(0.0, f"grading failed ({type(err).__name__}: {err}); this is not "
                               "your fault, please tell your instructor", zero)
    tmp = results.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    os.replace(tmp, results)
    return report
