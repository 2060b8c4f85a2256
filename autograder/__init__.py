"""Autograder for the course's nbgrader assignments (``python -m autograder``)."""
