"""Ending a sandbox's uid, the one way: kill every process of the uid and wait until none runs,
remove what it left where every user may write and its System V IPC objects; and removing a
folder tree by descriptors, never by a path a link could redirect. Runs as root (on the host in
the uid fallback, or as a sandbox's template); never runs student code.
"""

import os
import signal
import stat
import subprocess
import time

try:  # a package module on the host; a plain module beside its peers in a sandbox
    from .become import drop_to
except ImportError:
    from become import drop_to

SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock")
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
RM = next((p for p in ("/usr/bin/rm", "/bin/rm") if os.path.exists(p)), "rm")  # whatever PATH is


def remove_owned(folder, uid):
    """Remove what ``uid`` owns in ``folder``, and in the folders there that anyone may write
    (/tmp/.X11-unix). It walks by folder descriptors, opened without following a symbolic link:
    a link swapped in for a folder meanwhile (another sandbox may, in the uid fallback's shared
    /tmp) leads nowhere."""
    try:
        handle = os.open(folder, FOLDER)
    except OSError:
        return
    try:
        _remove_owned_at(handle, uid, 0)
    finally:
        os.close(handle)


def _remove_owned_at(folder, uid, depth):
    for entry in list(os.scandir(folder)):
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_uid == uid:
                _remove_at(folder, entry.name, stat.S_ISDIR(info.st_mode))
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002 and depth < 4:
                inner = os.open(entry.name, FOLDER, dir_fd=folder)
                try:
                    _remove_owned_at(inner, uid, depth + 1)
                finally:
                    os.close(inner)
        except OSError:
            pass


def _remove_at(folder, name, is_folder):
    """Remove ``name`` (and, a folder, all in it) in the folder open as ``folder``: a folder by
    ``rm -rf`` through that descriptor (never a path a link could redirect; however deep)."""
    if not is_folder:
        os.unlink(name, dir_fd=folder)
        return
    subprocess.run([RM, "-rf", "--", f"/proc/self/fd/{folder}/{name}"], pass_fds=[folder],
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def remove_tree(path):
    """Remove the folder ``path`` and all in it, however deep (``shutil.rmtree`` recurses)."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        handle = os.open(parent, FOLDER)
    except OSError:
        return
    try:
        _remove_at(handle, name, True)
    finally:
        os.close(handle)


def end_uid(uid, wait=5.0):
    """End ``uid``: kill every process of it and wait until none runs; then remove its System V
    IPC objects, which outlive its processes, and what it owns where every user may write
    (``SHARED_WRITABLE``: there the next sandbox given this uid, another student's, would find
    it, and the disk would keep it). Each pass kills every process found, and a process being
    killed can no longer fork, so a fork bomb does not outrun it; a killed process dies a moment
    later, and one left a zombie runs no code. Killed as root, through a pidfd checked after it
    was opened (never a new process that took the pid of one that exited): this process never
    takes ``uid``, whose processes could then signal it. False if some process of it still ran
    after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        found = running_as(uid)
        if not found:
            break
        if time.monotonic() > deadline:
            return False
        for pid in found:
            try:
                handle = os.pidfd_open(pid)
            except OSError:  # gone already
                continue
            try:
                if uid_of(pid) == uid:
                    signal.pidfd_send_signal(handle, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(handle)
    helper = os.fork()  # the owner may remove them: a process that is that uid, for good
    if helper == 0:
        try:
            drop_to(uid)
            remove_ipc_of(uid)
        finally:
            os._exit(0)
    os.waitpid(helper, 0)
    for place in SHARED_WRITABLE:
        remove_owned(place, uid)
    return True


def remove_ipc_of(uid):
    """Remove the shared memory segments, message queues and semaphore sets ``uid`` owns or
    created (run as that uid: their owner or creator may)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ipc_rmid = 0
    remove = {"shm": lambda ipc: libc.shmctl(ipc, ipc_rmid, None),
              "msg": lambda ipc: libc.msgctl(ipc, ipc_rmid, None),
              "sem": lambda ipc: libc.semctl(ipc, 0, ipc_rmid)}
    for kind, rmid in remove.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as handle:
                header, *rows = [line.split() for line in handle]
        except (OSError, ValueError):
            continue
        for row in rows:
            fields = dict(zip(header, row))
            if uid in (int(fields["uid"]), int(fields["cuid"])):
                rmid(int(row[1]))  # the second column is the object's id


def running_as(uid):
    """The ids of the processes of ``uid`` that are not zombies."""
    return [int(pid) for pid in filter(str.isdigit, os.listdir("/proc"))
            if uid_of(pid) == uid]


def uid_of(pid):
    """The real uid of process ``pid``; None if it is gone or a zombie (one whose first thread
    ended while others run is not: killing it kills them)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            status = dict(line.split(":", 1) for line in handle if ":" in line)
        if status["State"].split()[0] == "Z" and int(status["Threads"]) <= 1:
            return None
        return int(status["Uid"].split()[0])
    except (OSError, ValueError, KeyError):
        return None


