"""Authoring: the course and its working copies, student releases, the student edition, the
self-test of each assignment, and the helpers hidden tests share (``testing``)."""
