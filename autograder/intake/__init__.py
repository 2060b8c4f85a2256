"""Intake: from an LMS export to one plan per student (which notebook, which cells in which
order, how late)."""
