"""The rules a runner imposes on itself before any student code runs, for the whole life of its
process: rlimits (which hold without cgroups), a seccomp filter (the kernel refuses keyrings, and
in the uid fallback starting programs), the uid fallback's audit hook (withheld folders, ctypes,
the garbage collector), and torch's attention switched off where an assignment asks (``guard``).
None can be undone by code that runs after it. Inside the sandbox only: the grader never imports
this module.
"""

import importlib.util
import os
import resource
import stat
import sys

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.py")


def load_guard():
    """``guard.py`` beside this file, loaded without entering ``sys.modules`` (student code then
    finds no module of ours to patch): the attention sentinel and the one table of refused audit
    events."""
    spec = importlib.util.spec_from_file_location("_grader_guard", GUARD)
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    return guard


def limit(memory_mb, max_procs) -> list[str]:
    """Limits that hold even without cgroups (they cannot be raised again by student code).

    Returns the names of the limits that took effect: a host may refuse one (an address-space
    cap below what is mapped already; no per-user process cap for root, who is exempt from it),
    and the grader reports only what holds.
    """
    settings = [("core dumps", resource.RLIMIT_CORE, 0),
                ("file size", resource.RLIMIT_FSIZE, 256 * 2**20)]
    if memory_mb:
        settings.append(("memory", resource.RLIMIT_AS, memory_mb * 2**20))
    if max_procs and os.getuid() != 0:
        settings.append(("processes", resource.RLIMIT_NPROC, max_procs))
    enforced = []
    for name, what, value in settings:
        try:
            resource.setrlimit(what, (value, value))
            enforced.append(name)
        except (ValueError, OSError):
            pass
    return enforced


def refuse_attention() -> str:
    """In a sandbox for an assignment whose answers compute attention themselves, switch
    torch's attention off for good before any student code runs (see ``guard``); return ""
    when that holds, else why not (the grader then fails such answers closed)."""
    if os.environ.pop("GRADER_REFUSE_ATTENTION", "") != "1":
        return "not requested for this assignment"
    try:
        guard = load_guard()
        import torch
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return guard.install_sentinel(torch)


def confine(folders: list[str]) -> None:
    """The uid fallback's stand-in for bubblewrap's mounts, for the whole life of this process
    (an audit hook, PEP 578, cannot be removed): the withheld packages' folders (real paths)
    cannot be read, and no other program can be started, nor native code called through
    ctypes, since either would run outside this hook. Student code cannot change the hook: it
    uses only what it bound when it was made (never a module attribute or a builtin, which code
    could replace), and it refuses walking the garbage collector, the way to the hook itself.
    What it cannot see: a file opened by a name relative to a folder's descriptor (``dir_fd``)
    is checked as if relative to the working folder. Refusals are OSErrors, which code that
    probes its environment (matplotlib's font search) expects."""
    import posix

    folders = tuple(os.path.realpath(f) + "/" for f in folders)
    table = load_guard().REFUSED_EVENTS  # the one table of what sandboxes refuse, and why
    events = frozenset(e for e, why in table.items() if why in (
        "starting other programs",  # would run outside this hook
        "walking the garbage collector's objects"))  # the way to the hook itself

    # Everything the hook uses is bound as a default argument: immutable values and builtins
    # (no closure, no function of ours), so neither replacing module attributes nor writing
    # to the locals of its frame (reachable from the traceback of a refusal) changes it.
    def hook(event, args, refused=events,
             folders=folders, lstat=posix.lstat, readlink=posix.readlink, getcwd=posix.getcwd,
             fspath=posix.fspath, is_link=stat.S_ISLNK, instance_of=isinstance, type_of=type,
             text=(str, bytes), error=PermissionError):
        if event in refused or event.startswith("ctypes."):
            raise error(f"{event} is not possible while your notebook is graded")
        if event != "open" or not folders:
            return
        try:
            name = fspath(args[0])
        except TypeError:  # a file descriptor: opened under this hook already
            return
        if not instance_of(name, text):
            return
        if type_of(name) is not str:
            name = name.decode("utf-8", "surrogateescape")
        # its real path, as os.path.realpath finds it
        parts = (name if name.startswith("/") else getcwd() + "/" + name).split("/")
        done, links = [], 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                done = done[:-1]
                continue
            done.append(part)
            try:
                mode = lstat("/" + "/".join(done)).st_mode
            except OSError:
                continue
            if is_link(mode) and links < 40:
                links += 1
                target = readlink("/" + "/".join(done))
                done = [] if target.startswith("/") else done[:-1]
                parts = target.split("/") + parts
        path = "/" + "/".join(done)
        for folder in folders:
            if path.startswith(folder) or path + "/" == folder:
                raise error(f"{folder.rstrip('/').rsplit('/', 1)[-1]} is not available while "
                            "your notebook is graded: answers must be your own code (see the "
                            "assignment rules)")

    sys.addaudithook(hook)


# (audit architecture, {what: syscall numbers}) per machine: the kernel's keyrings, which
# outlive processes (a channel to the next submission of the same uid), and starting programs
SYSCALLS = {"x86_64": (0xC000003E, {"keys": (248, 249, 250), "programs": (59, 322)}),
            "aarch64": (0xC00000B7, {"keys": (217, 218, 219), "programs": (221, 281)})}


def refuse_syscalls(programs: bool) -> bool:
    """Have the kernel refuse (EPERM) the keyring calls, and with ``programs`` starting any
    program, to this process and all it starts, for good (a seccomp filter); calls of another
    architecture's ABI are refused too. The uid fallback's hook cannot see every way to start a
    program (``_posixsubprocess`` raises no audit event): this can. False where this machine's
    numbers are not known."""
    import ctypes
    import platform

    known = SYSCALLS.get(platform.machine())
    if known is None:
        return False
    arch, numbers = known
    refused = [*numbers["keys"], *(numbers["programs"] if programs else ())]
    load, equal, at_least, give = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    steps = [(load, "", "", 4), (equal, "", "deny", arch), (load, "", "", 0)]
    if platform.machine() == "x86_64":  # the x32 ABI: numbers from 0x40000000
        steps.append((at_least, "deny", "", 0x40000000))
    steps += [(equal, "deny", "", number) for number in refused]
    steps += [(give, "", "", allow), (give, "", "", deny)]
    where = {"deny": len(steps) - 1}

    def jump(label, at):
        return where[label] - at - 1 if label else 0

    program = (ctypes.c_uint64 * len(steps))(*[
        code | jump(yes, i) << 16 | jump(no, i) << 24 | k << 32
        for i, (code, yes, no, k) in enumerate(steps)])
    header = (ctypes.c_uint64 * 2)(len(steps), ctypes.addressof(program))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, header, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "the seccomp filter was refused")
    return True


