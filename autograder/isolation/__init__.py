"""Isolation: where student code runs (bubblewrap or the uid fallback: ``kinds``, ``sandbox``),
the program that runs it there (``runner``), and the plain-data line between it and the grader
(``remote``)."""
