"""Scoring: each plan run against the master's tests (``execute``) by workers no submission can
stop (``workers``), and what a run writes: grades.csv, feedback, the nbgrader gradebook, the
similarity report; shards merged; Gradescope's one-submission run."""

from ..course import skip_slow_imports

skip_slow_imports()  # before nbformat: every grading worker imports this package first
