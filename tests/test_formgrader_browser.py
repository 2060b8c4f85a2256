"""formgrader (nbgrader's web UI) in headless Chromium, as a TA uses it: JupyterLab started in
the graded course, the TA finds the students of the assignment, reads a written answer, types
a score and a comment; then ``sync`` and the LMS export carry both into grades.csv, the
student's feedback and the LMS files. The test never calls formgrader's API: what counts is
what the page saves. Screenshots of each step go to
``$SEQLAB_ARTIFACTS/formgrader-screenshots`` (CI keeps that folder), else to pytest's temporary
folder; the test prints where."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile

import pytest
from helpers import chromium, screenshot_folder
from lms_formats import canvas_import
from test_written_answers import (
    QUESTION,
    A,
    _answer,
    _grade,
    course,  # noqa: F401  (a fixture)
)

from autograder.course import source_notebook
from autograder.isolation.sandbox import sandbox_problem
from autograder.scoring.grade import read_grades
from autograder.scoring.handgrading import sync
from autograder.scoring.lms import export

pytestmark = pytest.mark.skipif(bool(sandbox_problem()),
                                reason=f"needs bubblewrap: {sandbox_problem()}")

TOKEN = "ta-t0ken"
WAIT = 180_000  # ms for any one step: a shared machine can be very slow; never a race
WORDS = "Unigrams ignore the context, so their perplexity stays high."
SCORE, COMMENT = 1.5, "Right idea; say what you measured."
# a Canvas download (<lastfirst>_<user id>_<file id>_<file>): the Canvas export needs its ids
ANSWERED, BLANK = "lovelaceada_101_2001", "turingalan_102_2002"
MATHJAX = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js"


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module (helpers.chromium: skipped without one, failed in CI)."""
    yield from chromium()


@pytest.fixture
def graded(course, tmp_path):  # noqa: F811  (the imported fixture)
    """The class graded: 101 answered the written question (it waits for a TA), 102 left it
    blank (0 points, nothing to grade). Returns the output and 101's autograded points."""
    course, released = course
    solution = json.loads(source_notebook(A, course).read_text())
    subs = tmp_path / "canvas"
    subs.mkdir()
    for who, text in ((ANSWERED, WORDS), (BLANK, None)):
        (subs / f"{who}_{A}.ipynb").write_text(json.dumps(_answer(released, text, solution)))
    out = tmp_path / "out"
    rows = _grade(course, subs, out)
    assert (rows["101"]["status"], rows["102"]["status"]) == ("needs manual grading", "graded")
    return out, rows["101"]["auto_score"]


@pytest.fixture
def lab(graded, tmp_path):
    """JupyterLab in the graded course, as a TA starts it (README), on the loopback; its
    address. Stopped by its pid at the end, also when the test fails."""
    folder = graded[0] / "course"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "lab.log"
    with open(log, "w") as handle:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
             "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",  # this port or fail
             f"--ServerApp.token={TOKEN}", f"--notebook-dir={folder}",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            cwd=folder, stdout=handle, stderr=subprocess.STDOUT,
            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")})
    url = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        while True:  # until it answers (or is gone, or after minutes)
            try:
                request = urllib.request.Request(f"{url}/api/status",
                                                 headers={"Authorization": f"token {TOKEN}"})
                urllib.request.urlopen(request, timeout=10).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() - started > 300:
                    pytest.fail(f"JupyterLab did not answer:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_a_ta_grades_a_written_answer_in_formgrader(graded, lab, browser, tmp_path,
                                                    tmp_path_factory):
    """The TA's loop through the UI alone: what formgrader saves is what sync, the feedback
    and the LMS files carry."""
    from playwright.sync_api import expect

    out, auto = graded
    shots = screenshot_folder("formgrader-screenshots", tmp_path_factory)
    print(f"formgrader screenshots: {shots}")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT)
    elsewhere = []  # asked of another host: refused, the test never leaves the machine

    def only_here(route):
        if route.request.url.startswith(lab):
            return route.continue_()
        elsewhere.append(route.request.url)
        return route.abort()

    context.route("**/*", only_here)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        page.goto(f"{lab}/formgrader?token={TOKEN}")  # the token logs the browser in
        submissions = page.locator("#main-table tr", has_text=A).get_by_role(
            "link", name="2", exact=True)  # the assignment's count of submissions
        submissions.wait_for()
        page.screenshot(path=shots / "1-home.png")

        submissions.click()
        students = page.locator("#main-table tr")
        # Canvas's squashed "lastfirst" is kept as the last name: "lovelaceada, None" here
        expect(students.filter(has_text="lovelaceada")).to_contain_text("needs manual grading",
                                                                         timeout=WAIT)
        expect(students.filter(has_text="turingalan")).to_contain_text("graded", timeout=WAIT)
        page.screenshot(path=shots / "2-students.png")

        students.filter(has_text="lovelaceada").get_by_role("link", name="lovelaceada").click()
        page.locator("#main-table").get_by_role("link", name=A).click()  # the notebook
        cell = page.locator(".nbgrader_cell", has=page.locator(f"#{QUESTION}"))
        score, comment = cell.locator(f"#{QUESTION}"), cell.locator(f"#{QUESTION}-comment")
        # loaded once formgrader's scripts set the placeholders (typing earlier is lost)
        expect(cell.locator(f"#{QUESTION}_extra_credit")).to_have_attribute(
            "placeholder", "0", timeout=WAIT)
        expect(comment).to_have_attribute("placeholder", "Type any comments here (supports "
                                          "Markdown and MathJax)", timeout=WAIT)
        assert cell.locator(".text_cell_render").inner_text().strip() == WORDS
        cell.scroll_into_view_if_needed()
        page.screenshot(path=shots / "3-written-answer.png")

        # formgrader saves a field when it loses focus (its "change" event)
        with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and
                                  r.request.method == "PUT" and r.ok):
            score.click()
            page.keyboard.type(str(SCORE))
            comment.click()
        with page.expect_response(lambda r: "/formgrader/api/comment/" in r.url and
                                  r.request.method == "PUT" and r.ok):
            page.keyboard.type(COMMENT)
            cell.locator(".text_cell_render").click()  # away from the comment: it saves
        page.screenshot(path=shots / "4-graded.png")

        page.reload()  # what the gradebook holds now
        expect(comment).to_have_value(COMMENT, timeout=WAIT)
        expect(score).to_have_value(str(SCORE), timeout=WAIT)
    finally:
        context.close()
    # formgrader's page loads MathJax 2 from cdnjs, whatever its settings say; without it
    # (offline, or here) its scripts stop before its keyboard shortcuts: the mouse still grades
    assert {url.split("?")[0] for url in elsewhere} <= {MATHJAX}, elsewhere
    assert set(errors) <= {"MathJax is not defined"}, errors

    # the TA's commands after grading: sync, then the LMS files
    row = {r["student_id"]: r for r in sync(out, None, log=lambda *a: None)}["101"]
    assert (row["status"], row["score"], row["manual_score"], row["needs_manual"]) == \
        ("graded", auto + SCORE, SCORE, 0)
    assert {r["student_id"]: r["score"] for r in read_grades(out / "grades.csv")} == {
        "101": str(auto + SCORE), "102": str(auto)}
    feedback = json.loads((out / "feedback" / "101" / "feedback.json").read_text())
    assert [(m["points"], m["comment"]) for m in feedback["manual"]] == [(SCORE, COMMENT)]
    html = (out / "feedback" / "101" / "feedback.html").read_text()
    assert f"{SCORE} / 3" in html and "say what you measured" in html

    lms = tmp_path / "lms"
    export([out], "plain", lms, log=lambda *a: None)
    export([out], "canvas", lms, log=lambda *a: None)
    plain = {r["student_id"]: r for r in read_grades(lms / "grades_plain.csv")}["101"]
    assert float(plain["score"]) == auto + SCORE
    assert f"{QUESTION}: {SCORE} / 3: {COMMENT}" in plain["feedback"]
    assert canvas_import(lms / "canvas_grades.csv")["grades"]["101"] == {A: f"{auto + SCORE:g}"}
    with zipfile.ZipFile(lms / f"canvas_feedback_{A}.zip") as bundle:
        sent = bundle.read("lovelaceada_101_2001_feedback.html").decode()
    assert f"{SCORE} / 3" in sent and "say what you measured" in sent
