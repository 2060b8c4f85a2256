"""Which isolation student code can have here, strongest first, and what each one holds.

- ``bubblewrap``: namespaces. The sandbox sees a read-only whitelist of the system (the course,
  the output and other students' files are not there at all), has no network, its own process
  tree and scratch space; student code runs as an unprivileged uid (where the grader is root,
  one of two leased per grading worker in turn, see ``privileged/identity.py``; the grader's
  own otherwise). Needs unprivileged
  user namespaces, or root with ``CAP_SYS_ADMIN``, which Docker's default capability set (so
  Gradescope) does not grant.
- ``uid``: where namespaces are unavailable but the grader is root (Gradescope, ``docker run``).
  Each sandbox runs as an unprivileged uid of its own (leased, so sandboxes graded at once
  cannot read, signal or trace each other), in a scratch folder only it may enter, with rlimits
  (and cgroups where writable). Whatever of the grader's it could read must be unreadable to
  that uid: ``exposure`` checks the course, the output, the submissions, the packages no answer
  may use and every copy of them on the host before grading, and the run refuses, naming the
  ``chmod`` that fixes it (``python -m autograder hide-withheld`` closes those packages). The
  kernel refuses the sandbox any program (a seccomp filter, ``inside/rules.refuse_syscalls``),
  and an audit hook (``inside/rules.confine``) refuses ctypes and reading the folders of what an
  assignment
  withholds on top (torch in 02), which other assignments' sandboxes must read: that refusal
  a student could get around, by opening files relative to a folder's descriptor.
  What it does not stop that bubblewrap does: the network (a notebook can reach the internet
  and the host's loopback), reading world-readable files of the system, writing to
  world-writable places (/tmp, /dev/shm) within the file-size rlimit. In a container that grades
  one submission (Gradescope) none of these reaches another student or a grade: the hidden tests
  and results are root's, and results.json is written by the grader only.
- ``none``: ``--unsafe-no-sandbox``, for code you trust.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from .privileged import identity
from .privileged.become import as_uid

BUBBLEWRAP, UID, NONE = "bubblewrap", "uid", "none"
DOCKER_CAPABILITIES = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid",
                       "setpcap", "net_bind_service", "net_raw", "sys_chroot", "mknod",
                       "audit_write", "setfcap")
"""Docker's default capability set: what ``docker run`` (and Gradescope) grant root."""


@dataclass(frozen=True)
class Isolation:
    kind: str  # BUBBLEWRAP, UID or NONE
    why_not_stronger: str = ""  # why bubblewrap is not used, in words

    def describe(self) -> str:
        if self.kind == BUBBLEWRAP:
            return ("bubblewrap: no network, read-only whitelist, own scratch tmpfs, an "
                    "unprivileged uid")
        if self.kind == UID:
            return (f"uid fallback (an unprivileged uid per sandbox; bubblewrap unavailable: "
                    f"{self.why_not_stronger}): the network is NOT cut off")
        return ("NO SANDBOX (--unsafe-no-sandbox): student code can read and write anything "
                "this user can")


def bubblewrap_problem() -> str:
    """Why bubblewrap cannot sandbox here ('' when it can)."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux; this is {sys.platform}"
    if shutil.which("bwrap") is None:
        return ("bubblewrap is not installed (Debian/Ubuntu: sudo apt-get install bubblewrap; "
                "Fedora: sudo dnf install bubblewrap)")
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid",
                            "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return ("bubblewrap cannot create namespaces here (" + probe.stderr.strip()[:200]
                + "); in Docker the default capabilities do not allow them")
    return ""


def uid_problem() -> str:
    """Why the uid fallback cannot sandbox here ('' when it can)."""
    if not sys.platform.startswith("linux"):
        return f"the uid fallback needs Linux; this is {sys.platform}"
    if os.geteuid() != 0:
        return "the uid fallback needs the grader to run as root (to switch to another uid)"
    try:
        with identity.lease(1) as held:
            probe = subprocess.run(as_uid(held.uids[0]) + ["true"], capture_output=True,
                                   text=True)
    except RuntimeError as err:
        return str(err)
    if probe.returncode != 0:
        return f"switching to a sandbox's uid failed ({probe.stderr.strip()[:200]})"
    return ""


def choose(unsafe: bool = False) -> Isolation:
    """The strongest isolation available; RuntimeError saying what to do when there is none."""
    if unsafe:
        return Isolation(NONE, "--unsafe-no-sandbox")
    why = bubblewrap_problem()
    if not why:
        return Isolation(BUBBLEWRAP)
    fallback = uid_problem()
    if not fallback:
        return Isolation(UID, why)
    raise RuntimeError(f"cannot sandbox student code: {why}; and {fallback}. Grading without a "
                       "sandbox lets any submission read the hidden tests and rewrite grades: "
                       "install bubblewrap, or grade as root in a container, or pass "
                       "--unsafe-no-sandbox only if you trust every submission")
