"""A realistic class, as an LMS exports it: namesakes, resubmissions, wrong file types, a late
file, and a correct notebook saved by every editor students use (Colab, Kaggle, VS Code,
JupyterLab 3 and 4, Notebook 6 and 7), each in the exact format that editor writes and with the
cells students add there. Graded as a zip under each isolation the grader offers, the unzipped
folder checked to hold the same submissions, regraded for one student, and sharded into three
and merged. Needs bubblewrap (``.ci/run`` installs it)."""

import io
import json
import os
import re
import shutil
import uuid
import zipfile
from datetime import UTC, datetime

import pytest
from helpers import coded_solution

from autograder.authoring.release import release
from autograder.course import COURSE
from autograder.intake.late import LatePolicy
from autograder.intake.submissions import collect
from autograder.isolation.kinds import BUBBLEWRAP, UID, Isolation, uid_problem
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring.grade import grade, read_grades
from autograder.scoring.merge import merge, ungraded

A = "01_language_models"
FULL = 18.0  # every autograded point; the written question's 3 are left blank (coded_solution)
MAX = 21.0
DUE = datetime(2026, 11, 1, 23, 59, tzinfo=UTC)
ON_TIME, LATER, LATE = (2026, 11, 1, 10, 0, 0), (2026, 11, 1, 12, 0, 0), (2026, 11, 3, 9, 0, 0)
LIMITS = Limits(timeout_cell=20, timeout_notebook=120, memory_mb=2048, max_procs=64)
POLICY = LatePolicy(due={A: DUE}, per_day=0.1, max_days=7)

pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap: "
                                + (sandbox_problem() or ""))


# Each isolation the grader offers (the uid fallback is forced here, as Docker's capabilities
# would choose it; test_container.py shows that they do); the whole class is graded under each,
# on a copy of the course only root may read, and must get the same grades.csv.
ISOLATIONS = {"bubblewrap": Isolation(BUBBLEWRAP)}
if os.geteuid() == 0 and not uid_problem():
    ISOLATIONS["uid"] = Isolation(UID, "forced by the test")


def solution() -> dict:
    return coded_solution(A)


def gid(cell: dict) -> str:
    return cell["metadata"].get("nbgrader", {}).get("grade_id", "")


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def code(source: str, metadata: dict | None = None, count: int | None = None,
         outputs: list | None = None) -> dict:
    return {"cell_type": "code", "execution_count": count, "metadata": metadata or {},
            "outputs": outputs or [], "source": lines(source)}


def stdout(text: str) -> dict:
    return {"name": "stdout", "output_type": "stream", "text": lines(text)}


WIDGET = "a6f4c0d2b9e84f0c8a1f3e5d7c9b1a20"  # a tqdm.notebook progress bar's widget model
WIDGET_STATE = {"application/vnd.jupyter.widget-state+json": {"version_major": 2,
                "version_minor": 0, "state": {WIDGET: {
                    "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
                    "model_name": "HBoxModel", "state": {"children": []}}}}}
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU"
       "5ErkJggg==")
DEVICE = "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nprint(device)"
TQDM = "from tqdm.notebook import tqdm\nfor _ in tqdm(range(3)):\n    pass"


def handed_in(released: dict) -> dict:
    """The released notebook with every answer written and run top to bottom, as a student
    hands it in: the master's solutions without nbgrader's markers, outputs and counts."""
    answers = {gid(c): [x for x in c["source"] if "### BEGIN SOLUTION" not in x
                        and "### END SOLUTION" not in x]
               for c in solution()["cells"] if c["metadata"]["nbgrader"].get("solution")}
    nb = json.loads(json.dumps(released))
    count = 0
    for cell in nb["cells"]:
        if gid(cell) in answers:
            cell["source"] = answers[gid(cell)]
        if cell["cell_type"] == "code":
            count += 1
            cell["execution_count"] = count
    return nb


def insert_after(nb: dict, grade_id: str, *cells: dict) -> None:
    at = next(i for i, c in enumerate(nb["cells"]) if gid(c) == grade_id) + 1
    nb["cells"][at:at] = list(cells)


def uses_device(nb: dict, grade_id: str) -> None:
    """The answer ``grade_id`` starts with a line that needs the student's device cell."""
    cell = next(c for c in nb["cells"] if gid(c) == grade_id)
    cell["source"] = ["probe = torch.zeros(2, device=device)\n", *cell["source"]]


def jupyter_json(nb: dict) -> str:
    """How Jupyter (Lab, Notebook, nbformat) and VS Code write a notebook: keys sorted, one-space
    indent, a newline at the end."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


HABITS = """import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from tqdm.auto import tqdm

table = pd.DataFrame({"n": np.arange(1, 6), "perplexity": [9.1, 7.4, 6.8, 6.5, 6.4]})
for _ in tqdm(range(3), desc="trying"):
    pass
sns.lineplot(data=table, x="n", y="perplexity")
plt.title("my perplexity by order")
plt.show()
print(table.describe().loc["mean", "perplexity"])
"""


def colab(released: dict, keep_nbgrader: bool = True) -> str:
    """Colab's File > Download .ipynb: nbformat 4.0 (no cell ids; Colab keeps its own id in each
    cell's metadata), its notebook metadata and widget state, two-space indent, top-level keys
    in Colab's order, no newline at the end. Students add installs and a Drive mount at the top,
    a device cell under the given imports (used in an answer) and tqdm.notebook progress bars.
    ``keep_nbgrader=False``: the cells were pasted into a new Colab notebook, which drops their
    nbgrader metadata."""
    nb = handed_in(released)
    insert_after(nb, "imports", code(DEVICE, count=2, outputs=[stdout("cuda\n")]))
    uses_device(nb, "ffn_forward")
    insert_after(nb, "count_ngrams", code(TQDM, count=4, outputs=[{
        "output_type": "display_data", "metadata": {}, "data": {
            "text/plain": ["  0%|          | 0/3 [00:00<?, ?it/s]"],
            "application/vnd.jupyter.widget-view+json": {
                "model_id": WIDGET, "version_major": 2, "version_minor": 0}}}]))
    extra = ["!pip install -q a-package-no-index-has\n%pip install -q another-one",
             HABITS,  # plots, a table, a progress bar: what students add everywhere
             "from google.colab import drive\ndrive.mount('/content/drive')",
             "from google.colab import files\nimport torch\n"
             "print('device:', 'cuda' if torch.cuda.is_available() else 'cpu')"]
    nb["cells"][:0] = [code(s, count=i + 1) for i, s in enumerate(extra)]
    for i, cell in enumerate(nb["cells"]):
        cell.pop("id", None)
        meta = cell["metadata"] if keep_nbgrader else {}
        meta.pop("deletable", None), meta.pop("editable", None)  # Colab does not lock cells
        cell["metadata"] = {**meta, "id": f"{uuid.UUID(int=i).hex[-12:]}"}
        if cell["cell_type"] == "code" and cell["execution_count"]:
            cell["metadata"].update(colab={"base_uri": "https://localhost:8080/"},
                                    outputId=str(uuid.UUID(int=1000 + i)))
    return json.dumps({"nbformat": 4, "nbformat_minor": 0, "metadata": {
        "colab": {"provenance": [], "gpuType": "T4", "toc_visible": True},
        "kernelspec": {"name": "python3", "display_name": "Python 3"},
        "language_info": {"name": "python"}, "accelerator": "GPU", "widgets": WIDGET_STATE},
        "cells": nb["cells"]}, indent=2)


def kaggle(released: dict) -> str:
    """A Kaggle notebook's download: sources as one string each (not lists of lines), Kaggle's
    cell metadata (_uuid, _cell_guid, trusted, execution times), top-level keys in its order,
    no indent."""
    nb = handed_in(released)
    insert_after(nb, "imports", code("import os\nfor dirname, _, filenames in "
                                     "os.walk('/kaggle/input'):\n    print(dirname)"))
    for i, cell in enumerate(nb["cells"]):
        cell["source"] = "".join(cell["source"])
        cell["metadata"].update(_uuid=uuid.UUID(int=i).hex, trusted=True,
                                _cell_guid=str(uuid.UUID(int=500 + i)))
        if cell["cell_type"] == "code":
            cell["metadata"]["execution"] = {
                "iopub.status.busy": "2026-10-30T16:59:56.280518Z",
                "iopub.execute_input": "2026-10-30T16:59:56.28083Z",
                "iopub.status.idle": "2026-10-30T16:59:58.374738Z",
                "shell.execute_reply.started": "2026-10-30T16:59:56.280804Z",
                "shell.execute_reply": "2026-10-30T16:59:58.373767Z"}
    return json.dumps({"metadata": {**nb["metadata"], "kaggle": {
        "accelerator": "nvidiaTeslaT4", "dataSources": [], "isInternetEnabled": True,
        "language": "python", "sourceType": "notebook", "isGpuEnabled": True}},
        "nbformat_minor": 5, "nbformat": 4, "cells": nb["cells"]})


def vscode(released: dict) -> str:
    """VS Code's Jupyter extension on Windows: the file's nbformat 4.5 and cell ids kept, new
    cells with its short ids, the interpreter in the notebook metadata, and (before VS Code
    1.61) CRLF line ends in every cell the student edited; the file itself with CRLF line ends,
    as git checks it out on Windows."""
    nb = handed_in(released)
    insert_after(nb, "imports", code("%pip install torch", count=2))
    insert_after(nb, "perplexity", code("perplexity([-1.0, -2.0])", count=9, outputs=[{
        "output_type": "execute_result", "execution_count": 9, "metadata": {},
        "data": {"text/plain": ["4.4816890703380645"]}}]))
    for i, cell in enumerate(nb["cells"]):
        cell.setdefault("id", f"{i:08x}")
        info = cell["metadata"].get("nbgrader", {})
        if info.get("solution") or not info:  # edited by the student
            cell["source"] = [x.replace("\n", "\r\n") for x in cell["source"]]
    nb["metadata"] = {
        "kernelspec": {"display_name": ".venv (Python 3.11.4)", "language": "python",
                       "name": "python3"},
        "language_info": {"codemirror_mode": {"name": "ipython", "version": 3},
                          "file_extension": ".py", "mimetype": "text/x-python",
                          "name": "python", "nbconvert_exporter": "python",
                          "pygments_lexer": "ipython3", "version": "3.11.4"},
        "vscode": {"interpreter": {"hash": "aee8b7b246df8f9039afb4144a1f6fd8d2ca17a18078"
                                           "6b69acc140d282b71a49"}}}
    return jupyter_json(nb).replace("\n", "\r\n")


def jupyterlab(released: dict, version: int) -> str:
    """JupyterLab 3 or 4, or Notebook 7 (JupyterLab 4's notebook, same format): nbformat 4.5, new
    cells with UUID ids, "tags": [] where the property inspector was opened, collapsed and
    scrolled outputs, a screenshot pasted into a markdown cell as an attachment; JupyterLab 4
    with "record timing" on also writes each cell's execution times."""
    nb = handed_in(released)
    insert_after(nb, "imports", code("import numpy as np", count=2),
                 code(DEVICE, count=3, outputs=[stdout("cpu\n")]))
    uses_device(nb, "ffn_forward")
    insert_after(nb, "part2", {
        "attachments": {"image.png": {"image/png": PNG}}, "cell_type": "markdown",
        "id": str(uuid.UUID(int=7)), "metadata": {},
        "source": ["My derivation:\n", "![image.png](attachment:image.png)"]})
    insert_after(nb, "count_ngrams", code(TQDM, {"tags": []}, 5, [{
        "output_type": "display_data", "metadata": {}, "data": {
            "text/plain": ["  0%|          | 0/3 [00:00<?, ?it/s]"],
            "application/vnd.jupyter.widget-view+json": {
                "model_id": WIDGET, "version_major": 2, "version_minor": 0}}}]))
    for i, cell in enumerate(nb["cells"]):
        cell.setdefault("id", str(uuid.UUID(int=100 + i)))
        if cell["cell_type"] != "code":
            continue
        if gid(cell) == "test_count_ngrams_examples":
            cell["metadata"].update(collapsed=True, jupyter={"outputs_hidden": True})
        elif gid(cell) == "sentence_logprob":
            cell["metadata"]["scrolled"] = True
        if version == 4 and cell["execution_count"]:  # Notebook 7: timing off, the default
            cell["metadata"]["execution"] = {
                "iopub.execute_input": "2026-10-30T10:00:01.000001Z",
                "iopub.status.busy": "2026-10-30T10:00:01.000000Z",
                "iopub.status.idle": "2026-10-30T10:00:01.500000Z",
                "shell.execute_reply": "2026-10-30T10:00:01.400000Z",
                "shell.execute_reply.started": "2026-10-30T10:00:01.000002Z"}
    nb["metadata"] = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                       "name": "python3"},
        "language_info": {"codemirror_mode": {"name": "ipython", "version": 3},
                          "file_extension": ".py", "mimetype": "text/x-python",
                          "name": "python", "nbconvert_exporter": "python",
                          "pygments_lexer": "ipython3", "version": "3.12.3"},
        **({"widgets": WIDGET_STATE} if version > 3 else {})}
    return jupyter_json(nb)


def notebook6(released: dict) -> str:
    """The classic Notebook 6: saved as nbformat 4.4, which has no cell ids (the classic
    frontend drops them), "collapsed"/"scrolled" on code cells, the ExecuteTime and toc
    nbextensions' metadata, a plot in the outputs, and a copy of a test cell the student made
    to run it again further down."""
    nb = handed_in(released)
    test = next(c for c in nb["cells"] if gid(c) == "test_perplexity")
    insert_after(nb, "ffn_forward", json.loads(json.dumps(test)), code(
        "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
        count=20,
        outputs=[{"output_type": "display_data", "metadata": {}, "data": {
            "image/png": PNG, "text/plain": ["<Figure size 640x480 with 1 Axes>"]}}]))
    for i, cell in enumerate(nb["cells"]):
        cell.pop("id", None)
        if cell["cell_type"] == "code":
            cell["metadata"].setdefault("collapsed", False)
            cell["metadata"]["ExecuteTime"] = {"start_time": "2026-10-30T09:00:00.000000Z",
                                               "end_time": "2026-10-30T09:00:00.100000Z"}
            if i % 3 == 0:
                cell["metadata"]["scrolled"] = True
    nb["metadata"] = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                     "name": "python3"},
                      "language_info": {"name": "python", "version": "3.8.10"},
                      "toc": {"base_numbering": 1, "nav_menu": {}, "number_sections": True,
                              "toc_cell": False, "toc_window_display": False}}
    nb["nbformat_minor"] = 4
    return jupyter_json(nb)


def zipped_notebook(nb: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("hw/01_language_models.ipynb", json.dumps(nb))
        zf.writestr("__MACOSX/hw/._01_language_models.ipynb", "mac junk")
    return buffer.getvalue()


def class_files(released: dict) -> tuple[list, list]:
    """The class as Canvas exports it: (the LMS cases, the editors' saves), each a list of
    (file name, content, LMS time)."""
    sol = json.dumps(solution())
    lms = [  # (Canvas file name, content, LMS time)
        ("smithjohn_123_1001_01_language_models.ipynb", sol, ON_TIME),
        ("smithjohn_456_1002_01_language_models.ipynb", json.dumps(released), ON_TIME),
        ("doejane_789_1003_01_language_models.ipynb", json.dumps(released), ON_TIME),
        ("doejane_789_1010_01_language_models-1.ipynb", sol, LATER),
        ("leebob_321_1004_report.pdf", b"%PDF-1.4 not a notebook", ON_TIME),
        ("kimann_654_1005_01_language_models.ipynb.txt", sol, ON_TIME),
        ("parkcho_987_1006_hw.zip", zipped_notebook(solution()), ON_TIME),
        ("latefox_LATE_222_1008_01_language_models.ipynb", sol, LATE),
    ]
    saves = [(f"{name}_{uid}_{1100 + i}_01_language_models.ipynb", text, ON_TIME)
             for i, (name, uid, text) in enumerate([
                 ("colabuser", 111, colab(released)),
                 ("colabcopy", 112, colab(released, keep_nbgrader=False)),
                 ("kaggler", 113, kaggle(released)),
                 ("vscoder", 114, vscode(released)),
                 ("labthree", 115, jupyterlab(released, 3)),
                 ("labfour", 116, jupyterlab(released, 4)),
                 ("nbsix", 117, notebook6(released)),
                 ("nbseven", 118, jupyterlab(released, 7))])]
    return lms, saves


def write_export(path, files: list) -> None:
    """A Canvas zip of ``files`` (name, content, LMS time), each entry dated by the LMS."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, content, when in files:
            zf.writestr(zipfile.ZipInfo(name, date_time=when), content)


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """(zip path, unzipped folder, expected rows by student id, a zip of only the students the
    LMS cases are about)."""
    tmp = tmp_path_factory.mktemp("class")
    released = json.loads((release(A, tmp / "release", COURSE) / f"{A}.ipynb").read_text())
    lms, saves = class_files(released)
    archive, core = tmp / "export.zip", tmp / "lms-cases.zip"
    write_export(archive, lms + saves)
    write_export(core, lms)
    folder = tmp / "unzipped"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(folder)
    for name, _, when in lms + saves:  # unzipping by hand keeps the LMS times, as most do
        stamp = datetime(*when, tzinfo=UTC).timestamp()
        os.utime(folder / name, (stamp, stamp))
    expected = {
        "123": (FULL, "graded", "smithjohn", ""),
        "456": (0.0, "graded", "smithjohn", "Lost 18 point(s)"),
        "789": (FULL, "graded", "doejane", "graded 01_language_models-1.ipynb, the latest"),
        "321": (0.0, "ungradable", "leebob", "a PDF was submitted"),
        "654": (FULL, "graded", "kimann", "saved under another name"),
        "987": (FULL, "graded", "parkcho", "inside the zip hw.zip"),
        "222": (FULL - 0.2 * MAX, "graded", "latefox", "after the deadline"),
        **{name.split("_")[1]: (FULL, "graded", name.split("_")[0], "")
           for name, _, _ in saves},
    }
    return archive, folder, expected, core


SAVED = ["111", "112", "113", "114", "115", "116", "117", "118"]  # one per editor, all correct


def _grade(source, out, course, isolation="bubblewrap", **kwargs):
    return grade(A, source, out, course, limits=LIMITS, workers=2, policy=POLICY,
                 log=lambda *a: None, isolation=ISOLATIONS[isolation], **kwargs)


@pytest.fixture(scope="module")
def grading(export, tmp_path_factory, private_course):
    """isolation -> (output folder, rows by student) of the class graded under it, once."""
    done = {}

    def graded_under(isolation: str):
        if isolation not in done:
            out = tmp_path_factory.mktemp(f"graded-{isolation}") / "out"
            rows = _grade(export[0], out, private_course, isolation)
            done[isolation] = out, {r["student_id"]: r for r in rows}
        return done[isolation]

    return graded_under


@pytest.fixture(params=list(ISOLATIONS))
def graded(request, grading):
    return grading(request.param)


@pytest.fixture
def graded_first(grading):
    """The class graded under the first isolation, for the tests about what a run writes."""
    return grading(next(iter(ISOLATIONS)))


def check_rows(rows: dict, expected: dict) -> None:
    assert sorted(rows) == sorted(expected), "every student in the export gets exactly one row"
    for student, (score, status, name, message) in expected.items():
        row = rows[student]
        assert (row["status"], row["name"]) == (status, name), (student, row)
        assert float(row["score"]) == pytest.approx(score), (student, row)
        assert message in row["message"], (student, row)
        if float(row["score"]) < FULL:
            assert row["message"], f"{student} lost points without a reason"


def printed(out, student: str) -> str:
    """Everything the student's notebook printed while graded."""
    nb = json.loads((out / "course" / "autograded" / student / A / f"{A}.ipynb").read_text())
    return "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))


def test_a_zipped_class(graded, grading, export):
    out, rows = graded
    check_rows(rows, export[2])
    assert (out / "grades.csv").read_text() == \
        (grading(next(iter(ISOLATIONS)))[0] / "grades.csv").read_text()  # every isolation agrees
    assert "ignored 01_language_models.ipynb" in rows["789"]["message"]
    for student in SAVED:  # the editors' cells ran: pip skipped, Drive a stand-in, no errors
        assert rows[student]["message"] == "", rows[student]
        tests = json.loads((out / "feedback" / student / "feedback.json").read_text())["tests"]
        assert len(tests) == 7 and all(t["passed"] for t in tests), student
    assert "skipped !pip install" in printed(out, "111")
    assert "7.24" in printed(out, "111")  # the habits cell ran: a table, a plot, tqdm
    copy = json.loads((out / "course" / "autograded" / "111" / A / f"{A}.ipynb").read_text())
    assert any("image/png" in o.get("data", {}) for c in copy["cells"]
               for o in c.get("outputs", [])), "the student's plot is in the graded copy"
    assert "drive.mount skipped" in printed(out, "111")
    assert "skipped %pip install torch" in printed(out, "114")
    feedback = json.loads((out / "feedback" / "456" / "feedback.json").read_text())
    assert all(t["message"] for t in feedback["tests"])  # a reason for every lost point
    html = (out / "feedback" / "456" / "feedback.html").read_text()
    assert "hidden checks" in html and "BEGIN HIDDEN" not in html


def test_the_same_class_unzipped(graded_first, export, tmp_path, private_course):
    """The folder holds the same submissions as the zip (grading is a function of them), and a
    student whose lateness comes from the file's time is graded the same from it."""
    archive, folder, _, _ = export

    def found(source, scratch):
        return [(s.student_id, s.name, s.problem, s.note, s.timestamp,
                 s.notebook.read_bytes() if s.notebook else None)
                for s in collect(source, A, scratch)]

    assert found(folder, tmp_path / "a") == found(archive, tmp_path / "b")
    rows = _grade(folder, tmp_path / "out", private_course, only=["222"])
    assert rows == [graded_first[1]["222"]]


def test_regrading_one_student_keeps_every_other_row(graded_first, export, tmp_path,
                                                     private_course):
    out, _ = graded_first
    archive = export[0]
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = (copy / "grades.csv").read_text().splitlines()
    resumed = _grade(archive, copy, private_course)  # nothing new: every student is kept as it was
    assert (copy / "grades.csv").read_text().splitlines() == before
    assert len(resumed) == len(export[2])
    _grade(archive, copy, private_course, only=["654"])
    after = (copy / "grades.csv").read_text().splitlines()
    assert len(after) == len(before)
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert all(after[i].startswith("654,") for i in changed)
    with pytest.raises(ValueError, match="not in the export: 999"):
        _grade(archive, copy, private_course, only=["999"])


def test_three_shards_merge_into_the_unsharded_grades(graded_first, export, tmp_path,
                                                      private_course):
    """Sharding the LMS cases three ways and merging gives the rows (and gradebook) that
    grading the whole class at once gave them."""
    out, _ = graded_first
    core = export[3]
    shards = [tmp_path / f"shard{i}" for i in (1, 2, 3)]
    for i, folder in enumerate(shards, 1):
        _grade(core, folder, private_course, shard=(i, 3))
    sizes = [len(read_grades(f / "grades.csv")) for f in shards]
    assert sum(sizes) == 7 and all(sizes)
    # a shard that never ran costs its students only: rows that say so, every other row kept
    partial = merge([*shards[:2], tmp_path / "never-ran"], tmp_path / "partial",
                    log=lambda *a: None)
    missing = {r["student_id"] for r in read_grades(shards[2] / "grades.csv")}
    assert set(ungraded(partial)) == missing
    for row in partial:
        if row["student_id"] in missing:
            assert row["score"] == "" and row["name"] and "shard 3/3" in row["message"]
            assert str(tmp_path / "never-ran") in row["message"]
            assert not (tmp_path / "partial" / "feedback" / row["student_id"]).exists()
    merge(shards, tmp_path / "merged", log=lambda *a: None)
    merged = read_grades(tmp_path / "merged" / "grades.csv")
    ids = {r["student_id"] for r in merged}

    def graded(rows):  # flags compare a student with the export graded, which differs here
        return [{k: v for k, v in r.items() if k != "flags"} for r in rows]

    assert graded(merged) == graded([r for r in read_grades(out / "grades.csv")
                                     if r["student_id"] in ids])
    assert len(ids) == 7
    # each shard compares its students with the whole export: pairs across shards are there
    shard_of = {r["student_id"]: i for i, f in enumerate(shards)
                for r in read_grades(f / "grades.csv")}
    pairs = [(r["student_id"], r["match"])
             for r in read_grades(tmp_path / "merged" / "similarity.csv")]
    assert any(m in shard_of and shard_of[m] != shard_of[s] for s, m in pairs), pairs
    with pytest.raises(ValueError, match="graded in both"):
        merge([shards[0], shards[0]], tmp_path / "twice", log=lambda *a: None)
    from nbgrader.api import Gradebook

    def book(folder):
        with Gradebook(f"sqlite:///{folder / 'course' / 'gradebook.db'}") as gb:
            return {s.student.id: (s.score, s.late_submission_penalty, s.timestamp)
                    for s in gb.find_assignment(A).submissions}

    whole = book(out)  # the gradebooks agree too
    assert book(tmp_path / "merged") == {s: whole[s] for s in ids if s in whole}
    assert book(tmp_path / "partial") == {s: whole[s] for s in ids - missing if s in whole}


def test_grades_go_back_to_canvas(graded_first, export, tmp_path):
    """The graded class back to Canvas, read as Canvas documents its gradebook import and its
    Re-Upload Submissions zip (``lms_formats``, which cites them): every student of the export
    under the user id its file names carried, with the score grades.csv gives (the ungradable
    PDF 0), each feedback attached to the file Canvas graded (Jane's resubmission), and every
    student in the gradebook by the name the export gave, so formgrader lists them all."""
    from lms_formats import canvas_comments, canvas_import
    from nbgrader.api import Gradebook

    from autograder.scoring.lms import export as to_lms

    out, rows = graded_first
    to_lms([out], "canvas", tmp_path, log=lambda *a: None)
    book = canvas_import(tmp_path / "canvas_grades.csv")
    assert {u: float(g[A]) for u, g in book["grades"].items()} == \
        {s: float(r["score"]) for s, r in rows.items()}
    latest = {}  # Canvas user id -> id of the file it graded, from the export's names
    with zipfile.ZipFile(export[0]) as zf:
        for name in zf.namelist():
            user, attachment = re.match(r"[a-z]+(?:_LATE)?_(\d+)_(\d+)_", name).groups()
            latest[user] = max(latest.get(user, attachment), attachment, key=int)
    assert canvas_comments(tmp_path / f"canvas_feedback_{A}.zip") == \
        {u: [a] for u, a in latest.items()}
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        assert {s.id: s.last_name for s in gb.students} == {s: r["name"] for s, r in rows.items()}


def test_exports_that_hold_nobody_or_are_broken(tmp_path, private_course):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no submission found"):
        _grade(tmp_path / "empty", tmp_path / "out1", private_course)
    assert not (tmp_path / "out1").exists()  # a failed run leaves nothing behind
    broken = tmp_path / "broken.zip"
    good = io.BytesIO()
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("a_1_2_x.ipynb", "{}" * 1000)
    broken.write_bytes(good.getvalue()[:-30])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        _grade(broken, tmp_path / "out2", private_course)
    assert not (tmp_path / "out2").exists()


def test_shell_lines_are_skipped_with_a_note():
    from helpers import sandbox_program

    skip_shell = sandbox_program("runner").skip_shell

    code = "x = 1\n!pip install foo\n  %pip install bar\ny = x != 2"
    assert skip_shell(code) == ("x = 1\nprint('(grading: skipped !pip install foo)')\n"
                                "  print('(grading: skipped %pip install bar)')\ny = x != 2")
    assert skip_shell("%%bash\nls") == "print('(grading: skipped a %%bash cell)')"
