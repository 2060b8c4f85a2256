"""Isolation: where student code runs and the line it never crosses. ``SECURITY.md`` is the
argument on one page: the program inside the sandbox (``inside/``), what only root runs
(``privileged/``), and the grader's side (``sandbox``, ``session``, ``protocol``, ...)."""
