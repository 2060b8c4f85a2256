"""``python -m autograder slurm`` on a real one-node Slurm cluster (``slurm_cluster``), grading a
class of 30 students in 31 files (the LMS and editor cases of test_class.py and hostile
submissions of test_hostile.py's kinds) as Canvas exports it.

One local ``grade`` run is the reference. Three tasks with ``--wait`` give byte for byte its
grades.csv, feedback and similarity report, and its gradebook. Five tasks, three of which the
scheduler stops (one cancelled mid-run, one past its time limit, one over its memory request),
merge into every other row and the stopped tasks' remaining students as ``ungraded``; ``--resume``
then completes it, identical to the local run. No hostile submission costs its task. ``--check``
reports the node's isolation, and refuses to submit where grading would refuse.

The three runs go at once, as on a busy cluster: the five tasks first, the three behind them,
the local run beside the node; so the minute the stalled task holds its slot is not lost.
Needs Slurm and munge (``.ci/run`` installs them), root and bubblewrap; skipped without them.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import slurm_cluster
from test_class import DUE, FULL, ON_TIME, A, class_files, write_export
from test_hostile import (
    PP,
    WRONG_PP,
    duplicated_answer,
    solution,
    stripped_metadata,
    tampered_tests,
    with_cell,
)

from autograder.authoring.release import release
from autograder.cluster import slurm
from autograder.course import COURSE
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring.grade import in_shard, read_grades, settled_rows

# Time limits far above what a cell needs: the same class graded several times at once on a
# busy machine must grade the same (a cell that runs past its limit is test_hostile's matter)
LIMITS = Limits(timeout_cell=60, timeout_notebook=600, memory_mb=1024, max_procs=64)
POLICY_TOML = f'[due]\n"{A}" = "{DUE.isoformat()}"\n\n[penalty]\nper_day = 0.1\nmax_days = 7\n'
WHY = slurm_cluster.missing() or sandbox_problem()
pytestmark = pytest.mark.skipif(bool(WHY), reason=f"needs a Slurm cluster: {WHY}")

HOSTILE = {  # student -> (notebook, status it must get, here as in the local run)
    "tampered": (tampered_tests(), "graded"),
    "anything": (solution(count_ngrams=(
        "class Anything(dict):\n    def __eq__(self, other):\n        return True\n\n"
        "def count_ngrams(sentences, n):\n    return Anything()\n")), "graded"),
    "patcher": (with_cell(solution(perplexity=WRONG_PP), "perplexity", (
        "import math, torch\nmath.isclose = lambda *a, **k: True\n"
        "torch.allclose = lambda *a, **k: True\n")), "graded"),
    "reference": (solution(perplexity=(
        "from seqlab.lm import perplexity as _p\n\n"
        "def perplexity(log_probs):\n    return _p(log_probs)\n")), "graded"),
    "exits": (solution(sentence_logprob="import os\nos._exit(3)\n"), "crashed"),
    "segfault": (solution(perplexity="import faulthandler\nfaulthandler._sigsegv()\n"),
                 "crashed"),
    "hog": (solution(ffn_forward="hog = b'x' * (3 * 2**30)\n"), "crashed"),
    "forks": (with_cell(solution(), "perplexity", (
        "import os, time\nkids = 0\ntry:\n    for _ in range(500):\n"
        "        if os.fork() == 0:\n            time.sleep(120)\n            os._exit(0)\n"
        "        kids += 1\nexcept OSError:\n    pass\n")), "graded"),
    "exit": (solution(perplexity=PP + "\nimport sys\nsys.exit(0)\n"), "graded"),
    "syntax": (solution(count_ngrams="def count_ngrams(sentences, n)\n    pass\n"), "graded"),
    "stripped": (stripped_metadata(), "graded"),
    "twice": (duplicated_answer(), "graded"),
    "notjson": ("{ this is not json", "ungradable"),
    "empty": ("", "ungradable"),
    "copier": (None, "graded"),  # the first student's notebook, as is: a shared answer
}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A one-node Slurm cluster on the loopback for the session; SLURM_CONF points at it."""
    started = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(started.conf)
    yield started
    started.stop()
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before


@pytest.fixture(scope="module")
def course_class(tmp_path_factory):
    """(the export zip, the late policy file, the student ids by hostile name)."""
    tmp = tmp_path_factory.mktemp("slurm-class")
    released = json.loads((release(A, tmp / "release", COURSE) / f"{A}.ipynb").read_text())
    lms, saves = class_files(released)
    ids = {name: str(700 + i) for i, name in enumerate(HOSTILE)}
    hostile = [(f"{name}_{ids[name]}_{2000 + i}_{A}.ipynb",
                nb if isinstance(nb, str) else json.dumps(nb or solution()), ON_TIME)
               for i, (name, (nb, _)) in enumerate(HOSTILE.items())]
    archive = tmp / "export.zip"
    write_export(archive, lms + saves + hostile)
    policy = tmp / "late_policy.toml"
    policy.write_text(POLICY_TOML)
    return archive, policy, ids


def autograder(*args, timeout=3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


LIMIT_FLAGS = ["--timeout-cell", LIMITS.timeout_cell, "--timeout-notebook",
               LIMITS.timeout_notebook, "--memory-mb", LIMITS.memory_mb, "--max-procs",
               LIMITS.max_procs]


def start_args(archive, policy, out, tasks, *extra):
    return ["slurm", A, "--submissions", archive, "--out", out, "--tasks", tasks,
            "--workers-per-task", 1, "--poll", 1, "--late-policy", policy, *LIMIT_FLAGS,
            *extra]


def gradebook(folder: Path) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{folder / 'course' / 'gradebook.db'}") as gb:
        return {s.student.id: (s.score, s.late_submission_penalty, s.timestamp,
                               sorted((g.name, g.auto_score) for g in s.notebooks[0].grades))
                for s in gb.find_assignment(A).submissions}


def files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_same_as(graded: Path, local: Path) -> None:
    """What an instructor uses of a grading output, the same as the local run's."""
    assert (graded / "grades.csv").read_text() == (local / "grades.csv").read_text()
    assert files(graded / "feedback") == files(local / "feedback")
    for name in ("similarity.csv", "similarity.json", "similarity.html"):
        assert (graded / name).read_text() == (local / name).read_text(), name
    assert gradebook(graded) == gradebook(local)
    assert sorted(os.listdir(graded / "course" / "autograded")) == \
        sorted(os.listdir(local / "course" / "autograded"))


def _pids(out: Path, index: int, tasks: int) -> list[int]:
    """The grading process of task ``index`` (its `grade --shard index/tasks` into ``out``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"grade" in command and f"{index}/{tasks}".encode() in command and \
                any(str(out).encode() in part for part in command):
            found.append(int(entry.name))
    return found


def _until(condition, what: str, seconds: float = 1800) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def _ok(done: subprocess.CompletedProcess, status: int = 0) -> subprocess.CompletedProcess:
    assert done.returncode == status, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def runs(cluster, course_class, tmp_path_factory):
    """Five tasks of which the scheduler stops three (task 2 cancelled after its first
    student; task 3 past its one-minute time limit, its grader stalled from the start, as on a
    hung file system; task 4 over the memory it asked for), three tasks behind them, and the
    local reference run: their outputs, and what following each printed."""
    archive, policy, _ = course_class
    tmp = tmp_path_factory.mktemp("runs")
    stopped, clean, local = tmp / "stopped", tmp / "clean", tmp / "local"
    _ok(autograder(*start_args(archive, policy, stopped, 5, "--sbatch=--hold")))
    entry = json.loads((stopped / "slurm.json").read_text())["submissions"][-1]
    array = entry["array"]

    def scontrol(*args):
        subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True)

    scontrol("update", f"JobId={array}_3", "TimeLimit=1")
    scontrol("update", f"JobId={array}_4", "MinMemoryNode=200")
    scontrol("release", ",".join(f"{array}_{i}" for i in range(1, 6)))
    scontrol("release", entry["merge"])
    submitted = _ok(autograder(*start_args(archive, policy, clean, 3)))
    log = open(tmp / "local.log", "w")
    reference = subprocess.Popen(  # beside the node, as an instructor's machine would
        [sys.executable, "-m", "autograder", "grade", A, "--submissions", archive, "--out",
         local, "--workers", "2", "--late-policy", policy, *map(str, LIMIT_FLAGS)],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    done: set[int] = set()  # whichever task starts first (task 3 and 4 are records apart)

    def stop_them() -> bool:
        if 2 not in done and read_grades(stopped / "shards" / "2" / "grades.csv"):
            subprocess.run(["scancel", f"{array}_2"], check=True)
            done.add(2)
        if 3 not in done and _pids(stopped, 3, 5):
            for pid in _pids(stopped, 3, 5):
                os.kill(pid, signal.SIGSTOP)
            done.add(3)
        return done == {2, 3}

    _until(stop_them, "task 2's first row and task 3's start")
    followed = autograder("slurm", "--follow", stopped, "--poll", 1)
    clean_followed = autograder("slurm", "--follow", clean, "--poll", 1)
    assert reference.wait(3600) == 0, (tmp / "local.log").read_text()[-3000:]
    return SimpleNamespace(local=local, stopped=stopped, clean=clean, array=array,
                           followed=followed, submitted=submitted,
                           clean_followed=clean_followed)


def test_three_tasks_grade_the_class_as_one_local_run(runs, course_class):
    _, _, ids = course_class
    out = runs.clean
    assert "submitted: grading array" in runs.submitted.stdout
    assert f"follow: python -m autograder slurm --follow {out}" in runs.submitted.stdout
    _ok(runs.clean_followed)
    assert_same_as(out / "graded", runs.local)
    rows = {r["student_id"]: r for r in read_grades(out / "graded" / "grades.csv")}
    assert len(rows) >= 30
    for name, (_, status) in HOSTILE.items():  # each costs its own row, as it does locally
        assert rows[ids[name]]["status"] == status, rows[ids[name]]
    assert rows[ids["copier"]]["flags"], "a shared answer is flagged across shards"
    entry = json.loads((out / "slurm.json").read_text())["submissions"][-1]
    states = slurm.jobs([entry["array"]])
    assert sorted(j.task for j in states.values()) == [1, 2, 3]
    assert all(j.state == "COMPLETED" for j in states.values()), states  # no task lost
    scripts = out / "slurm"
    assert "--dependency=afterany:$array merge.sbatch" in (scripts / "submit.sh").read_text()
    assert "#SBATCH --array=1-3" in (scripts / "grade.sbatch").read_text()
    assert f"{FULL:g}" in (out / "graded" / "grades.csv").read_text()


def test_stopped_tasks_cost_their_students_only_and_resume_completes_them(runs):
    """The merge still runs (afterany), writes every row the others graded and names exactly
    the students left; --resume grades those and nobody twice."""
    out, followed = runs.stopped, _ok(runs.followed, 1)
    states = {j.task: j.state for j in slurm.jobs([runs.array]).values()}
    # a node that samples memory (as this one) kills a task over it: FAILED, where cgroups
    # would say OUT_OF_MEMORY
    assert states[4] in ("OUT_OF_MEMORY", "FAILED"), followed.stdout
    assert {**states, 4: None} == {1: "COMPLETED", 2: "CANCELLED", 3: "TIMEOUT", 4: None,
                                   5: "COMPLETED"}, followed.stdout
    for line in ("task 2: CANCELLED", "task 3: TIMEOUT", "over its memory request",
                 f"resume: python -m autograder slurm --resume {out} --sbatch=--time="):
        assert line in followed.stdout, followed.stdout

    merged = {r["student_id"]: r for r in read_grades(out / "graded" / "grades.csv")}
    reference = {r["student_id"]: r for r in read_grades(runs.local / "grades.csv")}
    assert list(merged) == list(reference)  # every student once, in the export's order
    kept = {r["student_id"] for i in (2, 3)  # graded before the stop (and recorded)
            for r in settled_rows(out / "shards" / str(i), A)}
    left = {s for s in reference if any(in_shard(s, (i, 5)) for i in (2, 3, 4))} - kept
    assert {s for s, r in merged.items() if r["status"] == "ungraded"} == left
    assert all(any(in_shard(s, (i, 5)) for s in left) for i in (2, 3, 4))
    for student, row in merged.items():
        if student in left:
            assert row["score"] == "" and "slurm --resume" in row["message"], row
        else:  # graded rows as the local run wrote them (flags come when a shard finishes)
            assert {**row, "flags": ""} == {**reference[student], "flags": ""}, row

    resumed = _ok(autograder("slurm", "--resume", out, "--wait", "--poll", 1))
    assert "resuming shard(s) 2-4 of 5" in resumed.stdout
    assert_same_as(out / "graded", runs.local)
    again = _ok(autograder("slurm", "--resume", out))
    assert "nothing to resume" in again.stdout


def test_check_reports_the_isolation_and_refuses_where_grading_would(cluster, course_class,
                                                                      tmp_path):
    checked = autograder("slurm", "--check", "--sbatch=--partition=debug")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"node: {cluster.node}" in checked.stdout
    assert "isolation: bubblewrap" in checked.stdout
    # a node without bubblewrap or setpriv on its PATH, as a bare compute node: refused
    archive, policy, _ = course_class
    refused = autograder(*start_args(archive, policy, tmp_path / "run", 2, "--check",
                                     "--sbatch=--export=ALL,PATH=/nonexistent"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "not submitted: grading would refuse on the compute node" in refused.stderr
    assert "isolation: NONE AVAILABLE" in refused.stderr
    assert "unprivileged user namespaces" in refused.stderr
    assert not (tmp_path / "run" / "slurm.json").exists()
    assert not (tmp_path / "run" / "shards").exists()
