"""``python -m autograder doctor``: the isolation grading would use here, each limit and whether
it holds, and what to fix; and whether grading would go ahead here at all."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from .exposure import checkout_copies, exposed, package_folders, readable_copies
from .kinds import UID, bubblewrap_problem, choose
from .limits import WITHHELD, Limits


def doctor(limits: Limits, course: Path) -> tuple[str, bool]:
    """(the report, whether grading would go ahead: False with no isolation at all, or in the
    uid fallback while the course, the withheld packages or a copy of them are readable to a
    sandbox's uid, or the host is too large to check)."""
    from .sandbox import Sandbox, support_folder

    try:
        chosen = choose()
    except RuntimeError as err:
        return f"isolation: NONE AVAILABLE\n  {err}", False
    bubblewrap = bubblewrap_problem()
    lines = [f"isolation: {chosen.describe()}",
             f"  bubblewrap: {'available' if not bubblewrap else 'unavailable: ' + bubblewrap}"]
    ok = True
    if chosen.kind == UID:
        lines.append("  network: NOT cut off (the uid fallback cannot; fine in a container "
                     "that grades one submission)")
        found = exposed([course, *checkout_copies(course)])
        ok &= not found
        lines.append("  the course (hidden tests): " + (
            "unreadable to a sandbox's uid" if not found else
            "READABLE to a sandbox's uid; fix: chmod -R go-rwx "
            + " ".join(shlex.quote(f) for f in found)))
        packages = exposed(package_folders(WITHHELD))
        ok &= not packages
        lines.append("  packages no answer may use: " + (
            "closed to a sandbox's uid" if not packages else
            "READABLE to a sandbox's uid; fix: python -m autograder hide-withheld"))
        try:
            copies = readable_copies(WITHHELD)
            ok &= not copies
            lines.append("  copies of them elsewhere on this host: " + (
                "none a sandbox's uid can find" if not copies else
                f"READABLE to a sandbox's uid: {' '.join(copies[:5])}"
                f"{' ...' if len(copies) > 5 else ''}; fix: chmod -R go-rwx on each"))
        except RuntimeError as err:
            ok = False
            lines.append(f"  copies of them elsewhere on this host: NOT CHECKED: {err}")
    else:
        lines.append("  network: cut off (own network namespace)")
        lines.append("  the course, the output, other students' files: not in the sandbox's "
                     "view")
    sandbox = Sandbox(support_folder(chosen), limits, chosen)
    try:
        lines.append(f"  limits: {sandbox.caps_in_force}; {limits.timeout_cell:g} s per cell, "
                     f"{limits.timeout_notebook:g} s per notebook")
        lines.append(f"  starts: {sandbox.starts}")
    finally:
        shutil.rmtree(sandbox.support, ignore_errors=True)
    if not ok:
        lines.append("  grading would refuse here until what is READABLE above is closed")
    return "\n".join(lines), ok
