"""The autograder end to end on assignment 01: release, grading real submissions, selftest."""

import json
import shutil
import zipfile

import nbformat
import pytest
from helpers import coded_solution

from autograder.authoring.release import ReleaseLeak, leaks, release
from autograder.authoring.selftest import selftest
from autograder.course import COURSE, assignments, source_notebook
from autograder.intake.late import load_policy
from autograder.scoring.grade import grade

A = "01_language_models"


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


def test_lms_zip_of_flat_files(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("alice_123_456_hw1.ipynb", "not json")
        zf.writestr("bob_789_012_hw1.ipynb", "")
        zf.writestr("../evil.ipynb", "{}")  # path traversal is ignored
    rows = grade(A, archive, tmp_path / "out", log=lambda *a: None)
    # Canvas names: the user id is the student, the name before it is only displayed
    assert [(r["student_id"], r["name"]) for r in rows] == [("123", "alice"), ("789", "bob")]
    assert not (tmp_path / "evil.ipynb").exists()


def test_late_penalty_uses_the_lms_time_not_the_students(tmp_path):
    policy_file = tmp_path / "late.toml"
    policy_file.write_text(f'[due]\n"{A}" = "2026-11-01T12:00:00Z"\n\n'
                           "[penalty]\nper_day = 0.25\nmax_days = 2\n")
    policy = load_policy(policy_file)
    nb = coded_solution(A)
    nb["metadata"]["submitted"] = "2026-10-01T00:00:00Z"  # written by the student: ignored
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, when in [("ontime_1_101_hw.ipynb", (2026, 11, 1, 11, 0, 0)),
                           ("late_2_102_hw.ipynb", (2026, 11, 1, 13, 0, 0)),
                           ("verylate_3_103_hw.ipynb", (2026, 11, 4, 13, 0, 0))]:
            zf.writestr(zipfile.ZipInfo(name, date_time=when), json.dumps(nb))
    rows = {r["name"]: r for r in grade(A, archive, tmp_path / "out", policy=policy,
                                        log=lambda *a: None)}
    assert rows["ontime"]["score"] == 18 and rows["ontime"]["message"] == ""
    assert rows["late"]["score"] == 18 - 0.25 * 21  # a share of the maximum, written part too
    assert "after the deadline" in rows["late"]["message"]
    assert rows["verylate"]["score"] == 0
    stamps = tmp_path / "lms.csv"
    stamps.write_text("student_id,timestamp\n2,2026-11-01T11:59:00+00:00\n")
    again = grade(A, archive, tmp_path / "again", policy=policy, timestamps=stamps,
                  log=lambda *a: None)
    assert {r["student_id"]: r["score"] for r in again}["2"] == 18


def test_bad_late_policy_says_what_is_wrong(tmp_path):
    bad = tmp_path / "late.toml"
    bad.write_text('[due]\nhw = "next friday"\n')
    with pytest.raises(ValueError, match="not an ISO 8601 time"):
        load_policy(bad)
    bad.write_text("[penalty]\nper_day = -1\n")
    with pytest.raises(ValueError, match="per_day must be a number >= 0"):
        load_policy(bad)


def test_unknown_assignment(tmp_path):
    with pytest.raises(ValueError, match="known: 01_language_models"):
        grade("99_nothing", tmp_path, tmp_path / "out")


@pytest.mark.parametrize("assignment", assignments())
def test_selftest_passes(assignment):
    """Full marks for the solution, 0 for the release, and each answer stubbed in turn costs
    only the test cells that use it (one grading run per assignment)."""
    assert selftest(assignment, log=lambda *a: None, independence=True) == []


def test_autograd_instead_of_hand_gradients_earns_nothing(tmp_path):
    """Assignment 02 withholds torch from the sandbox, so this cannot be switched off."""
    nb = nbformat.from_dict(coded_solution("02_rnn_backprop"))
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
    assert "torch is not available while your notebook is graded" in row["message"]


def test_a_grader_failure_on_one_student_costs_only_that_row(tmp_path, monkeypatch):
    import autograder.scoring.gradebook as gradebook

    real = gradebook.record_many

    def flaky(work, assignment, notebook, entries, due):
        if any(entry[0] == "bob" for entry in entries):
            raise RuntimeError("gradebook locked")
        return real(work, assignment, notebook, entries, due)

    monkeypatch.setattr(gradebook, "record_many", flaky)
    for student in ("alice", "bob", "carol"):
        (tmp_path / "subs" / student).mkdir(parents=True)
        (tmp_path / "subs" / student / "hw.ipynb").write_text(json.dumps(coded_solution(A)))
    rows = {r["student_id"]: r for r in grade(A, tmp_path / "subs", tmp_path / "out",
                                              log=lambda *a: None)}
    assert rows["alice"]["score"] == rows["carol"]["score"] == 18
    assert rows["bob"]["status"] == "error" and "gradebook locked" in rows["bob"]["message"]
    assert rows["bob"]["score"] == 18  # the grade itself is kept in grades.csv
    assert (tmp_path / "out" / "grades.csv").read_text().count("\n") == 4


def test_grading_twice_in_one_process_with_other_limits(tmp_path):
    """A second run may raise the memory cap above the first one's; with cgroup v1 the order of
    the two memory writes matters (the kernel refuses one above the other), and sandboxes of
    the two runs must not share a cgroup."""
    from autograder.isolation.sandbox import Limits, sandbox_problem

    if sandbox_problem():
        pytest.skip(f"needs bubblewrap: {sandbox_problem()}")
    B = "04_attention"
    subs = tmp_path / "subs" / "s1"
    subs.mkdir(parents=True)
    (subs / f"{B}.ipynb").write_text(json.dumps(coded_solution(B)))
    for run, memory_mb in enumerate((1024, 3072)):
        rows = grade(B, subs.parent, tmp_path / f"out{run}", log=lambda *a: None,
                     limits=Limits(timeout_cell=30, timeout_notebook=150, memory_mb=memory_mb))
        assert [(r["status"], r["score"]) for r in rows] == [("graded", 11.0)], rows


def test_a_students_extension_moves_only_their_deadline(tmp_path):
    from datetime import UTC, datetime

    (tmp_path / "late_policy.toml").write_text(f'[due]\n"{A}" = "2026-11-01T12:00:00Z"\n\n'
                                               "[penalty]\nper_day = 0.25\nmax_days = 2\n")
    (tmp_path / "extensions.csv").write_text("student_id,due,assignment\n"
                                             "s1,2026-11-04T12:00:00Z,\n"
                                             f"s2,2026-11-02T12:00:00Z,{A}\n"
                                             "s3,2026-11-09T12:00:00Z,02_rnn_backprop\n")
    policy = load_policy(tmp_path / "late_policy.toml")  # extensions.csv beside it
    when = datetime(2026, 11, 2, 11, 0, tzinfo=UTC)  # a day late for everyone else
    assert policy.penalty(A, when, 10, 20, "s1") == (0.0, "")
    assert policy.penalty(A, when, 10, 20, "s2") == (0.0, "")
    off, said = policy.penalty(A, when, 10, 20, "s3")  # extended for another assignment only
    assert off == 5 and "after the deadline" in said
    off, said = policy.penalty(A, datetime(2026, 11, 5, 11, 0, tzinfo=UTC), 10, 20, "s1")
    assert off == 5 and "after your extended deadline" in said
    (tmp_path / "bad.csv").write_text("who,when\nx,y\n")
    with pytest.raises(ValueError, match="student_id, due"):
        load_policy(tmp_path / "late_policy.toml", tmp_path / "bad.csv")
