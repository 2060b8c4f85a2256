"""The README's instructor commands work as written: after the two setup commands (the
repository's .venv exists), the block in "Assignments and grading (instructors)" runs line by
line in a fresh folder, activation first, and leaves what it promises."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from autograder.course import source_notebook
from autograder.isolation.sandbox import sandbox_problem

ROOT = Path(__file__).resolve().parents[1]


def instructor_block() -> list[str]:
    """The first bash block of the README's instructors' section, as lines."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Assignments and grading (instructors)", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_block_activates_the_environment_first_and_runs_the_grader():
    lines = instructor_block()
    assert lines[0] == ". .venv/bin/activate"
    assert all(line.startswith("python -m autograder ") for line in lines[1:]), lines


@pytest.mark.skipif(bool(sandbox_problem()), reason=f"needs bubblewrap: {sandbox_problem()}")
@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "activate").exists(),
                    reason="the README's commands need the .venv that make setup creates")
def test_the_instructors_commands_run_as_written(tmp_path):
    work = tmp_path / "course"  # `publish --out ../seqlab-students` lands in tmp_path
    (work / "subs" / "jsmith").mkdir(parents=True)
    shutil.copy(source_notebook("01_language_models"),
                work / "subs" / "jsmith" / "01_language_models.ipynb")
    (work / ".venv").symlink_to(ROOT / ".venv")
    script = "set -e\n" + "\n".join(instructor_block()) + "\n"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin:/usr/sbin:/sbin"  # a fresh shell: no environment active
    run = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert (work / "release" / "01_language_models" / "01_language_models.ipynb").exists()
    grades = (work / "graded" / "grades.csv").read_text()
    assert grades.splitlines()[1].startswith("jsmith,"), grades
    assert "selftest 07_bleu: ok" in run.stdout, run.stdout[-2000:]
    edition = tmp_path / "seqlab-students"
    assert json.loads((edition / "notebooks" / "01_language_models.ipynb").read_text())
    assert "github.com/COURSE/NAME" in (edition / "README.md").read_text()
