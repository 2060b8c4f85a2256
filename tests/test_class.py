"""A realistic class, as an LMS exports it: namesakes, resubmissions, wrong file types, notebooks
saved from Colab, a late file. Graded as a zip and as the unzipped folder, regraded for one
student, and sharded into three and merged. Needs bubblewrap (``.ci/run`` installs it)."""

import io
import json
import os
import shutil
import zipfile
from datetime import UTC, datetime

import pytest

from autograder.course import COURSE, source_notebook
from autograder.grade import grade, read_grades
from autograder.late import LatePolicy
from autograder.merge import merge
from autograder.release import release
from autograder.sandbox import Limits, sandbox_problem

A = "01_language_models"
FULL = 18.0
DUE = datetime(2026, 11, 1, 23, 59, tzinfo=UTC)
ON_TIME, LATER, LATE = (2026, 11, 1, 10, 0, 0), (2026, 11, 1, 12, 0, 0), (2026, 11, 3, 9, 0, 0)
LIMITS = Limits(timeout_cell=20, timeout_notebook=120, memory_mb=2048, max_procs=64)
POLICY = LatePolicy(due={A: DUE}, per_day=0.1, max_days=7)

pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap: "
                                + (sandbox_problem() or ""))


def solution() -> dict:
    return json.loads(source_notebook(A).read_text())


def colab_saved(nb: dict) -> dict:
    """What Colab writes: its own metadata, cell ids, and the cells students add there."""
    nb = json.loads(json.dumps(nb))
    nb["metadata"] = {"colab": {"provenance": [], "gpuType": "T4"}, "accelerator": "GPU",
                      "kernelspec": {"name": "python3", "display_name": "Python 3"},
                      "language_info": {"name": "python"}}
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"colab{i}"
        cell["metadata"]["id"] = f"colab{i}"
    extra = ["!pip install -q a-package-no-index-has\n%pip install -q another-one",
             "from google.colab import drive\ndrive.mount('/content/drive')",
             "from google.colab import files\nimport torch\n"
             "print('device:', 'cuda' if torch.cuda.is_available() else 'cpu')",
             "from tqdm.notebook import tqdm\nfor _ in tqdm(range(3)):\n    pass"]
    nb["cells"][:0] = [{"cell_type": "code", "metadata": {"id": f"x{i}"}, "source": s,
                        "outputs": [], "execution_count": None} for i, s in enumerate(extra)]
    return nb


def zipped_notebook(nb: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("hw/01_language_models.ipynb", json.dumps(nb))
        zf.writestr("__MACOSX/hw/._01_language_models.ipynb", "mac junk")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """(zip path, unzipped folder, expected rows by student id)."""
    tmp = tmp_path_factory.mktemp("class")
    released = json.loads((release(A, tmp / "release", COURSE) / f"{A}.ipynb").read_text())
    sol = json.dumps(solution())
    files = [  # (Canvas file name, content, LMS time)
        ("smithjohn_123_1001_01_language_models.ipynb", sol, ON_TIME),
        ("smithjohn_456_1002_01_language_models.ipynb", json.dumps(released), ON_TIME),
        ("doejane_789_1003_01_language_models.ipynb", json.dumps(released), ON_TIME),
        ("doejane_789_1010_01_language_models-1.ipynb", sol, LATER),
        ("leebob_321_1004_report.pdf", b"%PDF-1.4 not a notebook", ON_TIME),
        ("kimann_654_1005_01_language_models.ipynb.txt", sol, ON_TIME),
        ("parkcho_987_1006_hw.zip", zipped_notebook(solution()), ON_TIME),
        ("colabuser_111_1007_01_language_models.ipynb", json.dumps(colab_saved(solution())),
         ON_TIME),
        ("latefox_LATE_222_1008_01_language_models.ipynb", sol, LATE),
    ]
    archive = tmp / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, content, when in files:
            zf.writestr(zipfile.ZipInfo(name, date_time=when), content)
    folder = tmp / "unzipped"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(folder)
    for name, _, when in files:  # unzipping by hand keeps the LMS times, as most tools do
        stamp = datetime(*when, tzinfo=UTC).timestamp()
        os.utime(folder / name, (stamp, stamp))
    expected = {
        "123": (FULL, "graded", "smithjohn", ""),
        "456": (0.0, "graded", "smithjohn", "Lost 18 point(s)"),
        "789": (FULL, "graded", "doejane", "graded 01_language_models-1.ipynb, the latest"),
        "321": (0.0, "ungradable", "leebob", "a PDF was submitted"),
        "654": (FULL, "graded", "kimann", "saved under another name"),
        "987": (FULL, "graded", "parkcho", "inside the zip hw.zip"),
        "111": (FULL, "graded", "colabuser", ""),  # no error from Colab's cells either
        "222": (FULL - 0.2 * FULL, "graded", "latefox", "after the deadline"),
    }
    return archive, folder, expected


def _grade(source, out, **kwargs):
    return grade(A, source, out, limits=LIMITS, workers=2, policy=POLICY, log=lambda *a: None,
                 **kwargs)


@pytest.fixture(scope="module")
def graded(export, tmp_path_factory):
    archive, _, _ = export
    out = tmp_path_factory.mktemp("graded") / "out"
    rows = _grade(archive, out)
    return out, {r["student_id"]: r for r in rows}


def check_rows(rows: dict, expected: dict) -> None:
    assert sorted(rows) == sorted(expected), "every student in the export gets exactly one row"
    for student, (score, status, name, message) in expected.items():
        row = rows[student]
        assert (row["status"], row["name"]) == (status, name), (student, row)
        assert float(row["score"]) == pytest.approx(score), (student, row)
        assert message in row["message"], (student, row)
        if float(row["score"]) < FULL:
            assert row["message"], f"{student} lost points without a reason"


def test_a_zipped_class(graded, export):
    out, rows = graded
    check_rows(rows, export[2])
    assert "ignored 01_language_models.ipynb" in rows["789"]["message"]
    assert rows["111"]["message"] == ""  # Colab's cells ran: pip skipped, Drive a stand-in
    colab = json.loads((out / "course" / "autograded" / "111" / A / f"{A}.ipynb").read_text())
    printed = "".join("".join(o.get("text", "")) for c in colab["cells"]
                      for o in c.get("outputs", []))
    assert "skipped !pip install" in printed and "drive.mount skipped" in printed
    feedback = json.loads((out / "feedback" / "456" / "feedback.json").read_text())
    assert all(t["message"] for t in feedback["tests"])  # a reason for every lost point
    html = (out / "feedback" / "456" / "feedback.html").read_text()
    assert "hidden checks" in html and "BEGIN HIDDEN" not in html


def test_the_same_class_unzipped(export, tmp_path):
    _, folder, expected = export
    rows = {r["student_id"]: r for r in _grade(folder, tmp_path / "out")}
    check_rows(rows, expected)


def test_regrading_one_student_keeps_every_other_row(graded, export, tmp_path):
    out, _ = graded
    archive = export[0]
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = (copy / "grades.csv").read_text().splitlines()
    resumed = _grade(archive, copy)  # nothing new: every student is kept as it was
    assert (copy / "grades.csv").read_text().splitlines() == before and len(resumed) == 8
    _grade(archive, copy, only=["654"])
    after = (copy / "grades.csv").read_text().splitlines()
    assert len(after) == len(before)
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert all(after[i].startswith("654,") for i in changed)
    with pytest.raises(ValueError, match="not in the export: 999"):
        _grade(archive, copy, only=["999"])


def test_three_shards_merge_into_the_unsharded_grades(graded, export, tmp_path):
    out, _ = graded
    archive = export[0]
    shards = [tmp_path / f"shard{i}" for i in (1, 2, 3)]
    for i, folder in enumerate(shards, 1):
        _grade(archive, folder, shard=(i, 3))
    sizes = [len(read_grades(f / "grades.csv")) for f in shards]
    assert sum(sizes) == 8 and all(sizes)
    with pytest.raises(ValueError, match="in no shard"):
        merge(shards[:2], tmp_path / "partial", log=lambda *a: None)
    merge(shards, tmp_path / "merged", log=lambda *a: None)
    assert (tmp_path / "merged" / "grades.csv").read_text() == (out / "grades.csv").read_text()
    for report in ("similarity.csv", "similarity.html"):  # pairs across shards included
        assert (tmp_path / "merged" / report).read_text() == (out / report).read_text()
    with pytest.raises(ValueError, match="graded in both"):
        merge([shards[0], shards[0]], tmp_path / "twice", log=lambda *a: None)
    from nbgrader.api import Gradebook

    def book(folder):
        with Gradebook(f"sqlite:///{folder / 'course' / 'gradebook.db'}") as gb:
            return {s.student.id: (s.score, s.late_submission_penalty, s.timestamp)
                    for s in gb.find_assignment(A).submissions}

    assert book(tmp_path / "merged") == book(out)  # the gradebooks agree too


def test_exports_that_hold_nobody_or_are_broken(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no submission found"):
        _grade(tmp_path / "empty", tmp_path / "out1")
    assert not (tmp_path / "out1").exists()  # a failed run leaves nothing behind
    broken = tmp_path / "broken.zip"
    good = io.BytesIO()
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("a_1_2_x.ipynb", "{}" * 1000)
    broken.write_bytes(good.getvalue()[:-30])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        _grade(broken, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_shell_lines_are_skipped_with_a_note():
    from autograder.runner import skip_shell

    code = "x = 1\n!pip install foo\n  %pip install bar\ny = x != 2"
    assert skip_shell(code) == ("x = 1\nprint('(grading: skipped !pip install foo)')\n"
                                "  print('(grading: skipped %pip install bar)')\ny = x != 2")
    assert skip_shell("%%bash\nls") == "print('(grading: skipped a %%bash cell)')"
