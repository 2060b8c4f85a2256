"""What the uid fallback's sandboxes must not read, and the checks that they cannot.

Without mounts, only permissions keep a sandbox (another uid) away from the grader's files: the
course with its hidden tests, the output, the submissions, the packages no answer may use, and
every other copy of those packages on the host. Each check runs as a sandbox uid of its own
lease (``identity``), so every permission on the way counts.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shlex
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from .limits import WITHHELD
from .privileged import identity
from .privileged.become import as_uid

STUB_MARK = "is not available while your notebook is graded"  # in every withheld package's stub


def package_folders(names) -> list[Path]:
    """The real folders of the packages ``names`` installed here (links resolved)."""
    folders = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.submodule_search_locations and \
                Path(spec.origin).exists():
            folders.append(Path(spec.origin).resolve().parent)
    return folders


def checkout_copies(course: Path) -> list[Path]:
    """Where a checkout of this repository keeps other copies of the course and the library
    (git's objects, with the hidden tests; pip's build folder), which the uid fallback's
    sandboxes must not read any more than the course itself."""
    root = Path(course).resolve().parent
    return [folder for folder in (root / ".git", root / "build") if folder.exists()]


def hide_withheld() -> list[Path]:
    """Make the packages no answer may use (``WITHHELD``) folders other users may not enter,
    for the uid fallback, whose sandboxes are other users; return them. Bubblewrap needs none
    of it; an assignment's own extras (torch for 02) stay readable, since others need them."""
    folders = package_folders(WITHHELD)
    for folder in folders:
        folder.chmod(folder.stat().st_mode & ~0o077)
    return folders


def python_readable_by_others() -> bool:
    """Whether every folder Python imports from (the standard library, site-packages) can be
    read by a user with no rights of its own: every folder on the way searchable by others."""
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = Path(paths[key]).resolve()
        for folder in (path, *path.parents):
            if not folder.stat().st_mode & stat.S_IXOTH:
                return False
        if not path.stat().st_mode & stat.S_IROTH:
            return False
    return True


_PROBE = """import json, os, sys
found = {}
for root, files in json.load(sys.stdin).items():
    hits = [f for f in files if os.access(f, os.R_OK)]
    if hits:
        found[root] = hits[:5] + ([f"... and {len(hits) - 5} more"] if len(hits) > 5 else [])
print(json.dumps(found))
"""


def as_sandbox(script: str, data) -> dict:
    """The JSON ``script`` prints, run by Python as a sandbox uid leased for it alone (so no
    running sandbox shares the probe's uid) with ``data`` as JSON on its stdin."""
    with identity.lease(1) as held:
        probe = subprocess.run(as_uid(held.uids[0]) + [sys.executable, "-I", "-c", script],
                               input=json.dumps(data), capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(f"could not check what a sandbox's uid can read: "
                           f"{probe.stderr.strip()[-300:]}")
    return json.loads(probe.stdout)


def exposed(roots: list[Path]) -> dict[str, list[str]]:
    """{root: files in it that a sandbox's uid can read} for the grader's folders and files
    ``roots`` (the course, the output, the submissions): what the uid fallback must not let a
    sandbox read. Checked by such a uid itself, so every permission on the way counts."""
    listing = {}
    for root in roots:
        root = Path(root)
        if not root.exists():
            continue
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        listing[str(root)] = [str(p) for p in files]
    return as_sandbox(_PROBE, listing) if listing else {}


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


def readable_copies(packages) -> list[str]:
    """``find_copies`` once per process (a walk of the whole host takes seconds; grading
    checks before each run): ``readable_copies.cache_clear()`` after changing permissions."""
    return list(_cached_copies(tuple(sorted(set(packages)))))


@functools.lru_cache(maxsize=8)
def _cached_copies(packages: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(find_copies(packages))


readable_copies.cache_clear = _cached_copies.cache_clear


def find_copies(packages) -> list[str]:
    """Copies of the ``packages`` no answer may use that a sandbox's uid can find and read
    anywhere on this host (a package folder, or a wheel, egg, zip or source archive of it: a
    local package mirror, another virtual environment, a checkout), found by walking every
    folder that uid can list. RuntimeError if the walk cannot finish in COPY_SCAN_SECONDS (a
    host too large to check: grade with bubblewrap, or in a container)."""
    names = sorted({p.lower().replace("_", "-") for p in packages})
    result = as_sandbox(_COPIES, [names, COPY_SCAN_SECONDS, STUB_MARK])
    if result["unfinished"]:
        raise RuntimeError(
            f"cannot grade safely with the uid fallback: this host has too many files readable "
            f"to a sandbox's uid to check for copies of the packages no answer may use within "
            f"{COPY_SCAN_SECONDS:g} s (still at {result['unfinished']}); grade with bubblewrap, "
            "or in a container (see the README)")
    return sorted(result["found"])


def refuse_if_exposed(roots: list[Path], packages=WITHHELD) -> None:
    """RuntimeError naming what a sandbox could read and the ``chmod`` that fixes it: the
    grader's files ``roots``, and any copy of the ``packages`` no answer may use found
    anywhere a sandbox's uid can list (``readable_copies``)."""
    found = exposed(roots)
    if found:
        example = next(iter(found.values()))[0]
        raise RuntimeError(
            f"cannot grade safely with the uid fallback: a sandbox's uid could read the "
            f"grader's files (e.g. {example}). Fix: chmod -R go-rwx "
            f"{' '.join(shlex.quote(r) for r in found)}")
    copies = readable_copies(packages) if packages else []
    if copies:
        shown = " ".join(shlex.quote(c) for c in copies[:20])
        more = f" (and {len(copies) - 20} more)" if len(copies) > 20 else ""
        raise RuntimeError(
            f"cannot grade safely with the uid fallback: a sandbox's uid could import "
            f"packages no answer may use from copies elsewhere on this host: {shown}{more}. "
            f"Fix: chmod -R go-rwx {shown}, or grade in a container that holds none")


