"""A TA's loop with written answers (nbgrader's manually graded answers): the student's own
words reach the graded copy (never the instructor's model answer), grades.csv says what is
still to grade, a manual score entered in formgrader comes back into grades.csv and the
feedback, and regrades keep it while the answer is unchanged."""

import json
import re
import shutil

import pytest

from autograder.authoring.release import release
from autograder.course import COURSE, source_notebook
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring.grade import grade, read_grades
from autograder.scoring.handgrading import sync
from autograder.scoring.lms import export

pytestmark = pytest.mark.skipif(bool(sandbox_problem()),
                                reason=f"needs bubblewrap: {sandbox_problem()}")

A = "01_language_models"
LIMITS = Limits(timeout_cell=20, timeout_notebook=120, memory_mb=2048, max_procs=64)
QUESTION = "explain_perplexity"  # assignment 01's written question, 3 points
MODEL = "The unigram model ignores context: every token is a draw"  # its model answer


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of the course (a later step changes a hidden test), and 01's release."""
    course = tmp_path_factory.mktemp("written") / "assignments"
    shutil.copytree(COURSE, course, ignore=shutil.ignore_patterns("release", "gradebook.db"))
    assert MODEL in source_notebook(A, course).read_text()
    released = json.loads((release(A, course.parent / "release", course) / f"{A}.ipynb")
                          .read_text())
    return course, released


def _answer(released: dict, text: str | None, solution: dict) -> dict:
    """The solution's code, with the written question answered ``text`` (None: untouched)."""
    nb = json.loads(json.dumps(solution))
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == QUESTION:
            cell["source"] = next(c["source"] for c in released["cells"] if c["metadata"].get(
                "nbgrader", {}).get("grade_id") == QUESTION) if text is None else text
    return nb


def _write(folder, student, nb):
    (folder / student).mkdir(parents=True, exist_ok=True)
    (folder / student / f"{A}.ipynb").write_text(json.dumps(nb))


def _grade(course, subs, out, **kw):
    return {r["student_id"]: r for r in grade(A, subs, out, course, limits=LIMITS, workers=2,
                                              log=kw.pop("log", lambda *a: None), **kw)}


def _give(out, student, score, comment):
    """What a TA does in formgrader: a manual score and a comment for the written answer."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        gb.find_grade(QUESTION, A, A, student).manual_score = score
        gb.find_grade(QUESTION, A, A, student).needs_manual_grade = False
        gb.find_comment(QUESTION, A, A, student).manual_comment = comment
        gb.db.commit()


def test_the_written_answer_loop(course, tmp_path):
    course, released = course
    solution = json.loads(source_notebook(A, course).read_text())
    subs = tmp_path / "subs"
    words = "It ignores context <script>alert(1)</script>, so its perplexity is high."
    _write(subs, "answered", _answer(released, words, solution))
    _write(subs, "blank", _answer(released, None, solution))
    out = tmp_path / "out"
    rows = _grade(course, subs, out)
    auto = rows["answered"]["auto_score"]
    assert auto == rows["answered"]["max_score"] - 3
    answered, blank = rows["answered"], rows["blank"]
    assert (answered["status"], answered["score"], answered["needs_manual"]) == \
        ("needs manual grading", "", 1)
    assert (blank["status"], blank["score"], blank["needs_manual"]) == ("graded", auto, 0)

    # the student's words, escaped, are in the graded copy; the model answer is nowhere
    graded = (out / "course" / "autograded" / "answered" / A / f"{A}.ipynb").read_text()
    assert "It ignores context &lt;script&gt;alert(1)&lt;/script&gt;, so its perplexity" in graded
    assert "Explains why the bigram is lower" in graded  # the rubric, for the grader
    for path in [*(out / "course" / "autograded").rglob("*.ipynb"),
                 *(out / "feedback").rglob("*.*")]:
        assert MODEL not in path.read_text(), path
    feedback = json.loads((out / "feedback" / "blank" / "feedback.json").read_text())
    assert feedback["manual"][0]["comment"] == "No response."

    # no LMS file while a written answer waits for its grader
    with pytest.raises(ValueError, match=r"not final: 01_language_models: answered \(1 written"):
        export([out], "plain", tmp_path / "lms", log=lambda *a: None)

    # a TA grades it in formgrader; sync brings it into grades.csv, the feedback and the LMS file
    _give(out, "answered", 1.5, "Right idea; say what you measured.")
    row = {r["student_id"]: r for r in sync(out, None, log=lambda *a: None)}["answered"]
    export([out], "plain", tmp_path / "lms", log=lambda *a: None)
    lms = {r["student_id"]: r for r in read_grades(tmp_path / "lms" / "grades_plain.csv")}
    assert float(lms["answered"]["score"]) == auto + 1.5
    assert f"{QUESTION}: 1.5 / 3: Right idea; say what you measured." in \
        lms["answered"]["feedback"]
    assert (row["status"], row["score"], row["manual_score"], row["needs_manual"]) == \
        ("graded", auto + 1.5, 1.5, 0)
    html = (out / "feedback" / "answered" / "feedback.html").read_text()
    assert "1.5 / 3" in html and "say what you measured" in html
    assert "rises towards |V| = 12, as the measurement shows (1)" in html

    # a regrade of that student keeps the manual grade while the answer is the same...
    said = []
    row = _grade(course, subs, out, only=["answered"], log=said.append)["answered"]
    assert row["score"] == auto + 1.5, row
    assert any(f"kept the manual grade of {QUESTION}" in line for line in said), said
    # ... and a changed answer needs grading again
    _write(subs, "answered", _answer(released, words + " Also: sparse counts.", solution))
    said.clear()
    row = _grade(course, subs, out, only=["answered"], log=said.append)["answered"]
    assert (row["status"], row["score"], row["needs_manual"]) == ("needs manual grading", "", 1)
    assert any(f"manual grade of {QUESTION} was invalidated (the answer changed)" in line
               for line in said), said
    assert read_grades(out / "grades.csv")[1]["score"] == str(auto)  # the blank one, as it was

    # the hidden tests are fixed: a resumed run regrades everyone graded with the old ones,
    # says so, and the manual grades stay where the answers are the same
    path = source_notebook(A, course)
    path.write_text(path.read_text().replace("ten equally likely digits", "ten digits"))
    said.clear()
    rows = _grade(course, subs, out, log=said.append)
    assert any("tests changed since 2 student(s) were graded" in line for line in said), said
    assert len({r["tests_version"] for r in read_grades(out / "grades.csv")}) == 1

    # nbgrader's own feedback, from the graded course, holds no model answer either
    from autograder.course import nbgrader

    done = nbgrader("generate_feedback", A, "--force", cwd=out / "course", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    produced = list((out / "course" / "feedback").rglob("*.html"))
    assert produced and all(MODEL not in p.read_text() for p in produced)
    assert any("Also: sparse counts" in p.read_text() for p in produced)


PAYLOADS = ["<script>alert(1)</script>", "<img src=x onerror=alert(2)>",
            "~~~<img src=x onerror=alert(3)>~~~", "\\`<img src=x onerror=alert(4)>`",
            "a ```\n\n<img src=x onerror=alert(5)>\n\nb```", "[x](java&#115;cript:alert(6))",
            "[y](javascript:alert(7))", "<javascript:alert(8)>", "    <img src=x onerror=alert(9)>"]
MATH = "Unseen words make it infinite: $P(w \\mid h) < P(w)$."


def _formgrader_page(out, student: str) -> str:
    """The graded notebook as formgrader shows it to a TA (its own template and renderer)."""
    from nbconvert import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": A, "notebook_id": A, "submission_id": "x", "index": 0,
                 "total": 1, "base_url": "", "student": student, "last_name": "",
                 "first_name": "", "notebook_path": ""}
    page, _ = HTMLExporter(config=config).from_filename(
        str(out / "course" / "autograded" / student / A / f"{A}.ipynb"), resources=resources)
    return page


def test_what_students_write_reaches_a_ta_as_text_never_as_script(course, tmp_path):
    """Written answers and added markdown cells render in the TA's browser (formgrader, on the
    Jupyter server's origin): every way markdown lets HTML or a script link through (raw HTML,
    code-span look-alikes, escapes, entities, autolinks) arrives as text, math as math. An
    answer split over two cells (or copied) reaches the TA whole, and words written beside
    a question left blank go to a person instead of scoring 0."""
    course, released = course
    solution = json.loads(source_notebook(A, course).read_text())
    subs = tmp_path / "subs"
    words = "\n\n".join(PAYLOADS + [MATH])
    hostile = _answer(released, words, solution)
    at = next(i for i, c in enumerate(hostile["cells"])
              if c["metadata"].get("nbgrader", {}).get("grade_id") == QUESTION)
    added = {"cell_type": "markdown", "metadata": {}, "source": words}
    hostile["cells"].insert(at, added)
    _write(subs, "hostile", hostile)
    split = _answer(released, "The first half, about the unigram model.", solution)
    split["cells"].insert(at + 1, dict(split["cells"][at], source="The second half, on k."))
    _write(subs, "split", split)
    beside = _answer(released, None, solution)
    beside["cells"].insert(at + 1, dict(added, source="My answer: the unigram ignores context."))
    _write(subs, "beside", beside)
    rows = _grade(course, subs, tmp_path / "out")
    assert {s: r["status"] for s, r in rows.items()} == dict.fromkeys(
        ("hostile", "split", "beside"), "needs manual grading")

    def live(page):  # tags that could run something (formgrader's own have some)
        tags = re.findall(r"<[a-z][^>]*>", page, flags=re.IGNORECASE)
        return {t for t in tags if re.search(r"^<(script|img|iframe|object|embed)|\son\w+\s*="
                                             r"|(href|src)=[\"']?\s*(java|vb|data)", t,
                                             flags=re.IGNORECASE)}

    page = _formgrader_page(tmp_path / "out", "hostile")
    assert page.count("Unseen words make it infinite") == 2  # the answer and the added cell
    assert live(page) <= live(_formgrader_page(tmp_path / "out", "split")), \
        live(page) - live(_formgrader_page(tmp_path / "out", "split"))
    assert "$P(w \\mid h) &lt; P(w)$" in page  # MathJax reads it as P(w | h) < P(w)
    graded = (tmp_path / "out" / "course" / "autograded" / "split" / A / f"{A}.ipynb").read_text()
    assert "The first half" in graded and "The second half, on k." in graded
