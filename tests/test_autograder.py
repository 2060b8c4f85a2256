"""The autograder end to end on assignment 01: release, grading real submissions, selftest."""

import csv
import json
import shutil
import zipfile

import nbformat
import pytest

from autograder.course import COURSE, assignments, source_notebook
from autograder.grade import grade
from autograder.release import ReleaseLeak, leaks, release
from autograder.selftest import selftest

A = "01_language_models"
PERPLEXITY_CELL = "perplexity"


def solution_with(**replacements):
    """The source solution with some answer cells (by grade_id) replaced."""
    nb = nbformat.read(source_notebook(A), as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in replacements:
            cell.source = replacements[grade_id]
    return nb


def test_release_has_no_secrets(tmp_path):
    folder = release(A, tmp_path)
    notebook = folder / f"{A}.ipynb"
    text = notebook.read_text()
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
    assert "_oracle_counts" not in text and "raise NotImplementedError()" in text
    assert leaks(source_notebook(A), notebook) == []
    assert leaks(source_notebook(A), source_notebook(A))  # the source itself is all secrets


def test_release_refuses_a_leaking_notebook(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(COURSE, course, ignore=shutil.ignore_patterns("release", "gradebook.db"))
    path = course / "source" / A / f"{A}.ipynb"
    path.write_text(path.read_text().replace("### BEGIN HIDDEN TESTS", "### BEGIN HIDEN TESTS", 1))
    with pytest.raises(ReleaseLeak, match="secret line"):
        release(A, tmp_path / "out", course)
    assert not (tmp_path / "out" / A).exists()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    subs = tmp / "submissions"

    def submit(student, nb=None, name=f"{A}.ipynb", raw=None):
        (subs / student).mkdir(parents=True)
        if raw is not None:
            (subs / student / name).write_text(raw)
        elif nb is not None:
            nbformat.write(nb, subs / student / name)

    submit("correct", solution_with(), name="my_homework.ipynb")  # any file name
    submit("partly", solution_with(**{PERPLEXITY_CELL: "def perplexity(log_probs):\n"
                                                         "    return 4.0\n"}))
    submit("syntax", solution_with(count_ngrams="def count_ngrams(sentences, n)\n    pass\n"))
    submit("always_equal", solution_with(count_ngrams=(
        "class Anything(dict):\n    def __eq__(self, other):\n        return True\n\n"
        "def count_ngrams(sentences, n):\n    return Anything()\n")))
    submit("uses_library", solution_with(**{PERPLEXITY_CELL: (
        "from seqlab.lm import perplexity as _p\n\n"
        "def perplexity(log_probs):\n    return _p(log_probs)\n")}))
    submit("invalid_json", raw="{ this is not json")
    submit("empty", raw="")
    submit("nothing")
    rows = grade(A, subs, tmp / "out", log=lambda *a: None)
    return tmp / "out", {r["student_id"]: r for r in rows}


def test_every_submission_is_one_row(graded):
    out, rows = graded
    with open(out / "grades.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [r["student_id"] for r in table] == sorted(rows)
    assert list(table[0]) == ["student_id", "assignment", "score", "max_score", "status",
                              "message"]
    assert {r["max_score"] for r in table} == {"18.0"}


def test_scores(graded):
    _, rows = graded
    assert rows["correct"]["score"] == 18 and rows["correct"]["status"] == "graded"
    assert rows["partly"]["score"] == 15  # only the perplexity cell (3 points) fails
    assert rows["syntax"]["score"] == 14  # both count_ngrams cells (4 points) fail
    assert rows["always_equal"]["score"] == 14
    assert rows["uses_library"]["score"] == 15


def test_unreadable_and_missing_notebooks_get_a_reason(graded):
    _, rows = graded
    for student in ("invalid_json", "empty"):
        assert rows[student]["score"] == 0 and rows[student]["status"] == "ungradable"
        assert "unreadable notebook" in rows[student]["message"]
    assert "no notebook" in rows["nothing"]["message"]


def test_feedback_shows_results_but_never_hidden_tests(graded):
    out, rows = graded
    data = json.loads((out / "feedback" / "uses_library" / "feedback.json").read_text())
    failed = [t for t in data["tests"] if not t["passed"]]
    assert [t["test"] for t in failed] == ["test_perplexity"]
    assert "calls seqlab" in failed[0]["message"]
    partly = json.loads((out / "feedback" / "partly" / "feedback.json").read_text())
    assert "should be" in next(t for t in partly["tests"] if not t["passed"])["message"]
    hidden_source = "_oracle_counts"
    for student in rows:
        for name in ("feedback.json", "feedback.html"):
            assert hidden_source not in (out / "feedback" / student / name).read_text()


def test_lms_zip_of_flat_files(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("alice_123_456_hw1.ipynb", "not json")
        zf.writestr("bob_789_012_hw1.ipynb", "")
        zf.writestr("../evil.ipynb", "{}")  # path traversal is ignored
    rows = grade(A, archive, tmp_path / "out", log=lambda *a: None)
    assert [r["student_id"] for r in rows] == ["alice", "bob"]
    assert not (tmp_path / "evil.ipynb").exists()


def test_unknown_assignment(tmp_path):
    with pytest.raises(ValueError, match="known: 01_language_models"):
        grade("99_nothing", tmp_path, tmp_path / "out")


@pytest.mark.parametrize("assignment", assignments())
def test_selftest_passes(assignment):
    assert selftest(assignment, log=lambda *a: None) == []


def test_autograd_instead_of_hand_gradients_earns_nothing(tmp_path):
    nb = nbformat.read(source_notebook("02_rnn_backprop"), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "softmax_ce":
            cell.source = (
                "import torch\n\n"
                "def softmax_ce_grad(z, k):\n"
                "    t = torch.tensor(z, requires_grad=True)\n"
                "    (-torch.log_softmax(t, 0)[k]).backward()\n"
                "    return t.grad.numpy()\n\n"
                "def output_weight_grad(h, z, k):\n"
                "    return softmax_ce_grad(z, k)[:, None] * h[None, :]\n"
            )
    (tmp_path / "subs" / "cheater").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "subs" / "cheater" / "hw.ipynb")
    (row,) = grade("02_rnn_backprop", tmp_path / "subs", tmp_path / "out", log=lambda *a: None)
    assert row["score"] == 14 - 3  # both part-1 cells (3 points), nothing else
    feedback = (tmp_path / "out" / "feedback" / "cheater" / "feedback.json").read_text()
    assert "calls torch.autograd" in feedback


def test_a_grader_crash_on_one_student_costs_only_that_row(tmp_path, monkeypatch):
    import autograder.grade as grading

    def flaky(work, assignment, student, row, timeout_cell):
        if student == "bob":
            raise RuntimeError("gradebook locked")
        return {**row, "score": 1.0}, []

    monkeypatch.setattr(grading, "_autograde", flaky)
    for student in ("alice", "bob", "carol"):
        (tmp_path / "subs" / student).mkdir(parents=True)
        shutil.copy(source_notebook(A), tmp_path / "subs" / student / "hw.ipynb")
    rows = {r["student_id"]: r for r in grade(A, tmp_path / "subs", tmp_path / "out",
                                              log=lambda *a: None)}
    assert rows["alice"]["score"] == rows["carol"]["score"] == 1.0
    assert rows["bob"]["status"] == "error" and "gradebook locked" in rows["bob"]["message"]
    assert (tmp_path / "out" / "grades.csv").read_text().count("\n") == 4
