"""Which isolation student code can have here, strongest first, and what each one holds.

- ``bubblewrap``: namespaces. The sandbox sees a read-only whitelist of the system (the course,
  the output and other students' files are not there at all), has no network, its own process
  tree and scratch space; student code runs as an unprivileged uid (where the grader is root,
  one of two per grading worker in turn, see ``sandbox.Template``; the grader's own
  otherwise). Needs unprivileged
  user namespaces, or root with ``CAP_SYS_ADMIN``, which Docker's default capability set (so
  Gradescope) does not grant.
- ``uid``: where namespaces are unavailable but the grader is root (Gradescope, ``docker run``).
  Each sandbox runs as an unprivileged uid of its own (``UID_BASE`` + its number, so sandboxes
  graded at once cannot read, signal or trace each other), in a scratch folder only it may enter,
  with rlimits (and cgroups where writable). Whatever of the grader's it could read must be
  unreadable to that uid: ``exposed`` checks the course, the output, the submissions and the
  packages no answer may use before grading, and the run refuses, naming the ``chmod`` that
  fixes it (``python -m autograder hide-withheld`` closes those packages). The kernel refuses
  the sandbox any program (a seccomp filter, ``runner.refuse_syscalls``), and an audit hook in
  the runner (``runner.confine``) refuses ctypes and reading the folders of what an assignment
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

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BUBBLEWRAP, UID, NONE = "bubblewrap", "uid", "none"
UID_BASE, UID_SPAN = 61000, 1024 * 64
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
    if shutil.which("setpriv") is None:
        return "setpriv is missing (Debian/Ubuntu: apt-get install util-linux)"
    probe = subprocess.run(as_uid(UID_BASE) + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"switching to uid {UID_BASE} failed ({probe.stderr.strip()[:200]})"
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


def as_uid(uid: int) -> list[str]:
    """The command prefix that runs a program as ``uid`` (and group ``uid``) with no
    supplementary groups, no capabilities, no way to gain privileges, killed with its parent."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--bounding-set=-all", "--inh-caps=-all", "--pdeathsig=KILL", "--"]


_PROBE = """import json, os, sys
found = {}
for root, files in json.load(sys.stdin).items():
    hits = [f for f in files if os.access(f, os.R_OK)]
    if hits:
        found[root] = hits[:5] + ([f"... and {len(hits) - 5} more"] if len(hits) > 5 else [])
print(json.dumps(found))
"""


def exposed(roots: list[Path], uid: int = UID_BASE) -> dict[str, list[str]]:
    """{root: files in it that ``uid`` can read} for the grader's folders and files ``roots``
    (the course, the output, the submissions): what the uid fallback must not let a sandbox
    read. Checked by that uid itself, so every permission on the way counts."""
    listing = {}
    for root in roots:
        root = Path(root)
        if not root.exists():
            continue
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        listing[str(root)] = [str(p) for p in files]
    if not listing:
        return {}
    probe = subprocess.run(as_uid(uid) + [sys.executable, "-I", "-c", _PROBE],
                           input=json.dumps(listing), capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(f"could not check what uid {uid} can read: "
                           f"{probe.stderr.strip()[-300:]}")
    return json.loads(probe.stdout)


def refuse_if_exposed(roots: list[Path], uid: int = UID_BASE) -> None:
    """RuntimeError naming what a sandbox could read and the ``chmod`` that fixes it."""
    found = exposed(roots, uid)
    if found:
        example = next(iter(found.values()))[0]
        raise RuntimeError(
            f"cannot grade safely with the uid fallback: the sandbox's uid {uid} could read the "
            f"grader's files (e.g. {example}). Fix: chmod -R go-rwx "
            f"{' '.join(shlex.quote(r) for r in found)}")


def report(limits_in_force: str, course: Path, packages: list[Path] = ()) -> str:
    """What ``python -m autograder doctor`` prints: the isolation grading would use here, each
    limit and whether it holds, and what to fix (``packages``: the folders of those no answer
    may use, which the uid fallback's sandboxes must not read)."""
    lines = []
    try:
        chosen = choose()
        lines.append(f"isolation: {chosen.describe()}")
    except RuntimeError as err:
        return f"isolation: NONE AVAILABLE\n  {err}"
    bubblewrap = bubblewrap_problem()
    lines.append(f"  bubblewrap: {'available' if not bubblewrap else 'unavailable: ' + bubblewrap}")
    if chosen.kind == UID:
        lines.append("  network: NOT cut off (the uid fallback cannot; fine in a container "
                     "that grades one submission)")
        found = exposed([course])
        lines.append("  the course (hidden tests): " + (
            "unreadable to the sandbox's uid" if not found else
            f"READABLE to the sandbox's uid; fix: chmod -R go-rwx {shlex.quote(str(course))}"))
        lines.append("  packages no answer may use: " + (
            "closed to the sandbox's uid" if not exposed(list(packages)) else
            "READABLE to the sandbox's uid; fix: python -m autograder hide-withheld"))
    else:
        lines.append("  network: cut off (own network namespace)")
        lines.append("  the course, the output, other students' files: not in the sandbox's "
                     "view")
    lines.append(f"  limits: {limits_in_force}")
    return "\n".join(lines)
