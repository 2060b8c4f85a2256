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

import functools
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


# Walked as the sandbox's uid: every folder it can list, from the root, except the kernel's
# own file systems; a hit is a folder <name>/__init__.py, or a wheel, egg, zip or source archive
# named <name>-..., for a package no answer may use. Our own stubs (a sandbox's support
# folder) say they are stubs.
_COPIES = """import json, os, sys, time
names, limit, stub = json.load(sys.stdin)
skip = {"/proc", "/sys", "/dev", "/run", "/boot"}
archives = (".whl", ".egg", ".zip", ".tar.gz", ".tgz", ".tar.bz2")
found, stack, seen, deadline = [], ["/"], 0, time.monotonic() + limit
while stack:
    if time.monotonic() > deadline:
        print(json.dumps({"found": found, "unfinished": stack[-1]}))
        sys.exit()
    folder = stack.pop()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        continue
    # inside a package (a folder with __init__.py) only its subpackages lie, found with it
    package = folder != "/" and any(e.name == "__init__.py" for e in entries)
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                if entry.path in skip or entry.name in (".git", "__pycache__", "node_modules"):
                    continue
                if entry.name in names:
                    try:
                        with open(entry.path + "/__init__.py", "rb") as handle:
                            if stub.encode() not in handle.read(4096):
                                found.append(entry.path)
                    except OSError:
                        pass
                if not package:
                    stack.append(entry.path)
            elif entry.name.lower().endswith(archives) and \
                    entry.name.split("-")[0].lower().replace("_", "-") in names and \
                    os.access(entry.path, os.R_OK):
                found.append(entry.path)
        except OSError:
            pass
print(json.dumps({"found": found, "unfinished": ""}))
"""
COPY_SCAN_SECONDS = 120.0
STUB_MARK = "is not available while your notebook is graded"  # in every withheld package's stub


def readable_copies(packages, uid: int = UID_BASE) -> list[str]:
    """``find_copies`` once per process (a walk of the whole host takes seconds; grading
    checks before each run): ``readable_copies.cache_clear()`` after changing permissions."""
    return list(_cached_copies(tuple(sorted(set(packages))), uid))


@functools.lru_cache(maxsize=8)
def _cached_copies(packages: tuple[str, ...], uid: int) -> tuple[str, ...]:
    return tuple(find_copies(packages, uid))


readable_copies.cache_clear = _cached_copies.cache_clear


def find_copies(packages, uid: int = UID_BASE) -> list[str]:
    """Copies of the ``packages`` no answer may use that the sandbox's ``uid`` can find and read
    anywhere on this host (a package folder, or a wheel, egg, zip or source archive of it: a
    local package mirror, another virtual environment, a checkout), found by walking every
    folder that uid can list. RuntimeError if the walk cannot finish in COPY_SCAN_SECONDS (a
    host too large to check: grade with bubblewrap, or in a container)."""
    names = sorted({p.lower().replace("_", "-") for p in packages})
    probe = subprocess.run(as_uid(uid) + [sys.executable, "-I", "-c", _COPIES],
                           input=json.dumps([names, COPY_SCAN_SECONDS, STUB_MARK]),
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(f"could not check what uid {uid} can read: "
                           f"{probe.stderr.strip()[-300:]}")
    result = json.loads(probe.stdout)
    if result["unfinished"]:
        raise RuntimeError(
            f"cannot grade safely with the uid fallback: this host has too many files readable "
            f"to the sandbox's uid {uid} to check for copies of the packages no answer may use "
            f"within {COPY_SCAN_SECONDS:g} s (still at {result['unfinished']}); grade with "
            "bubblewrap, or in a container (see the README)")
    return sorted(result["found"])


def refuse_if_exposed(roots: list[Path], uid: int = UID_BASE, packages=()) -> None:
    """RuntimeError naming what a sandbox could read and the ``chmod`` that fixes it: the
    grader's files ``roots``, and any copy of the ``packages`` no answer may use found
    anywhere the sandbox's uid can list (``readable_copies``)."""
    found = exposed(roots, uid)
    if found:
        example = next(iter(found.values()))[0]
        raise RuntimeError(
            f"cannot grade safely with the uid fallback: the sandbox's uid {uid} could read the "
            f"grader's files (e.g. {example}). Fix: chmod -R go-rwx "
            f"{' '.join(shlex.quote(r) for r in found)}")
    copies = readable_copies(packages, uid) if packages else []
    if copies:
        shown = " ".join(shlex.quote(c) for c in copies[:20])
        more = f" (and {len(copies) - 20} more)" if len(copies) > 20 else ""
        raise RuntimeError(
            f"cannot grade safely with the uid fallback: the sandbox's uid {uid} could import "
            f"packages no answer may use from copies elsewhere on this host: {shown}{more}. "
            f"Fix: chmod -R go-rwx {shown}, or grade in a container that holds none")


def report(limits_in_force: str, course: Path, packages: list[Path] = (), names=()) -> str:
    """What ``python -m autograder doctor`` prints: the isolation grading would use here, each
    limit and whether it holds, and what to fix (``packages``: the folders of those no answer
    may use, which the uid fallback's sandboxes must not read; ``names``: those packages, of
    which no copy may be readable anywhere)."""
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
        try:
            copies = readable_copies(names)
            lines.append("  copies of them elsewhere on this host: " + (
                "none the sandbox's uid can find" if not copies else
                f"READABLE to the sandbox's uid: {' '.join(copies[:5])}"
                f"{' ...' if len(copies) > 5 else ''}; fix: chmod -R go-rwx on each"))
        except RuntimeError as err:
            lines.append(f"  copies of them elsewhere on this host: NOT CHECKED: {err}")
    else:
        lines.append("  network: cut off (own network namespace)")
        lines.append("  the course, the output, other students' files: not in the sandbox's "
                     "view")
    lines.append(f"  limits: {limits_in_force}")
    return "\n".join(lines)
