"""Assignment 02: gradients count when they are right, and part 3's cost cell (3 of its 5 points)
when they come from backpropagation through time.

Every answer in ``answers_02.py`` is graded in one run, with busy processes beside the grader the
whole time, and gets exactly its points: backpropagation through time written any honest way
gets full marks, however slow its Python; numerical differentiation (per parameter or batched,
finite differences or complex steps), forward-mode differentiation, answers worked out before
the clock runs and answers fast only where they expect to be timed keep the two correctness
points and lose the cost cell. The cost cell counts CPU time, never wall time: graded again
beside busy processes, the slowest honest answers and the dishonest ones closest to the limit
get the same points.
``benchmarks/bptt_cost.py`` prints what each answer costs at the cell's two model sizes. The
grader's CPU meter (``isolation.cputime``) is tested on its own below.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from answers_02 import AUTOGRAD, HONEST, IN_A_CHILD, NOT_BACKPROPAGATION
from test_redteam import feedback, notebook

from autograder.checks import cpu_seconds, python_madd_seconds
from autograder.isolation.cputime import Meter, members, process_seconds
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring.grade import grade

A = "02_rnn_backprop"
POINTS = {"test_rnn_backward_numeric": 1, "test_rnn_backward_random": 1,
          "test_rnn_backward_cost": 3}
COST = "test_rnn_backward_cost"
SMALL = "forward passes in plain Python on a model with 5,768 parameters"
LARGE = "forward passes in plain Python on a model with 110,864 parameters"
NO_TORCH = "torch is not available while your notebook is graded"
ANSWERS = {  # student: (their rnn_backward, None for the solution's; {cell they lose: why})
    "solution": (None, {}),
    **{name: (answer, {}) for name, answer in HONEST.items()},
    **{name: (NOT_BACKPROPAGATION[name], {COST: SMALL}) for name in (
        "complex_step", "finite_differences", "batched_complex_step", "memoized")},
    "batched_finite_differences": (NOT_BACKPROPAGATION["batched_finite_differences"], {
        "test_rnn_backward_random": "values differ from the expected ones", COST: SMALL}),
    "forward_mode": (NOT_BACKPROPAGATION["forward_mode"], {COST: LARGE}),
    "forward_mode_recurrent": (NOT_BACKPROPAGATION["forward_mode_recurrent"], {COST: LARGE}),
    "dodging_the_clock": (NOT_BACKPROPAGATION["dodging_the_clock"],
                          {COST: "d loss / d E of the timed call (5,768 parameters, seed "}),
    # its children's time is counted where the cgroup counts it, else the call cannot be metered
    "in_a_child": (IN_A_CHILD, {COST: ("other process(es) of your notebook started", SMALL)}),
    "autograd": (AUTOGRAD, dict.fromkeys(POINTS, NO_TORCH)),
}
# the slowest honest answers, and the dishonest ones the limit lets pass at one of the sizes
BESIDE_SPINNERS = ("solution", "all_loops", "complex_step", "forward_mode_recurrent")
SPINNERS = (os.cpu_count() or 2) + 1  # busy processes beside the grader: one more than cores
# The time limits are wall time, which busy processes stretch (on a shared machine, or here by
# design): generous, so that what decides a row is the cost cell's CPU time alone.
LIMITS = Limits(timeout_cell=300, timeout_notebook=1200, memory_mb=2048, max_procs=64)


def _grade(tmp_path_factory, students):
    if sandbox_problem():
        pytest.skip(f"needs a sandbox: {sandbox_problem()}")
    tmp = tmp_path_factory.mktemp("class02")
    for student in students:
        answer = ANSWERS[student][0]
        nb = notebook(A, **({"rnn_backward": answer} if answer else {}))
        # without part 5's measurement, which calls rnn_backward 78 times: the numerical
        # answers would spend minutes there, on what this test does not look at
        nb["cells"] = [c for c in nb["cells"]
                       if not c["metadata"].get("autograder", {}).get("measurement_for")]
        (tmp / "subs" / student).mkdir(parents=True)
        (tmp / "subs" / student / f"{A}.ipynb").write_text(json.dumps(nb))
    rows = grade(A, tmp / "subs", tmp / "out", limits=LIMITS, workers=2, log=lambda *a: None)
    assert sorted(r["student_id"] for r in rows) == sorted(students)
    return {r["student_id"]: r for r in rows}, tmp / "out"


@pytest.fixture(scope="module")
def class_02(tmp_path_factory):
    """Every answer, graded in one run."""
    return _grade(tmp_path_factory, ANSWERS)


@pytest.fixture(scope="module")
def beside_spinners(tmp_path_factory):
    """Some answers, graded in one run while ``SPINNERS`` processes keep the CPUs busy; the CPU
    seconds the spinners got meanwhile; and how much longer than its CPU time a busy loop here
    took then, in wall time."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(SPINNERS)]
    try:
        rows, out = _grade(tmp_path_factory, BESIDE_SPINNERS)
        busy = [process_seconds(s.pid) for s in spinners]
        wall, cpu = time.perf_counter(), time.process_time()
        while time.process_time() < cpu + 1:  # long enough that the scheduler's favour
            pass                                # to a process that just woke evens out
        stretch = (time.perf_counter() - wall) / (time.process_time() - cpu)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    return rows, out, busy, stretch


def _check(rows, out, student):
    _, lost = ANSWERS[student]
    assert (rows[student]["status"], rows[student]["score"]) == \
        ("graded", 14 - sum(POINTS[t] for t in lost)), rows[student]
    failed = {t: r["message"] for t, r in feedback(out, student).items() if not r["passed"]}
    assert sorted(failed) == sorted(lost), failed
    for test, why in lost.items():
        assert any(w in failed[test] for w in ([why] if isinstance(why, str) else why)), \
            failed[test]


@pytest.mark.parametrize("student", sorted(ANSWERS))
def test_each_answer_gets_exactly_its_points(class_02, student):
    _check(*class_02, student)


@pytest.mark.parametrize("student", BESIDE_SPINNERS)
def test_busy_neighbours_change_no_points(beside_spinners, student):
    """The spinners stretch an honest answer's wall time (the fixture's busy loop took longer
    than its CPU time by a quarter at least; its fair share beside them is half a core); its
    CPU time, which the cell counts, stays."""
    rows, out, busy, stretch = beside_spinners
    _check(rows, out, student)
    assert min(busy) > 1 and stretch > 1.25, (busy, stretch)  # the neighbours took their share


def test_the_cost_cell_reports_every_honest_cost_under_the_limit(class_02):
    """What the honest answers printed: their cost at both sizes, in plain-Python forward
    passes (the notebook's output, which students see), with room to spare."""
    _, out = class_02
    for student in ("solution", *HONEST):
        graded_nb = out / "course" / "autograded" / student / A / f"{A}.ipynb"
        cell = next(c for c in json.loads(graded_nb.read_text())["cells"]
                    if c["metadata"].get("nbgrader", {}).get("grade_id") == COST)
        text = "".join("".join(o.get("text", "")) for o in cell["outputs"])
        passes = [float(line.split(" took ")[1].split()[0]) for line in text.splitlines()
                  if " took " in line]
        assert len(passes) == 2 and max(passes) < 80 / 2, (student, text)


# ------------------------------------------------------------------ the grader's CPU meter
BUSY = """import os, signal, sys, threading, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children vanish unwaited when they end
def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
def gone(pid):
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
for line in sys.stdin:
    if line.startswith("spin"):
        spin(0.2)
        thread = threading.Thread(target=spin, args=(0.1,))
        thread.start()
        thread.join()
    elif line.startswith("child"):  # a process that works and ends
        child = os.fork()
        if child == 0:
            spin(0.2)
            os._exit(0)
        gone(child)
    elif line.startswith("worker"):  # a process that waits for work
        go, worker = os.pipe()
        child = os.fork()
        if child == 0:
            os.read(go, 1)
            spin(0.2)
            os._exit(0)
    elif line.startswith("work"):  # and now works, and ends
        os.write(worker, b"x")
        gone(child)
    print("done", flush=True)
"""


def _ask(proc, what: str) -> None:
    proc.stdin.write(what + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "done\n"


def test_the_meter_counts_every_thread_and_names_processes_it_cannot_count():
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        with Meter({}, root=proc.pid) as usage:
            _ask(proc, "spin")
        assert 0.28 <= usage.seconds <= 0.5 and not usage.others and not usage.exact, usage
        with Meter({}, root=proc.pid) as usage:
            _ask(proc, "child")
        assert len(usage.others) == 1 and usage.seconds < 0.1, usage  # its 0.2 s are gone
        _ask(proc, "worker")
        with Meter({}, root=proc.pid) as usage:  # it was there before: its end is what counts
            _ask(proc, "work")
        assert len(usage.others) == 1 and usage.seconds < 0.1, usage
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_meter_reads_a_cgroups_own_count(tmp_path):
    """Where the sandbox's cgroup accounts CPU, its count is the answer: every process it ever
    had, exactly (v2 ``cpu.stat`` in microseconds, v1 ``cpuacct.usage`` in nanoseconds)."""
    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    v2.mkdir()
    v1.mkdir()
    (v2 / "cpu.stat").write_text("usage_usec 1000000\nuser_usec 900000\nsystem_usec 100000\n")
    (v1 / "cpu.stat").write_text("nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
    (v1 / "cpuacct.usage").write_text("5000000000\n")
    for folder, name, after in ((v2, "cpu.stat", "usage_usec 3500000\n"),
                                (v1, "cpuacct.usage", "5250000000\n")):
        with Meter({"unified" if folder == v2 else "cpu": folder}) as usage:
            (folder / name).write_text(after)
        assert usage.exact and not usage.others and usage.seconds == pytest.approx(
            2.5 if folder == v2 else 0.25), usage


def test_the_meter_finds_a_uids_processes_by_their_real_uid():
    assert os.getpid() in members({}, os.getuid(), None)()


def test_cpu_seconds_in_a_students_own_kernel_is_this_processes_cpu_time():
    def busy():
        end = time.process_time() + 0.2
        while time.process_time() < end:
            pass
        return "value"

    seconds, value = cpu_seconds(busy)
    assert value == "value" and 0.2 <= seconds < 0.4
    seconds, _ = cpu_seconds(time.sleep, 0.3)  # waiting is not work
    assert seconds < 0.05
    assert 1e-10 < python_madd_seconds(terms=10_000, repeat=2) < 1e-5
    with pytest.raises(ValueError, match="terms and repeat"):
        python_madd_seconds(terms=0)
    with pytest.raises(TypeError, match="forbidden"):
        cpu_seconds(busy, forbidden="seqlab")
