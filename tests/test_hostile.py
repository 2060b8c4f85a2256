"""Hostile submissions against assignment 01: each case is a submission and the row it must get.

One parallel grading run covers every case; a second, serial run of a few of them proves that
workers change nothing and that grading twice gives the same scores. Runs under bubblewrap here
(``.ci/run`` installs it), and again under the uid fallback with Docker's capabilities
(``test_container.py`` sets SEQLAB_TEST_ISOLATION=uid and runs this file under capsh), where
one expectation differs, on purpose: the uid fallback cannot cut off the network.
"""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from helpers import coded_solution

from autograder.course import COURSE, source_notebook
from autograder.intake.late import LatePolicy
from autograder.isolation.kinds import choose
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring.grade import grade

A = "01_language_models"
FULL = 18.0  # every autograded point (the solution's code, its written answer left blank)
MAX = 21.0   # with the 3 points of the written question
DUE = datetime(2026, 11, 1, 23, 59, tzinfo=UTC)
LIMITS = Limits(timeout_cell=6, timeout_notebook=60, memory_mb=1536, max_procs=64)

ISOLATION = os.environ.get("SEQLAB_TEST_ISOLATION", "bubblewrap")
# Tests of what comes after the sandbox (exports, feedback, flags, worker counts): the run under
# the uid fallback leaves them out, since the isolation cannot change their outcome.
same_under_every_isolation = pytest.mark.same_under_every_isolation
pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason="needs a sandbox: "
                                + (sandbox_problem() or ""))


@pytest.fixture(scope="module")
def course(private_course):
    """The private course, with the isolation this run expects in force."""
    assert choose().kind == ISOLATION
    return private_course


def solution(**answers) -> dict:
    """The master solution as JSON, written answer blank (``coded_solution``), with answer
    cells (by grade_id) replaced."""
    nb = coded_solution(A)
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell["source"] = answers[gid]
    return nb


def cell_of(nb: dict, gid: str) -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)


def with_cell(nb: dict, after: str, source: str) -> dict:
    """Insert a student cell (no nbgrader metadata) after the cell ``after``."""
    at = nb["cells"].index(cell_of(nb, after)) + 1
    nb["cells"].insert(at, {"cell_type": "code", "metadata": {}, "source": source,
                            "outputs": [], "execution_count": None})
    return nb


WRONG_PP = "def perplexity(log_probs):\n    return 4.0\n"
PP = "".join(cell_of(solution(), "perplexity")["source"])


def tampered_tests() -> dict:
    nb = solution(perplexity=WRONG_PP)
    test = cell_of(nb, "test_perplexity")
    test["source"] = "pass  # all good\n"
    test["metadata"]["nbgrader"]["points"] = 100
    first = cell_of(nb, "test_count_ngrams_examples")
    nb["cells"].insert(nb["cells"].index(first), json.loads(json.dumps(first)))  # duplicated
    nb["cells"].remove(cell_of(nb, "test_ffn_forward"))  # deleted
    half = cell_of(nb, "test_mle_bigram")  # split in two
    lines = "".join(half["source"]).splitlines(keepends=True)
    tail = json.loads(json.dumps(half))
    half["source"], tail["source"] = "".join(lines[:4]), "".join(lines[4:])
    nb["cells"].insert(nb["cells"].index(half) + 1, tail)
    return nb


def stripped_metadata() -> dict:
    nb = solution()
    nb["cells"] = [c for c in nb["cells"]
                   if not c["metadata"].get("nbgrader", {}).get("grade")]  # no test cells
    for c in nb["cells"]:
        c["metadata"] = {}
    return nb


def foreign_format() -> dict:
    nb = solution()
    nb["nbformat_minor"] = 99
    nb["metadata"]["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    for c in nb["cells"]:
        c.pop("id", None)
    return nb


def duplicated_answer() -> dict:
    nb = solution()
    answer = cell_of(nb, "perplexity")
    wrong = json.loads(json.dumps(answer))
    wrong["source"] = WRONG_PP
    nb["cells"].insert(nb["cells"].index(answer), wrong)  # a wrong copy first, then the right
    return nb


class _Catch(BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self):
        _Catch.hits += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = HTTPServer(("127.0.0.1", 0), _Catch)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


def cases(out, port, course=COURSE) -> dict:
    """student -> (notebook dict | raw text | None, expected (score, status, message part))."""
    master = source_notebook(A, course).resolve()
    reads = [master, out / "course" / "gradebook.db", out / "grades.csv",
             "/etc/shadow", out.parent / "subs" / "correct" / "my_homework.ipynb"]
    writes = [out / "grades.csv", out / "course" / "gradebook.db"]
    spy = (f"found = []\nfor path in {[str(p) for p in reads]!r}:\n"
           "    try:\n        open(path, 'rb').read(10)\n        found.append(path)\n"
           "    except Exception as err:\n        print('blocked', type(err).__name__)\n"
           f"for path in {[str(p) for p in writes]!r}:\n"
           "    try:\n        open(path, 'w').write('student_id,score\\nspy,100\\n')\n"
           "        found.append(path)\n    except Exception as err:\n"
           "        print('blocked', type(err).__name__)\n"
           "print('LEAKED' if found else 'sealed')\n"
           "import tempfile\n"
           "for path in [tempfile.gettempdir() + '/note', 'note', '/usr/note']:\n    try:\n"
           "        open(path, 'w').write('x')\n        print('wrote', path)\n"
           "    except OSError as err:\n        print('read-only', path)\n")
    return {
        "correct": (solution(), (FULL, "graded", "")),
        "partly": (solution(perplexity=WRONG_PP), (15, "graded", "")),
        "syntax_error": (solution(count_ngrams="def count_ngrams(sentences, n)\n    pass\n"),
                         (14, "graded", "SyntaxError")),
        "equal_to_anything": (solution(count_ngrams=(
            "class Anything(dict):\n    def __eq__(self, other):\n        return True\n\n"
            "def count_ngrams(sentences, n):\n    return Anything()\n")), (14, "graded", "")),
        "float_that_lies": (solution(perplexity=(
            "class F(float):\n    def __eq__(self, o):\n        return True\n"
            "    __ne__ = lambda self, o: False\n\n"
            "def perplexity(log_probs):\n    return F(1.0)\n")), (15, "graded", "")),
        "patches_comparisons": (with_cell(solution(perplexity=WRONG_PP), "perplexity", (
            "import math, numpy, torch, builtins\nimport autograder.checks as c\n"
            "math.isclose = lambda *a, **k: True\ntorch.allclose = lambda *a, **k: True\n"
            "numpy.allclose = lambda *a, **k: True\nc.expect_float = lambda *a, **k: None\n"
            "expect_float = expect_counts = expect_tensor = lambda *a, **k: None\n"
            "own_work = lambda f, *a, **k: 4.0\nbuiltins.AssertionError = type('X', (Exception,),"
            " {})\n")), (15, "graded", "")),
        "breaks_ipython": (with_cell(solution(perplexity=WRONG_PP), "perplexity", (
            "import sys\nip = get_ipython()\nip.run_cell = lambda *a, **k: None\n"
            "sys.excepthook = lambda *a: None\nip.showtraceback = lambda *a, **k: None\n")),
            (15, "graded", "")),
        "uses_reference": (solution(perplexity=(
            "from seqlab.lm import perplexity as _p\n\n"
            "def perplexity(log_probs):\n    return _p(log_probs)\n")),
            (15, "graded", "not available while your notebook is graded")),
        "finds_reference": (solution(perplexity=(
            "import sys, importlib\nsys.path[:0] = [" + repr(
                str(source_notebook(A).parents[3] / "lib")) + "]\n"
            "sys.modules.pop('seqlab', None)\n"
            "try:\n    lm = importlib.import_module('seqlab.lm')\nexcept ImportError:\n"
            "    import nltk.lm as lm\n\ndef perplexity(log_probs):\n"
            "    return lm.perplexity(log_probs)\n")),
            (15, "graded", "is not available while your notebook is graded")),
        "symlinked_import": (solution(perplexity=(
            "import os, sys, sysconfig\n"
            "os.symlink(sysconfig.get_paths()['purelib'], 'site')  # another path to it\n"
            "sys.path.insert(0, os.path.abspath('site'))\nsys.modules.pop('nltk', None)\n\n"
            "def perplexity(log_probs):\n    import nltk.lm\n"
            "    return nltk.lm.api.LanguageModel\n")),
            (15, "graded", "nltk is not available while your notebook is graded")),
        "symlink_to_master": (master,
                              (0, "ungradable", "is a symbolic link, which is never followed")),
        "spy": (with_cell(solution(), "perplexity", spy), (FULL, "graded", "")),
        "network": (with_cell(solution(), "perplexity", (
            "import urllib.request\ntry:\n    urllib.request.urlopen("
            f"'http://127.0.0.1:{port}/', timeout=3)\n    print('REACHED')\n"
            "except Exception as err:\n    print('offline', type(err).__name__)\n")),
            (FULL, "graded", "")),
        "os_exit": (solution(sentence_logprob="import os\nos._exit(3)\n"),
                    (9, "crashed", "kernel died")),
        "segfault": (solution(perplexity="import faulthandler\nfaulthandler._sigsegv()\n"),
                     (12, "crashed", "segmentation fault")),
        "out_of_memory": (solution(ffn_forward="hog = b'x' * (3 * 2**30)\n"),
                          (15, "crashed", "out of memory")),
        "infinite_loop": (solution(perplexity="while True:\n    pass\n" + PP),
                          (15, "timeout", "ran past the 6 s limit")),
        "loop_in_answer": (solution(perplexity="def perplexity(log_probs):\n    while True:\n"
                                               "        pass\n"), (15, "timeout", "")),
        "ignores_alarm": (solution(perplexity=(
            "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "signal.setitimer = lambda *a: None\nwhile True:\n    pass\n")),
            (12, "timeout", "time limit")),
        "sys_exit": (solution(perplexity=PP + "\nimport sys\nsys.exit(0)\n"),
                     (FULL, "graded", "sys.exit")),
        "noisy": (solution(count_ngrams="import sys, warnings\n" + "".join(cell_of(
            solution(), "count_ngrams")["source"]).replace(
            "    counts = Counter()", "    warnings.warn('careful')\n"
            "    print('debug', file=sys.stderr)\n    counts = Counter()")),
            (FULL, "graded", "")),
        "huge_output": (with_cell(solution(), "perplexity", "print('x' * 5_000_000)\n"),
                        (FULL, "graded", "")),
        "fork_bomb": (with_cell(solution(), "perplexity", (
            "import os, time\nkids = 0\ntry:\n    for _ in range(500):\n"
            "        if os.fork() == 0:\n            time.sleep(120)\n            os._exit(0)\n"
            "        kids += 1\nexcept OSError:\n    pass\nprint('forked', kids)\n")),
            (FULL, "graded", "")),
        "random_answer": (solution(perplexity=(
            "import random, math\n\ndef perplexity(log_probs):\n"
            "    if random.random() < 0.5:\n        return 0.0\n"
            "    return math.exp(-sum(log_probs) / len(log_probs))\n")), (None, "graded", "")),
        "tampered_tests": (tampered_tests(), (15, "graded", "")),
        "stripped_metadata": (stripped_metadata(), (FULL, "graded", "")),
        "foreign_format": (foreign_format(), (FULL, "graded", "")),
        "duplicated_answer": (duplicated_answer(), (FULL, "graded", "")),
        "late": (solution(), (FULL - 0.2 * MAX, "graded", "after the deadline")),
        "invalid_json": ("{ this is not json", (0, "ungradable", "not valid JSON")),
        "empty_file": ("", (0, "ungradable", "the file is empty")),
        "no_notebook": (None, (0, "ungradable", "no notebook")),
    }


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, server, course):
    tmp = tmp_path_factory.mktemp("hostile")
    subs, out = tmp / "subs", tmp / "out"
    table = cases(out, server, course)
    on_time = (DUE - timedelta(days=1)).timestamp()
    for student, (nb, _) in table.items():
        folder = subs / student
        folder.mkdir(parents=True)
        if nb is None:
            (folder / "notes.txt").write_text("forgot the notebook")
            continue
        path = folder / ("my_homework.ipynb" if student == "correct" else f"{A}.ipynb")
        if isinstance(nb, os.PathLike):  # a link to a file the grader must never read
            path.symlink_to(nb)
            continue
        path.write_text(nb if isinstance(nb, str) else json.dumps(nb))
        stamp = (DUE + timedelta(days=1.5)).timestamp() if student == "late" else on_time
        os.utime(path, (stamp, stamp))
    (subs / "late" / "timestamp.txt").write_text("2026-10-01 00:00:00")  # ignored: student-made
    policy = LatePolicy(due={A: DUE}, per_day=0.1, max_days=7)
    rows = grade(A, subs, out, course, limits=LIMITS, workers=2, policy=policy,
                 log=lambda *a: None)
    return table, out, {r["student_id"]: r for r in rows}, subs, policy


def expect_row(table, rows, student):
    score, status, message = table[student][1]
    row = rows[student]
    assert row["status"] == status, (student, row)
    if score is not None:
        assert row["score"] == pytest.approx(score), (student, row)
    assert row["max_score"] == MAX
    assert message in row["message"], (student, row)


STUDENTS = [
    "correct", "partly", "syntax_error", "equal_to_anything", "float_that_lies",
    "patches_comparisons", "breaks_ipython", "uses_reference", "finds_reference",
    "symlinked_import", "symlink_to_master", "spy",
    "network", "os_exit", "segfault", "out_of_memory", "infinite_loop", "loop_in_answer",
    "ignores_alarm", "sys_exit", "noisy", "huge_output", "fork_bomb", "random_answer",
    "tampered_tests", "stripped_metadata", "foreign_format", "duplicated_answer", "late",
    "invalid_json", "empty_file", "no_notebook"]


def test_the_suite_covers_every_case(tmp_path):
    assert sorted(STUDENTS) == sorted(cases(tmp_path, 1)) and len(STUDENTS) >= 20


@pytest.mark.parametrize("student", STUDENTS)
def test_case_gets_its_row(hostile, student):
    table, _, rows, _, _ = hostile
    expect_row(table, rows, student)


def test_every_submission_is_exactly_one_row(hostile):
    table, out, rows, _, _ = hostile
    with open(out / "grades.csv") as handle:
        written = list(csv.DictReader(handle))
    assert list(written[0]) == ["student_id", "name", "assignment", "score", "max_score",
                                "auto_score", "manual_score", "needs_manual", "status",
                                "message", "flags", "tests_version"]
    assert sorted(r["student_id"] for r in written) == sorted(table) == sorted(rows)


def autograded_text(out, student):
    path = out / "course" / "autograded" / student / A / f"{A}.ipynb"
    return path.read_text()


def printed(out, student) -> str:
    """Everything the student's notebook printed while graded."""
    nb = json.loads(autograded_text(out, student))
    texts = [o.get("text", "") for c in nb["cells"] for o in c.get("outputs", [])]
    return "".join(t if isinstance(t, str) else "".join(t) for t in texts)


def test_the_sandbox_hides_the_course_and_the_network(hostile, server):
    _, out, rows, subs, _ = hostile
    spy = printed(out, "spy")
    assert "sealed" in spy and "LEAKED" not in spy and spy.count("blocked") == 7
    assert "wrote note" in spy and "read-only /usr/note" in spy  # its own place to write
    assert spy.count("wrote ") == 2  # and its temporary folder (its own scratch: TMPDIR)
    with open(out / "grades.csv") as handle:
        assert [r["student_id"] for r in csv.DictReader(handle)].count("spy") == 1
    if ISOLATION == "bubblewrap":
        assert "offline" in printed(out, "network") and _Catch.hits == 0
    else:  # documented: the uid fallback cannot cut off the network (one submission per box)
        assert "REACHED" in printed(out, "network") and _Catch.hits == 1
    assert (subs / "correct" / "my_homework.ipynb").exists()
    forks = printed(out, "fork_bomb")
    assert "forked" in forks and int(forks.split("forked")[1].split()[0]) < LIMITS.max_procs


def test_huge_outputs_are_truncated_and_feedback_hides_hidden_tests(hostile):
    table, out, _, _, _ = hostile
    assert len(autograded_text(out, "huge_output")) < 200_000
    for student in table:
        for name in ("feedback.json", "feedback.html"):
            text = (out / "feedback" / student / name).read_text()
            assert "_oracle_counts" not in text and "HIDDEN" not in text
        if (out / "course" / "autograded" / student).exists():
            assert "_oracle_counts" not in autograded_text(out, student)
    feedback = json.loads((out / "feedback" / "partly" / "feedback.json").read_text())
    failed = [t for t in feedback["tests"] if not t["passed"]]
    assert [t["test"] for t in failed] == ["test_perplexity"] and "should be" in \
        failed[0]["message"]


def nbgrader(out, *args):
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=out / "course",
                            capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:"
                                                       f"{os.environ['PATH']}"})
    assert result.returncode == 0, result.stderr[-2000:]


@same_under_every_isolation
def test_nbgrader_export_agrees_with_grades_csv(hostile):
    _, out, rows, _, _ = hostile
    nbgrader(out, "export", "--to", "export.csv")
    with open(out / "course" / "export.csv") as handle:
        exported = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert set(exported) == set(rows)  # ungradable students too: the gradebook names them
    for student, row in rows.items():
        assert float(exported[student]["score"]) == pytest.approx(row["score"]), student
        if row["status"] != "ungradable":  # no submission in the gradebook: nbgrader says 0
            assert float(exported[student]["max_score"]) == MAX
    assert float(exported["late"]["late_submission_penalty"]) == pytest.approx(0.2 * MAX)


@same_under_every_isolation
def test_serial_grading_gives_the_same_rows(hostile, tmp_path, course):
    table, out, rows, subs, policy = hostile
    chosen = ["partly", "random_answer", "tampered_tests", "sys_exit", "late"]
    again = tmp_path / "subs"
    again.mkdir()
    for student in chosen:
        shutil.copytree(subs / student, again / student)
    serial = grade(A, again, tmp_path / "out", course, limits=LIMITS, workers=1,
                   policy=policy, log=lambda *a: None)

    def graded(row):  # flags compare a student with the class, which differs here
        return {k: v for k, v in row.items() if k != "flags"}

    assert [graded(r) for r in serial] == [graded(rows[s]) for s in sorted(chosen)]


@same_under_every_isolation
def test_no_sandbox_means_no_grading_unless_asked(tmp_path):
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no bwrap on PATH
    (tmp_path / "subs" / "a").mkdir(parents=True)
    (tmp_path / "subs" / "a" / "hw.ipynb").write_text(json.dumps(solution()))
    command = [sys.executable, "-m", "autograder", "grade", A, "--submissions",
               str(tmp_path / "subs"), "--out", str(tmp_path / "out")]
    refused = subprocess.run(command, capture_output=True, text=True, env=env)
    assert refused.returncode == 2
    assert "bubblewrap is not installed" in refused.stderr
    assert "--unsafe-no-sandbox" in refused.stderr
    unsafe = subprocess.run([*command, "--unsafe-no-sandbox", "--workers", "1"],
                            capture_output=True, text=True, env=env)
    assert unsafe.returncode == 0, unsafe.stderr[-2000:]
    assert "NO SANDBOX" in unsafe.stdout
    with open(tmp_path / "out" / "grades.csv") as handle:
        assert float(next(csv.DictReader(handle))["score"]) == FULL


@same_under_every_isolation
def test_flags_are_checked(tmp_path):
    for flag, value in [("--workers", "0"), ("--memory-mb", "-1"), ("--timeout-cell", "0")]:
        result = subprocess.run([sys.executable, "-m", "autograder", "grade", A,
                                 "--submissions", str(tmp_path), "--out", str(tmp_path / "o"),
                                 flag, value], capture_output=True, text=True)
        assert result.returncode == 2 and flag.lstrip("-").replace("-", "_") in result.stderr


@same_under_every_isolation
def test_nbgrader_feedback_works_on_the_gradebook_and_hides_hidden_tests(hostile):
    _, out, _, _, _ = hostile
    nbgrader(out, "generate_feedback", A, "--student", "partly", "--force")
    page = (out / "course" / "feedback" / "partly" / A / f"{A}.html").read_text()
    assert "Score: 15.0 / 21.0" in page
    assert "_oracle_counts" not in page and "HIDDEN TESTS" not in page


@same_under_every_isolation
def test_formgrader_shows_our_grades_and_takes_manual_ones(hostile, tmp_path):
    """formgrader (nbgrader's web UI) on a copy of the graded course: it lists our scores,
    renders the graded notebook, and a manual score given there reaches `nbgrader export`."""
    _, out, rows, _, _ = hostile
    course = tmp_path / "course"
    shutil.copytree(out / "course", course)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "server", "--no-browser", f"--port={port}",
         "--ServerApp.token=t0ken", "--allow-root", f"--ServerApp.root_dir={course}"],
        cwd=course, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def call(path, data=None):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                         method="PUT" if data else "GET",
                                         headers={"Authorization": "token t0ken"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read().decode()
            return json.loads(body) if path.startswith("/formgrader/api") else body

    try:
        for _ in range(120):
            try:
                call("/formgrader/api/status")
                break
            except OSError:
                time.sleep(0.5)
        listed = {n["student"]: n for n in call(f"/formgrader/api/submitted_notebooks/{A}/{A}")}
        assert {s: n["score"] for s, n in listed.items()} == {
            s: r["score"] + (0.2 * MAX if s == "late" else 0)  # formgrader shows the raw score
            for s, r in rows.items() if r["status"] != "ungradable"}
        assert listed["partly"]["failed_tests"] and not listed["correct"]["failed_tests"]
        page = call(f"/formgrader/submissions/{listed['partly']['id']}/")
        assert "AssertionError" in page and "_oracle_counts" not in page
        grades = call(f"/formgrader/api/grades?submission_id={listed['partly']['id']}")
        wrong = next(g for g in grades if g["name"] == "test_perplexity")
        call(f"/formgrader/api/grade/{wrong['id']}", json.dumps({"manual_score": 3}).encode())
    finally:
        server.terminate()
        server.wait(30)
    nbgrader(tmp_path, "export", "--to", "e.csv")
    with open(course / "e.csv") as handle:
        exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader(handle)}
    assert exported["partly"] == FULL


@pytest.fixture
def sandbox(tmp_path):
    """One sandbox for a test; its support folder goes with it, also where the uid fallback
    puts it outside ``tmp_path`` (in /tmp, as grading does)."""
    from autograder.isolation.sandbox import Sandbox, support_folder

    box = Sandbox(support_folder(choose()), LIMITS, choose())
    yield box
    box.close_template()
    shutil.rmtree(box.support, ignore_errors=True)


def test_without_cgroups_rlimits_still_cap_memory(tmp_path, course, sandbox):
    """Hosts that do not let the grader create cgroups (laptops, some containers) fall back to
    rlimits: the allocation fails inside the student's cell and grading goes on."""
    from autograder.intake.normalize import plan, read_notebook
    from autograder.scoring.execute import grade_steps

    master = read_notebook(source_notebook(A, course))
    submitted = tmp_path / "hw.ipynb"
    submitted.write_text(json.dumps(with_cell(solution(), "ffn_forward",
                                              "hog = b'x' * (3 * 2**30)\n")))
    student = read_notebook(submitted)
    sandbox.cgroups = False
    held = sandbox.limits_in_force
    assert f"memory {LIMITS.memory_mb} MB (address-space rlimit)" in held, held
    # the runner never runs as root in a sandbox, so the per-user process cap binds it
    assert f"{LIMITS.max_procs} processes (per-user rlimit" in held, held
    result = grade_steps(plan(master, student), sandbox, "rlimit")
    assert result["status"] == "graded"
    assert "MemoryError" in result["message"]
    assert sum(t["points"] for t in result["tests"]) == FULL


LEAVES_FILES = '''import os
for place in ("/tmp", "/var/tmp", "/dev/shm"):
    try:
        os.makedirs(os.path.join(place, "seqlab-left-behind", "inner"), exist_ok=True)
        with open(os.path.join(place, "seqlab-left-behind-file"), "w") as handle:
            handle.write("for whoever gets this uid next")
    except OSError as err:
        print(place, type(err).__name__)
'''


def test_a_sandbox_leaves_nothing_in_places_anyone_may_write(tmp_path, course, sandbox):
    """The uid fallback has no private /tmp: what a sandbox writes to /tmp, /var/tmp or
    /dev/shm would outlive it, for the next sandbox of its uid (another student's, two
    submissions later in the same worker) to read, and for the disk to keep. Stopping a
    sandbox removes it (bubblewrap's are private tmpfs anyway)."""
    from autograder.intake.normalize import plan, read_notebook
    from autograder.scoring.execute import grade_steps

    left = [os.path.join(p, n) for p in ("/tmp", "/var/tmp", "/dev/shm")
            for n in ("seqlab-left-behind", "seqlab-left-behind-file")]
    assert not any(os.path.lexists(p) for p in left), "left from an earlier run"
    submitted = tmp_path / "hw.ipynb"
    submitted.write_text(json.dumps(with_cell(solution(), "imports", LEAVES_FILES)))
    result = grade_steps(plan(read_notebook(source_notebook(A, course)),
                              read_notebook(submitted)), sandbox, f"{os.getpid()}-0")
    assert sum(t["points"] for t in result["tests"]) == FULL, result["message"]
    assert [p for p in left if os.path.lexists(p)] == []
