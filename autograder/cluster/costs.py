"""What grading costs, and the Slurm requests derived from it.

The figures are ``benchmarks/grading_cost.py``'s and ``benchmarks/similarity_scale.py``'s, on a
2-core x86-64 machine with torch 2.13 (CPU), rounded up over two runs on a busy machine: each
assignment's CPU-seconds per submission (the grader's, from rusage, and its sandbox's, from the
kernel's count for the sandboxes' cgroups) and its runner's peak proportional set size; a
grading run's fixed cost; the similarity report's fingerprints and comparisons (at 1,000 and
10,000 synthetic students). ``--sbatch=--time=... --mem=...`` overrides what is derived here.

A task's requests are sized so that nothing a student does can cost the task: memory is the
grader's own plus, per worker, its process and the whole per-submission cap (a submission that
allocates up to its cap is stopped there, its row ``crashed``); time is twice the measured
grading of the task's largest shard, plus one whole-notebook limit (a submission that hangs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """One submission of an assignment's master solution, graded by one worker."""

    cpu_seconds: float  # every process together: the worker, the runner, the sandbox
    peak_mb: float      # the runner's peak proportional set size (pages shared count once)


MEASURED = {  # benchmarks/grading_cost.py, 6 copies against 1, twice; memory at least 100 MB
    # (a runner forked from its worker's template shares its pages, which count half in each)
    "01_language_models": Cost(0.4, 120),
    "02_rnn_backprop": Cost(0.9, 70),
    "03_seq2seq": Cost(0.4, 130),
    "04_attention": Cost(0.7, 210),
    "05_transformer": Cost(1.6, 200),
    "06_decoding": Cost(2.2, 170),
    "07_bleu": Cost(0.3, 120),
    "08_bert_mlm": Cost(1.3, 120),
}
RUN_CPU_SECONDS = 20.0   # a grading run's own (measured 6-10): imports, nbgrader, templates
GRADER_MB = 600          # the grading process and its fork server
WORKER_MB = 400          # each worker beside its runner: torch, numpy, the test cells
FINGERPRINT_SECONDS = 0.008  # one answer cell (every task fingerprints the whole class)
FINGERPRINT_MB = 0.065   # and keeps its fingerprint
PAIR_SECONDS = 2.0e-6    # one of the task's answers against one classmate's, through the index
PAIR_MB = 0.00005        # what that leaves (candidates, results of repeated texts, matches)
ANSWERS_PER_STUDENT = 7  # answer cells of an assignment (its measurement cell too), about
MERGE_SECONDS_PER_STUDENT = 0.2
MIN_MINUTES = 10


def cost(assignment: str) -> Cost:
    """The measured cost of ``assignment``; for one not measured, the dearest measured."""
    return MEASURED.get(assignment) or max(MEASURED.values(), key=lambda c: c.cpu_seconds)


@dataclass(frozen=True)
class Request:
    """What one grading task asks Slurm for, and the per-submission memory cap that fits it."""

    cpus: int
    mem_mb: int
    minutes: int
    memory_cap_mb: int  # --memory-mb for each submission: what the request leaves per worker

    def describe(self) -> str:
        grader = self.mem_mb - self.cpus * (WORKER_MB + self.memory_cap_mb)
        return (f"{self.cpus} CPU(s), {self.mem_mb} MB ({grader} MB for the grader and its "
                f"similarity report, then per worker {WORKER_MB} MB and a submission's cap of "
                f"{self.memory_cap_mb} MB), {self.minutes} min")


def similarity_seconds(class_size: int, shard: int) -> float:
    """A task's similarity report: fingerprint every answer of the class, then compare each of
    its ``shard`` students' answers with the classmates the index names (a cost that grows with
    the class, far below one comparison per classmate)."""
    answers = class_size * ANSWERS_PER_STUDENT
    return answers * FINGERPRINT_SECONDS + shard * class_size * ANSWERS_PER_STUDENT * PAIR_SECONDS


def similarity_mb(class_size: int, shard: int) -> int:
    """What that report holds at its peak: every fingerprint, and every pair's result."""
    answers = class_size * ANSWERS_PER_STUDENT
    return math.ceil(answers * FINGERPRINT_MB + shard * answers * PAIR_MB)


def task_seconds(assignment: str, shard: int, workers: int, class_size: int) -> float:
    """The measured CPU-bound time of one task grading ``shard`` students with ``workers``."""
    return (RUN_CPU_SECONDS + similarity_seconds(class_size, shard)
            + math.ceil(shard / workers) * cost(assignment).cpu_seconds)


def request(assignment: str, shard: int, workers: int, memory_cap_mb: int,
            timeout_notebook: float, class_size: int, mem_mb: int | None = None) -> Request:
    """The request of a task grading ``shard`` students (its largest) with ``workers``, each
    submission capped at ``memory_cap_mb``. ``mem_mb``, an instructor's ``--mem``, lowers the
    cap to what it leaves each worker (ValueError when that is less than a submission of this
    assignment needs)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    cap, grader = memory_cap_mb, GRADER_MB + similarity_mb(class_size, shard)
    if mem_mb is not None:
        left = (mem_mb - grader) // workers - WORKER_MB
        needed = math.ceil(2 * cost(assignment).peak_mb)
        if left < needed:
            raise ValueError(
                f"--mem={mem_mb}M is too little for {workers} worker(s) grading {assignment}: "
                f"it needs {grader} MB for the grader and its similarity report, and per "
                f"worker {WORKER_MB} MB plus {needed} MB for a submission, at least "
                f"{grader + workers * (WORKER_MB + needed)} MB; ask for more or for fewer "
                "--workers-per-task")
        cap = min(cap, left)
    mem = mem_mb if mem_mb is not None else grader + workers * (WORKER_MB + cap)
    seconds = 2 * task_seconds(assignment, shard, workers, class_size) + timeout_notebook
    return Request(workers, mem, max(MIN_MINUTES, math.ceil(seconds / 60)), cap)


def merge_minutes(class_size: int) -> int:
    """The merge job's time: each student's rows, feedback and gradebook entry, twice over."""
    return max(MIN_MINUTES, math.ceil(2 * class_size * MERGE_SECONDS_PER_STUDENT / 60))
