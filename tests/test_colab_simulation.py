"""Colab, simulated: every lecture's and released assignment's setup cell runs in a fresh
environment as on Colab.

A new virtual environment sees this environment's packages (as a Colab runtime has torch, numpy
and matplotlib preinstalled) but not the course library. A stand-in ``google.colab`` module makes
the setup cell take its Colab branch; its ``%pip`` line goes to a stand-in shell that records the
command and installs this checkout (for assignments: the student edition built from it) in place
of the repository URL. Then the notebook's next code cells (parameters and imports; for an
assignment, the imports of ``autograder.checks`` and the first answer cell) run. A notebook fails
when its setup cell would reinstall torch, runs any other command, installs more than the course
library (an upgrade of a package Colab already imported would need a runtime restart), or leaves
an import unresolved.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import fresh_venv

from autograder.authoring.publish import publish
from autograder.course import assignments

ROOT = Path(__file__).resolve().parents[1]
LECTURES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

DRIVER = r'''
import builtins, json, os, shlex, subprocess, sys, types

from IPython.core.inputtransformer2 import TransformerManager

notebook, checkout = sys.argv[1:3]
google, colab = types.ModuleType("google"), types.ModuleType("google.colab")
google.colab = colab
sys.modules.update({"google": google, "google.colab": colab})
calls = []


class ColabShell:
    """What the setup cell may ask of IPython: %pip, answered by installing this checkout."""

    def run_line_magic(self, name, line):
        calls.append(f"%{name} {line}")
        if name != "pip":
            raise RuntimeError(f"the setup cell ran %{name}; only %pip is expected")
        args = [checkout if a.startswith("seqlab @ ") else a for a in shlex.split(line)]
        done = os.path.join(sys.prefix, "installed " + " ".join(args).replace("/", "|"))
        if not os.path.exists(done):  # the same command in this venv before: no need to rebuild
            subprocess.run([sys.executable, "-m", "pip", *args, "--no-deps", "--no-index",
                            "--no-build-isolation"], check=True, capture_output=True)
            open(done, "w").close()

    def system(self, command):
        calls.append(f"!{command}")
        raise RuntimeError(f"the setup cell ran a shell command: {command}")


builtins.get_ipython = ColabShell
cells = [c for c in json.load(open(notebook))["cells"] if c["cell_type"] == "code"][:3]
scope = {"__name__": "__main__"}
for cell in cells:
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    exec(compile(TransformerManager().transform_cell(source), "<cell>", "exec"), scope)
import seqlab, torch
print(json.dumps({"calls": calls, "seqlab": seqlab.__file__, "torch": torch.__file__}))
'''


@pytest.fixture(scope="module")
def colab_venv(tmp_path_factory):
    return fresh_venv(tmp_path_factory.mktemp("colab"))


@pytest.fixture(scope="module")
def edition_venv(tmp_path_factory):
    """A second fresh venv, and the student edition it installs in place of its repository."""
    folder = tmp_path_factory.mktemp("colab-edition")
    return fresh_venv(folder), publish(folder / "edition", "https://github.com/example/course",
                                       log=lambda *a: None)


def _run_like_colab(venv: Path, notebook: Path, checkout: Path, tmp_path: Path) -> dict:
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(SEQLAB_FAST="1", MPLBACKEND="Agg")
    run = subprocess.run([venv / "bin" / "python", "-I", "driver.py", str(notebook),
                          str(checkout)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(report["calls"]) == 1 and report["calls"][0].startswith("%pip install"), report
    assert "torch" not in report["calls"][0], report["calls"]
    assert Path(report["seqlab"]).resolve().is_relative_to(venv.resolve()), report["seqlab"]
    assert not Path(report["torch"]).resolve().is_relative_to(venv.resolve()), report["torch"]
    return report


def test_installing_the_course_on_colab_adds_only_the_course_library(colab_venv, tmp_path):
    """With Colab's packages present, pip resolves the checkout's dependencies to what is there:
    it would install seqlab and nothing else (no torch, no upgrade needing a restart)."""
    report = tmp_path / "report.json"
    run = subprocess.run([colab_venv / "bin" / "python", "-m", "pip", "install", "--dry-run",
                          "--no-index", "--no-build-isolation", "--report", str(report),
                          str(ROOT)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    names = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert names == ["seqlab"], names


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.stem)
def test_a_lectures_setup_cell_works_on_colab(path, colab_venv, tmp_path):
    _run_like_colab(colab_venv, path, ROOT, tmp_path)


@pytest.mark.parametrize("name", assignments())
def test_a_released_assignments_setup_cell_works_on_colab(name, edition_venv, tmp_path):
    venv, edition = edition_venv
    _run_like_colab(venv, edition / "assignments" / name / f"{name}.ipynb", edition, tmp_path)
