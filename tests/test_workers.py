"""One student never stops the class: the grading pool survives any failure of a worker, and
``grade`` survives the death of one, and Ctrl-C stops it cleanly so that a rerun resumes."""

import csv
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from grading_faults import job
from helpers import coded_solution

from autograder.isolation.sandbox import sandbox_problem
from autograder.scoring.grade import grade
from autograder.scoring.workers import Failure, run_jobs

FAULTS = {"exit": "raised SystemExit: 3", "interrupt": "raised KeyboardInterrupt",
          "base": "raised Custom: not an Exception", "error": "raised ValueError: a grader bug",
          "os_exit": "died (exit code 7)", "killed": "died (exit code -9)",
          "segfault": "died (exit code -11)", "hang": "longer than 20 s",
          "unpicklable": "could not be sent back"}


def test_every_failure_is_one_jobs_failure_and_the_rest_are_graded():
    kinds = [k for f in FAULTS for k in (f, f"ok-{f}")]
    started = time.monotonic()
    results = dict(run_jobs(((k, (k,)) for k in kinds), job, workers=2, deadline=20))
    assert sorted(results) == sorted(kinds)
    for kind, message in FAULTS.items():
        assert isinstance(results[kind], Failure) and message in results[kind].reason, \
            (kind, results[kind])
        assert results[f"ok-{kind}"] == f"graded ok-{kind}"
    assert time.monotonic() - started < 300  # the hung job was stopped, not waited for


def test_the_pool_checks_its_arguments():
    with pytest.raises(ValueError, match="workers must be a positive int, got 0"):
        list(run_jobs([], job, workers=0, deadline=1))


A = "01_language_models"
needs_sandbox = pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap")


def notebook(sleep: float = 0) -> str:
    nb = coded_solution(A)
    if sleep:
        nb["cells"].insert(3, {"cell_type": "code", "metadata": {}, "outputs": [],
                               "execution_count": None,
                               "source": f"import time\ntime.sleep({sleep})\n"})
    return json.dumps(nb)


def export(folder, students):
    for student, text in students.items():
        (folder / student).mkdir(parents=True)
        (folder / student / f"{A}.ipynb").write_text(text)
    return folder


def cgroup_folders() -> set:
    """The cgroups of this process's grading on this host (none where it cannot make them):
    named for the grading process, so another test process's grading is not counted."""
    parents = [Path("/sys/fs/cgroup", c, "seqlab-grader") for c in ("memory", "pids", "")]
    return {p for parent in parents if parent.is_dir() for p in parent.iterdir()
            if p.is_dir() and p.name.startswith(f"{os.getpid()}-")}


@needs_sandbox
def test_a_worker_killed_mid_submission_costs_only_that_students_row(tmp_path):
    """...and leaves nothing behind: its sandbox's (or template's) cgroups are removed."""
    subs = export(tmp_path / "subs", {"a_sleeper": notebook(sleep=40), "b_correct": notebook()})
    killed = []
    before = cgroup_folders()

    def kill_the_worker():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            children = multiprocessing.active_children()
            if children:
                time.sleep(8)  # inside a_sleeper's sleeping cell by now
                os.kill(children[0].pid, signal.SIGKILL)
                killed.append(children[0].pid)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_worker)
    killer.start()
    rows = {r["student_id"]: r for r in grade(A, subs, tmp_path / "out", workers=1,
                                              log=lambda *a: None)}
    killer.join()
    assert killed
    assert rows["a_sleeper"]["status"] == "error", rows["a_sleeper"]
    assert "the grading worker died" in rows["a_sleeper"]["message"]
    assert (rows["b_correct"]["status"], rows["b_correct"]["score"]) == ("graded", 18.0)
    assert cgroup_folders() - before == set()


@needs_sandbox
def test_ctrl_c_keeps_the_rows_written_and_a_rerun_resumes(tmp_path):
    subs = export(tmp_path / "subs", {"a_correct": notebook(), "b_sleeper": notebook(sleep=25)})
    out = tmp_path / "out"
    command = [sys.executable, "-m", "autograder", "grade", A, "--submissions", str(subs),
               "--out", str(out), "--workers", "1", "--timeout-cell", "10"]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    grades = out / "grades.csv"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (grades.exists() and "a_correct" in
                                               grades.read_text()):
        time.sleep(0.2)
    time.sleep(2)  # b_sleeper is being graded now
    run.send_signal(signal.SIGINT)
    stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stderr[-2000:]
    assert "interrupted: 1 of 2 graded" in stdout and "run the same command again" in stdout
    first = grades.read_text()
    assert [r["student_id"] for r in csv.DictReader(first.splitlines())] == ["a_correct"]
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = list(csv.DictReader(grades.read_text().splitlines()))
    assert [r["student_id"] for r in rows] == ["a_correct", "b_sleeper"]
    kept = next(csv.DictReader(first.splitlines()))
    # kept as it was; only the flags, recomputed over the whole export when a run finishes
    assert {**rows[0], "flags": ""} == kept
    assert rows[1]["status"] == "timeout"
