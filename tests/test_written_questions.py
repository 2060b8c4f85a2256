"""Every assignment ends with a written question about something the student measured with their
own functions: graded by hand, 10-20% of the assignment's points, with a rubric whose points add
up, fed by a measurement cell that no test reads. The model answer (which only graders see)
quotes numbers, and each of them is printed by the solution's measurement or stated in the
question: run here, so a changed measurement cannot leave a stale model answer behind."""

import json
import re
import subprocess
import sys

import nbformat
import pytest

from autograder.course import assignments, source_notebook
from autograder.intake.normalize import measurement_for

NUMBER = re.compile(r"-?\d+\.\d+(?:e[+-]\d+)?")


def _info(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _written(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "markdown" and _info(c).get("grade")
            and _info(c).get("solution")]


@pytest.mark.parametrize("assignment", assignments())
def test_a_written_question_about_a_measurement(assignment):
    nb = nbformat.read(source_notebook(assignment), as_version=4)
    written = _written(nb)
    assert written, f"{assignment} has no written question"
    points = {_info(c)["grade_id"]: _info(c)["points"] for c in nb.cells if _info(c).get("grade")}
    total, by_hand = sum(points.values()), sum(_info(c)["points"] for c in written)
    assert 0.10 <= by_hand / total <= 0.20, f"{assignment}: {by_hand} of {total} points by hand"
    assert f"| **total** | **{total:g}** |" in nb.cells[0].source, "the header's total"
    order = [_info(c).get("grade_id") for c in nb.cells]
    for question in written:
        gid = _info(question)["grade_id"]
        rubric = question.metadata["autograder"]["rubric"]
        assert len(rubric) >= 2 and sum(i["points"] for i in rubric) == _info(question)["points"]
        feeds = [c for c in nb.cells if c.cell_type == "code" and measurement_for(c.metadata)
                 == gid]
        assert len(feeds) == 1, f"{gid}: one measurement cell should feed it, found {len(feeds)}"
        assert order.index(_info(feeds[0])["grade_id"]) < order.index(gid)
        assert "### BEGIN SOLUTION" in feeds[0].source  # the student writes the measurement
        assert f"| {_info(question)['points']:g} |" in nb.cells[0].source


RUN = """
import contextlib, io, json, sys
import matplotlib
matplotlib.use("Agg")
printed = {}
for name, path in json.loads(sys.argv[1]).items():
    nb, scope, out = json.load(open(path)), {}, io.StringIO()
    for cell in nb["cells"]:
        info = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] != "code" or (info.get("grade") and not info.get("solution")):
            continue  # tests are not needed for the measurement
        measures = cell["metadata"].get("autograder", {}).get("measurement_for")
        with contextlib.redirect_stdout(out if measures else io.StringIO()):
            exec("".join(cell["source"]), scope)
    printed[name] = out.getvalue()
print(json.dumps(printed))
"""


def test_the_model_answers_quote_what_the_measurements_print():
    paths = {a: str(source_notebook(a)) for a in assignments()}
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(paths)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)
    for assignment, path in paths.items():
        nb = nbformat.read(path, as_version=4)
        assert printed[assignment].strip(), f"{assignment}: the measurement printed nothing"
        stated = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"
                           and not _info(c).get("solution"))
        for question in _written(nb):
            quoted = NUMBER.findall(question.source)
            assert quoted, f"{assignment}: the model answer quotes no measured number"
            unbacked = [n for n in quoted if n not in printed[assignment] and n not in stated]
            assert not unbacked, (f"{assignment}: the model answer quotes {unbacked}, which "
                                  f"its measurement does not print:\n{printed[assignment]}")
