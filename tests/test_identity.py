"""Sandbox uids come from one owner (``privileged/identity.py``): distinct for any number of
workers and of grading runs on one host, never a uid the system gives out, and never one that
still owns a process."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.isolation.privileged import identity
from autograder.isolation.privileged.become import as_uid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="leasing uids is root's")

SYSTEM = range(0, 1000)
LOGIN = range(1000, 60_001)
DYNAMIC = range(61_184, 65_520)  # systemd's dynamic users
NOBODY = 65_534

SECOND_RUN = """import json, sys, time
sys.path.insert(0, sys.argv[1])
from autograder.isolation.privileged import identity
held = identity.lease(int(sys.argv[2]))
print(json.dumps(held.uids), flush=True)
time.sleep(30)
"""


def test_two_hundred_workers_get_distinct_uids_outside_every_system_range():
    with identity.lease(400) as held:  # 200 workers, two uids each: no sandbox started
        uids = held.uids
    assert len(uids) == len(set(uids)) == 400
    for uid in uids:
        assert uid not in SYSTEM and uid not in LOGIN and uid not in DYNAMIC and uid != NOBODY
        assert uid >= identity.BASE


def test_a_uid_with_a_live_process_is_never_handed_out():
    with identity.lease(1) as probe:  # the uid the next lease would hand out
        candidate = probe.uids[0]
    squatter = subprocess.Popen(as_uid(candidate) + ["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while candidate not in identity.busy() and time.monotonic() < deadline:
            time.sleep(0.05)
        with identity.lease(3) as held:
            assert candidate not in held.uids, (candidate, held.uids)
    finally:
        squatter.kill()
        squatter.wait()


def test_two_runs_on_one_host_get_disjoint_uids():
    """A second grading run, a process of its own, leases while this one holds its uids."""
    root = str(Path(__file__).resolve().parents[1])
    with identity.lease(20) as mine:
        other = subprocess.Popen([sys.executable, "-c", SECOND_RUN, root, "20"],
                                 stdout=subprocess.PIPE, text=True)
        try:
            theirs = set(json.loads(other.stdout.readline()))
        finally:
            other.kill()
            other.wait()
        assert len(theirs) == 20 and not theirs & set(mine.uids), (mine.uids, theirs)
    with identity.lease(40) as again:  # the kernel released theirs when that run ended
        assert theirs <= set(again.uids), (theirs, again.uids)


def test_a_bad_count_says_what_it_expected():
    with pytest.raises(ValueError, match="count must be an int >= 0"):
        identity.lease(-1)
