"""What grading one submission costs, per assignment: CPU-seconds and peak memory, for sizing a
cluster run (``autograder/cluster/costs.py`` holds what this measured).

For each assignment, ``python -m autograder grade`` grades 1 and then K copies of the master
solution with one worker, in a process of its own (with generous time limits: a busy machine
must not turn a solution into a timeout; CPU time is what is measured). CPU is the grader's,
from the rusage of reaped descendants, plus the sandboxes', from the kernel: each sandbox puts
its processes in cgroups of its own under the grader's parent cgroup, whose count holds every
child's, removed ones too (``cgroups.all_sandboxes_cpu_seconds``), while rusage misses a
killed sandbox's processes. So nothing else may grade on the machine meanwhile. The difference
between the two runs, over K - 1, is one submission's, and the rest is the run's fixed cost
(imports, ``generate_assignment``, the worker and its template, the similarity report of a
class of one or K). Memory is sampled every 0.1 s, as a node's accounting does (proportional
set size, so pages the workers share count once): the peak of the whole tree, and the peak of
one submission's runner (the process that runs the student's code). A second worker is
measured on assignment 01 alone: what each worker adds beside its submission's runner.

    python benchmarks/grading_cost.py [--copies K] [ASSIGNMENT ...]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder.course import assignments, source_notebook
from autograder.isolation.cgroups import all_sandboxes_cpu_seconds


def _tree(root: int) -> dict[int, int]:
    """``root`` and its descendants now: pid -> parent pid."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = {root: 0}, [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found[child] = pid
            todo.append(child)
    return found


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _pss_mb(pid: int, parent: int) -> tuple[float, bool]:
    """(proportional set size in MB, whether it runs a submission's code: a runner started
    for it, or one forked from a worker's template)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0, False
    kb = next((int(line.split()[1]) for line in rollup.splitlines()
               if line.startswith("Pss:")), 0)
    return kb / 1024, _python_of(pid, "runner.py") or (
        _python_of(pid, "template.py") and _python_of(parent, "template.py"))


def _python_of(pid: int, program: str) -> bool:
    """Whether ``pid`` is Python running ``program`` (not bubblewrap, whose arguments name it
    too): a runner, or a worker's template, whose forks (children running the same program)
    run the submissions."""
    arguments = _command(pid).split(b"\0")
    return b"python" in arguments[0] and any(a.endswith(program.encode()) for a in arguments)


class Sampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.tree_peak, self.runner_peak, self.done = pid, 0.0, 0.0, False

    def run(self) -> None:
        while not self.done:
            sizes = [_pss_mb(p, parent) for p, parent in _tree(self.pid).items()]
            self.tree_peak = max(self.tree_peak, sum(s for s, _ in sizes))
            self.runner_peak = max([self.runner_peak] + [s for s, runs in sizes if runs])
            time.sleep(0.1)



def measure(assignment: str, copies: int, workers: int, tmp: Path) -> dict:
    subs = tmp / f"subs-{assignment}-{copies}-{workers}"
    for i in range(copies):
        (subs / f"student{i:03d}").mkdir(parents=True)
        shutil.copy(source_notebook(assignment), subs / f"student{i:03d}" / f"{assignment}.ipynb")
    # rusage of the reaped descendants, not a cgroup made here: each sandbox moves its processes
    # into cgroups of its own, out of any group the benchmark makes
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sandboxes_before = all_sandboxes_cpu_seconds()
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", "import runpy, sys; sys.argv[0] = 'autograder'; "
         "runpy.run_module('autograder', run_name='__main__')", "grade", assignment,
         "--submissions", str(subs), "--out", str(tmp / f"out-{assignment}-{copies}-{workers}"),
         "--workers", str(workers), "--timeout-cell", "600", "--timeout-notebook", "3600"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = Sampler(process.pid)
    sampler.start()
    output = process.communicate()[0]
    sampler.done = True
    sampler.join()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    sandboxes_after = all_sandboxes_cpu_seconds()
    done = re.findall(r"\] student\d+: \S+ (graded|needs manual grading)", output)
    if process.returncode != 0 or len(done) < copies:  # the solution's written answer waits
        raise RuntimeError(f"grading {assignment} failed:\n{output[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sandboxes = (sandboxes_after - sandboxes_before) if sandboxes_before is not None else None
    return {"cpu": cpu + (sandboxes or 0.0), "sandboxes": sandboxes, "wall": wall,
            "tree_mb": sampler.tree_peak, "runner_mb": sampler.runner_peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", default=None)
    parser.add_argument("--copies", type=int, default=6)
    args = parser.parse_args()
    chosen = args.assignments or assignments()
    if all_sandboxes_cpu_seconds() is None:
        print("no cgroup of the grader's accounts CPU here: the sandboxes' CPU is missed")
    print(f"{os.cpu_count()} CPU(s); load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        for assignment in chosen:
            one = measure(assignment, 1, 1, Path(tmp))
            many = measure(assignment, args.copies, 1, Path(tmp))
            each = (many["cpu"] - one["cpu"]) / (args.copies - 1)
            sandbox = ((many["sandboxes"] - one["sandboxes"]) / (args.copies - 1)
                       if one["sandboxes"] is not None else float("nan"))
            print(f"{assignment}: {each:.2f} CPU-s per submission ({sandbox:.2f} in its "
                  f"sandbox), fixed {one['cpu'] - each:.1f}"
                  f" CPU-s per run; peak memory: a submission's runner "
                  f"{max(one['runner_mb'], many['runner_mb']):.0f} MB, the run "
                  f"{max(one['tree_mb'], many['tree_mb']):.0f} MB "
                  f"(wall {one['wall']:.0f} s and {many['wall']:.0f} s)", flush=True)
        two = measure("01_language_models", args.copies, 2, Path(tmp))
        print(f"01_language_models with 2 workers: the run {two['tree_mb']:.0f} MB, "
              f"{two['cpu']:.1f} CPU-s, wall {two['wall']:.0f} s; load "
              f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
