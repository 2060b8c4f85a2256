"""The Gradescope bundle, run here against a folder laid out like Gradescope's /autograder."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from autograder.authoring.gradescope_bundle import bundle
from autograder.authoring.release import release
from autograder.course import source_notebook
from autograder.isolation.sandbox import Limits, sandbox_problem

A = "01_language_models"
pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap")


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """An unpacked bundle, as setup.sh would leave it (with this venv as the image's Python)."""
    tmp = tmp_path_factory.mktemp("gradescope")
    path = bundle(A, tmp / "bundle.zip", limits=Limits(timeout_cell=10, timeout_notebook=120))
    root = tmp / "autograder"
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        zf.extractall(root / "source")
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
    for script in ("setup.sh", "run_autograder"):
        (root / "source" / script).chmod(modes[script] & 0o777)
    return root, names, modes, tmp


def grade_one(root, notebook_text, name="submission.ipynb"):
    sub = root / "submission"
    shutil.rmtree(sub, ignore_errors=True)
    sub.mkdir()
    (sub / name).write_text(notebook_text)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    done = subprocess.run([str(root / "source" / "run_autograder")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_bundle_layout(image):
    _, names, modes, _ = image
    assert {"setup.sh", "run_autograder", f"course/source/{A}/{A}.ipynb",
            "project/pyproject.toml", "project/autograder/isolation/inside/runner.py",
            "project/lib/seqlab/__init__.py"} <= set(names)
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert not [n for n in names if "__pycache__" in n or ".venv" in n]
    setup = subprocess.run(["bash", "-n", str(image[0] / "source" / "setup.sh")])
    assert setup.returncode == 0


def test_solution_gets_full_marks_with_hidden_tests_hidden(image):
    root = image[0]
    results = grade_one(root, source_notebook(A).read_text())
    assert results["score"] == 18
    tests = {t["name"]: t for t in results["tests"]}
    assert len(tests) == 7 and sum(t["max_score"] for t in tests.values()) == 18
    assert tests["test_count_ngrams_random"]["visibility"] == "hidden"
    assert tests["test_perplexity"]["visibility"] == "visible"
    assert all(t["score"] == t["max_score"] and t["output"] == "passed" for t in tests.values())


def test_hostile_and_broken_submissions_still_get_results(image):
    root, _, _, tmp = image
    released = release(A, tmp / "release") / f"{A}.ipynb"
    untouched = grade_one(root, released.read_text())
    assert untouched["score"] == 0 and len(untouched["tests"]) == 7
    spy = json.loads(source_notebook(A).read_text())
    spy["cells"].insert(3, {"cell_type": "code", "metadata": {}, "outputs": [],
                            "execution_count": None, "source": (
        f"print(open({str(root / 'source' / 'course' / 'source' / A / (A + '.ipynb'))!r})"
        ".read())\n")})
    results = grade_one(root, json.dumps(spy))
    assert results["score"] == 18 and "FileNotFoundError" in results["output"]
    assert "_oracle_counts" not in json.dumps(results)
    broken = grade_one(root, "{ not json")
    assert broken["score"] == 0 and "unreadable notebook" in broken["output"]
    assert len(broken["tests"]) == 7
