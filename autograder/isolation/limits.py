"""What every sandbox is held to, written once: the limits of one submission (their defaults
are the command line's) and the packages no answer may use."""

from __future__ import annotations

from dataclasses import dataclass

WITHHELD = ("seqlab", "nltk", "sacrebleu", "transformers", "autograder")
"""Packages no answer may use: the course's reference implementation, the references tests
compare with, and the grader. Absent from every sandbox (a stub stands over each)."""


@dataclass(frozen=True)
class Limits:
    """One submission's limits; the defaults are ``grade``'s."""

    timeout_cell: float = 30.0
    timeout_notebook: float = 300.0
    memory_mb: int = 4096
    max_procs: int = 256
    cpus: float = 1.0  # cores one submission may keep busy at most, all its processes together

    def __post_init__(self):
        for name in ("timeout_cell", "timeout_notebook", "memory_mb", "max_procs", "cpus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
