"""The lecture runner as a student edition or Colab gets it: installed without ``-e``, it finds
the notebooks where it is told (default ``./notebooks``), never beside its own files, and it
refuses loudly when there are none."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from helpers import fresh_venv

from seqlab import measured
from seqlab.course import main, run_notebook

ROOT = Path(__file__).resolve().parents[1]


def _lecture(folder: Path) -> Path:
    """A one-second lecture that records its seed and what its kernel's environment holds."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    params = nbformat.v4.new_code_cell("SEED = 0")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "import os\nimport seqlab\n"
        "seqlab.record('seed', SEED)\n"
        "seqlab.record('fast', os.environ['SEQLAB_FAST'])\n"
        "seqlab.record('omp_wait_policy', os.environ.get('OMP_WAIT_POLICY', 'unset'))\n"
        "seqlab.record('extra', os.environ.get('COURSE_TEST_EXTRA', 'unset'))\n"
        "seqlab.record('module', seqlab.__file__)")]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "01_tiny.ipynb")
    return folder / "01_tiny.ipynb"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the course installed as ``pip install .`` does (not editable), from a
    copy of the package's files, so the build leaves nothing in the checkout."""
    tmp = tmp_path_factory.mktemp("installed")
    source = tmp / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("lib", "autograder"):
        shutil.copytree(ROOT / folder, source / folder, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = fresh_venv(tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", "--no-index", str(source)],
                          cwd=tmp, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv, env


def test_installed_runner_runs_the_lectures_it_is_pointed_at(installed, tmp_path):
    venv, env = installed
    _lecture(tmp_path / "course" / "notebooks")
    done = subprocess.run([venv / "bin" / "python", "-I", "-m", "seqlab.course", "--notebooks",
                           str(tmp_path / "course" / "notebooks"), "--out", "executed"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "01_tiny.ipynb:" in done.stdout
    records = json.loads((tmp_path / "executed" / "results" / "01_tiny.json").read_text())
    assert Path(records["module"]).resolve().is_relative_to(venv.resolve())  # not the checkout
    assert records["fast"] == "1"


@pytest.mark.parametrize("args", [[], ["--notebooks", "nowhere"]], ids=["default", "missing"])
def test_installed_runner_without_notebooks_fails_with_a_message(installed, tmp_path, args):
    venv, env = installed
    done = subprocess.run([venv / "bin" / "python", "-I", "-m", "seqlab.course", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and done.stdout == ""
    assert "nothing to run" in done.stderr and "--notebooks" in done.stderr


def test_a_named_notebook_that_does_not_exist_is_refused(tmp_path, capsys):
    assert main([str(tmp_path / "01_missing.ipynb")]) != 0
    assert "01_missing.ipynb" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--notebooks", "notebooks", "01_tiny.ipynb"],
                                  ["notebooks/01_tiny.ipynb"]], ids=["in-folder", "path"])
def test_a_named_lecture_runs_by_its_name_in_the_folder_or_by_its_path(tmp_path, monkeypatch,
                                                                       args):
    _lecture(tmp_path / "notebooks")
    monkeypatch.chdir(tmp_path)
    assert main([*args, "--out", "out"]) == 0
    assert (tmp_path / "out" / "01_tiny.ipynb").is_file()
    assert json.loads((tmp_path / "out" / "results" / "01_tiny.json").read_text())["seed"] == 0


def test_a_full_mode_run_writes_the_record_the_library_ships(tmp_path, monkeypatch, capsys):
    path = _lecture(tmp_path / "notebooks")
    nb = nbformat.read(path, as_version=4)  # it prints its sweep, which is not measured yet
    nb.cells.append(nbformat.v4.new_code_cell("from seqlab import measured\n"
                                            "measured.sweep('01_tiny').show()"))
    nbformat.write(nb, path)
    monkeypatch.chdir(tmp_path)
    assert main(["--full", "--record", "measured", "01_tiny.ipynb", "--out", "out"]) == 0
    full = measured.full_mode("01_tiny", tmp_path / "measured")
    assert full.records["fast"] == "0" and full.records["seed"] == 0
    assert "python -m seqlab.course --full 01_tiny.ipynb" in full.describe()
    nb.cells.append(nbformat.v4.new_code_cell("1 / 0"))  # any other error: no record
    nbformat.write(nb, path)
    (tmp_path / "measured" / "01_tiny.full.json").unlink()
    assert main(["--full", "--record", "measured", "01_tiny.ipynb", "--out", "out"]) == 1
    assert "no record written: cell 3: ZeroDivisionError" in capsys.readouterr().err
    assert not (tmp_path / "measured" / "01_tiny.full.json").exists()
    with pytest.raises(SystemExit):
        main(["--record", "measured", "01_tiny.ipynb"])  # a FAST run is no full-mode record
    assert "--record writes full-mode records: pass --full too" in capsys.readouterr().err


def test_environment_and_parameters_reach_the_kernel_only(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # a caller's choice is kept
    monkeypatch.delenv("COURSE_TEST_EXTRA", raising=False)
    path = _lecture(tmp_path / "notebooks")
    run_notebook(path, tmp_path / "out", env={"COURSE_TEST_EXTRA": "kernel"},
                 parameters="SEED = 3")
    records = json.loads((tmp_path / "out" / "results" / "01_tiny.json").read_text())
    assert records["seed"] == 3 and records["extra"] == "kernel"
    assert records["omp_wait_policy"] == "ACTIVE"
    assert "COURSE_TEST_EXTRA" not in os.environ and "SEQLAB_NOTEBOOK" not in os.environ


def test_parameters_need_a_parameters_cell(tmp_path):
    path = _lecture(tmp_path / "notebooks")
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].metadata["tags"] = []
    nbformat.write(nb, path)
    with pytest.raises(ValueError, match="parameters: 01_tiny.ipynb has no cell tagged"):
        run_notebook(path, tmp_path / "out", parameters="SEED = 3")
