"""Who a sandbox is: the one owner of the uids sandboxes run as.

A sandbox's uid is its identity: files, processes and IPC objects are told apart by it, so two
sandboxes that shared a uid would share everything, and ending one would end the other. So uids
are leased, never computed from names: a lease takes, from ``BASE`` upwards, each uid whose lock
it can take (a file per uid in the lease folder, locked with ``flock`` by the leasing process;
the kernel releases it when that process exits, however it exits) and that owns no process and
nothing where every user may write; it holds them until released. Any number of workers and of
grading runs on one host thus get distinct uids. The range lies above every uid a system hands
out: system users (below 1000), login users (up to 60000), systemd's dynamic users
(61184-65519) and ``nobody`` (65534).

Runs as root, in the grading process; never inside a sandbox.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from pathlib import Path

try:  # a package module on the host; a plain module beside its peers in a sandbox
    from .ending import SHARED_WRITABLE, uid_of
except ImportError:
    from ending import SHARED_WRITABLE, uid_of

BASE, SPAN = 200_000, 100_000
FOLDERS = (Path("/run/seqlab-grader-uids"), Path(tempfile.gettempdir()) / "seqlab-grader-uids")
RESERVED = (range(0, 60_001), range(61_184, 65_520), range(65_534, 65_535))


class Lease:
    """Uids held for one owner (a grading run, a probe) until ``release`` (or its exit)."""

    def __init__(self, uids: list[int], locks: list[int]):
        self.uids, self._locks = tuple(uids), locks

    def release(self) -> None:
        for fd in self._locks:
            os.close(fd)  # closing the file releases its flock
        self._locks = []

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        self.release()


def _folder() -> Path:
    """The lease folder: root's alone (a folder another user could write would let a sandbox
    hold or forge leases), made if missing; RuntimeError if none can be had."""
    for folder in FOLDERS:
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            info = folder.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o077:
            return folder
    raise RuntimeError(f"no folder for the sandboxes' uid leases: one of "
                       f"{', '.join(map(str, FOLDERS))} must be a folder only root may use")


def busy() -> set[int]:
    """The uids that own a running process, or something where every user may write."""
    found = {uid_of(pid) for pid in filter(str.isdigit, os.listdir("/proc"))}
    for place in SHARED_WRITABLE:
        try:
            entries = list(os.scandir(place))
        except OSError:
            continue
        for entry in entries:
            try:
                found.add(entry.stat(follow_symlinks=False).st_uid)
            except OSError:
                pass
    found.discard(None)
    return found


def lease(count: int) -> Lease:
    """``count`` uids no other lease holds and nothing uses (see the module docstring);
    ValueError for a bad count, RuntimeError when the range is exhausted."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be an int >= 0, got {count!r}")
    if count == 0:
        return Lease([], [])
    folder, used = _folder(), busy()
    uids, locks = [], []
    for uid in range(BASE, BASE + SPAN):
        if len(uids) == count:
            break
        if uid in used:
            continue
        fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another lease holds it
            os.close(fd)
            continue
        uids.append(uid)
        locks.append(fd)
    if len(uids) < count:
        for fd in locks:
            os.close(fd)
        raise RuntimeError(f"all {SPAN} sandbox uids from {BASE} are leased or in use; wait "
                           "for other grading runs to end")
    return Lease(uids, locks)
