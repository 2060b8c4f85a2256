"""What every way of grading sets up before a student's code runs, in one place: the isolation
(the strongest here, unless one is asked for), the uid fallback's check that nothing of the
grader's is readable to a sandbox, the master notebook, the sandbox its submissions run in, and
the uids its grading workers take. ``grade`` (and with it ``selftest``) and Gradescope's ``run``
all grade through ``prepare_grading``."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ..course import check_assignment, source_notebook
from ..intake.normalize import given_imports, read_notebook, refuses_attention, withheld
from ..isolation.exposure import checkout_copies, package_folders, refuse_if_exposed
from ..isolation.kinds import UID, Isolation, choose
from ..isolation.limits import WITHHELD, Limits
from ..isolation.privileged import identity
from ..isolation.sandbox import Sandbox, support_folder


@dataclass
class Prepared:
    """A grading set up: close it (or use it as a context) when the grading is done."""

    assignment: str
    isolation: Isolation
    master: dict
    sandbox: Sandbox
    uids: identity.Lease  # two per grading worker, where sandboxes need uids of their own

    def close(self) -> None:
        """Stop the template, remove the sandboxes' support folder, give the uids back."""
        self.sandbox.close_template()
        shutil.rmtree(self.sandbox.support, ignore_errors=True)
        self.uids.release()

    def __enter__(self) -> Prepared:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare_grading(assignment: str, course: Path, limits: Limits, *,
                    isolation: Isolation | None = None, unsafe: bool = False,
                    private: tuple[Path, ...] = (), workers: int = 1) -> Prepared:
    """Set up the grading of ``assignment`` (see the module docstring); ``private``: the
    run's own files no sandbox may read (the output, the submissions). RuntimeError saying
    what to do when no isolation can be had or, in the uid fallback, when something of the
    grader's is readable to a sandbox."""
    check_assignment(assignment, course)
    isolation = isolation or choose(unsafe)
    if isolation.kind == UID:  # no mounts hide the grader's files: permissions must
        refuse_if_exposed([Path(course), *map(Path, private), *package_folders(WITHHELD),
                           *checkout_copies(course)])
    master = read_notebook(source_notebook(assignment, course))
    sandbox = Sandbox(support_folder(isolation), limits, isolation, withhold=withheld(master),
                      refuse_attention=refuses_attention(master),
                      preload=given_imports(master))
    try:
        uids = identity.lease(2 * workers if sandbox.needs_uids else 0)
    except BaseException:
        shutil.rmtree(sandbox.support, ignore_errors=True)
        raise
    return Prepared(assignment, isolation, master, sandbox, uids)
