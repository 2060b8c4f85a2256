"""Grading on the cluster a university already has: one Slurm job array per assignment
(``run``), Slurm's own commands (``slurm``), and what the requests are derived from (``costs``)."""
