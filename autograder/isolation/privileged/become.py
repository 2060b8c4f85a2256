"""Becoming an unprivileged uid for good, the one way: a template's child turns into the runner
of one submission with ``drop_to``; every program the grader starts as a sandbox's uid (the uid
fallback's runners, the probes of what that uid can read) starts through this file run as a
program, ``python become.py UID -- COMMAND ...``, which opens COMMAND, drops, then runs it. Runs as
root (on the host, or as a sandbox's template); never runs student code itself.
"""

import os
import signal
import sys

PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL, CAPABILITY_VERSION_3 = 4, 0x20080522


def as_uid(uid: int) -> list[str]:
    """The command prefix that runs a program as ``uid`` (see ``drop_to``)."""
    return [sys.executable, "-I", os.path.abspath(__file__), str(int(uid)), "--"]


def drop_to(uid):
    """Become ``uid`` for good, as ``setpriv --reuid --regid --clear-groups --no-new-privs
    --bounding-set=-all --inh-caps=-all`` does: no supplementary groups, no capabilities
    (permitted, effective, inheritable, ambient and bounding), no way to gain any by running a
    program; killed if the template dies. Exits (70) rather than run student code if any of it
    did not hold."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        last = int(handle.read())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # clears the permitted and effective sets
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    libc.capset(header, (ctypes.c_uint32 * 6)())  # and the inheritable set: all zero
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    with open("/proc/self/status") as handle:
        status = dict(line.split(":", 1) for line in handle if ":" in line)
    caps = [int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
            if k in status]
    if os.getresuid() != (uid,) * 3 or os.getresgid() != (uid,) * 3 or os.getgroups() or \
            any(caps) or status.get("NoNewPrivs", "1").strip() != "1":
        os._exit(70)


if __name__ == "__main__":
    import shutil

    uid, separator, *command = sys.argv[1:]
    if separator != "--" or not command:
        sys.exit("usage: become.py UID -- COMMAND [ARGUMENT ...]")
    # found and opened as root (the uid may not search the folders on its way, such as a
    # Python installed in root's home), then run by its descriptor once the uid is all we are
    program = os.open(shutil.which(command[0]) or command[0], os.O_RDONLY | os.O_CLOEXEC)
    drop_to(int(uid))
    os.execve(program, command, os.environ)
