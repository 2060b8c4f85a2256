"""The program that runs inside the sandbox: executes student cells, answers the grader's calls.

Standalone on purpose (standard library only; numpy and torch only when the student's values
need them), because it runs where nothing of the grader is installed but ``autograder.checks``
(for the notebook's own imports) and, beside this file, ``guard.py``, which it runs before any
student code where answers may not use torch's attention. It talks to the grader over its original
stdin/stdout; file descriptors 0-2 are then pointed at /dev/null, so student output can never
reach the protocol by accident. Everything it sends is plain data (JSON): the grader never
unpickles, imports or calls anything that came from here. Whatever student code does to this
process (patching it included) can therefore change only the data sent back, never a test.

Run with ``--template``, it is a grading worker's template instead (``template``): it imports the
heavy packages once and forks the runner of each submission, which becomes an unprivileged uid.
"""

import base64
import builtins
import importlib
import importlib.util
import io
import json
import os
import pickle
import random
import re
import resource
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
import traceback

# Every request the grader may send, (op, *arguments); the runner refuses any other. Replies are
# dicts: {"op": "ran" | "value" | "raise" | "callback" | "ready", ...}.
REQUESTS = {
    "run": "(source, seed, seconds): execute a notebook cell",
    "get": "(name,): the value of a global name of the notebook",
    "call": "(handle, pickled (args, kwargs), seed, seconds): call a student object",
    "getattr": "(handle, name, seconds): an attribute of a student object",
    "getitem": "(handle, pickled key, seconds): an item of a student object",
    "len": "(handle, None, seconds): len() of a student object",
    "iter": "(handle, None, seconds): the items of a student object, as a list",
}
MAX_TEXT = 20_000  # characters of output kept per cell or call
NUMERIC = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
           "complex64", "complex128"}


class CellTimeout(BaseException):
    """Raised into student code when a cell runs past its time (not catchable as Exception)."""


class _Bounded(io.TextIOBase):
    """A text stream that keeps the first MAX_TEXT characters and counts the rest."""

    def __init__(self):
        self.parts, self.size, self.dropped = [], 0, 0

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        room = MAX_TEXT - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def value(self):
        out = "".join(self.parts)
        if self.dropped:
            out += f"\n... [{self.dropped} more characters of output truncated]"
        return out


class Channel:
    def __init__(self):
        self.rx = os.fdopen(os.dup(0), "rb", buffering=0)
        self.tx = os.fdopen(os.dup(1), "wb", buffering=0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.rx.read(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def recv(self):
        (size,) = struct.unpack(">I", self._read(4))
        return pickle.loads(self._read(size))  # from the grader: trusted

    def send(self, message):
        data = json.dumps(message, allow_nan=False).encode()
        self.tx.write(struct.pack(">I", len(data)) + data)


class Runner:
    def __init__(self, channel, attention: str):
        self.channel = channel
        self.attention = attention  # why torch's attention is not refused here ("" if it is)
        self.handles = {}
        self.shell = None
        try:
            from IPython.core.interactiveshell import InteractiveShell

            self.shell = InteractiveShell.instance(colors="NoColor")  # plain text tracebacks
            self.ns = self.shell.user_ns
            self.run_cell = self.shell.run_cell  # bound now: patching the shell later is moot
        except Exception:  # no IPython: plain exec, magics fail as syntax errors
            self.ns = {"__name__": "__main__", "__builtins__": builtins}

    # --- values -> plain data -------------------------------------------------------------
    def handle(self, obj):
        key = str(id(obj))
        self.handles[key] = obj
        return {"__handle__": key, "type": type(obj).__name__, "callable": callable(obj)}

    def encode(self, x, depth=0):
        if depth > 30:
            raise ValueError("value nested too deeply to send")
        if x is None or type(x) in (bool, str):
            return x
        if type(x) is int:
            return x if abs(x) < 2**53 else {"__int__": str(x)}
        if type(x) is float:
            return x if x == x and abs(x) != float("inf") else {"__float__": repr(x)}
        if type(x) is list:
            return [self.encode(v, depth + 1) for v in x]
        if type(x) is tuple:
            return {"__tuple__": [self.encode(v, depth + 1) for v in x]}
        if type(x) in (set, frozenset):
            return {"__set__": [self.encode(v, depth + 1) for v in x]}
        if isinstance(x, dict) and type(x).__name__ in ("dict", "Counter", "OrderedDict",
                                                        "defaultdict"):
            items = [[self.encode(k, depth + 1), self.encode(v, depth + 1)]
                     for k, v in dict.items(x)]
            return {"__dict__": items, "type": type(x).__name__}
        np = sys.modules.get("numpy")
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            dtype = str(t.dtype).replace("torch.", "")
            if dtype not in NUMERIC:
                raise ValueError(f"cannot send a tensor of dtype {dtype}")
            return {"__tensor__": self.array(t.numpy()), "requires_grad": bool(x.requires_grad)}
        if np is not None and isinstance(x, np.ndarray) and x.dtype.name in NUMERIC:
            return {"__ndarray__": self.array(np.ascontiguousarray(x))}
        if np is not None and isinstance(x, np.generic) and x.dtype.name in NUMERIC:
            return {"__npscalar__": self.array(np.asarray(x))}
        return self.handle(x)

    @staticmethod
    def array(a):
        return {"dtype": a.dtype.name, "shape": list(a.shape),
                "b64": base64.b64encode(a.tobytes()).decode()}

    # --- grader objects <- pickles --------------------------------------------------------
    def loads(self, payload):
        runner = self

        class Unpickler(pickle.Unpickler):
            def persistent_load(self, pid):
                kind, key = pid
                if kind == "handle":
                    return runner.handles[key]
                return runner.callback(key)

        return Unpickler(io.BytesIO(payload)).load()

    def callback(self, key):
        def call_grader(*args, **kwargs):
            self.channel.send({"op": "callback", "id": key, "args": self.encode(list(args)),
                               "kwargs": self.encode(kwargs)})
            reply = self.channel.recv()
            if reply[0] == "error":
                exc = getattr(builtins, reply[1], None)
                if not (isinstance(exc, type) and issubclass(exc, Exception)):
                    exc = RuntimeError
                raise exc(reply[2])
            return self.loads(reply[1])

        call_grader.__name__ = "grader_function"
        return call_grader

    # --- requests --------------------------------------------------------------------------
    def seed(self, seed):
        seed_all(seed)

    def timed(self, seconds, fn):
        def expire(signum, frame):
            raise CellTimeout(f"the cell ran past its time limit of {seconds:.3g} s")

        signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def error(self, exc):
        return {"ename": type(exc).__name__, "evalue": str(exc)[:MAX_TEXT]}

    def run(self, source, seed, seconds):
        self.seed(seed)
        out, err = _Bounded(), _Bounded()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        reply = {"op": "ran", "ok": True}
        source = skip_shell(source)
        try:
            if self.shell is not None:
                result = self.timed(seconds, lambda: self.run_cell(source, silent=False))
                exc = result.error_in_exec or result.error_before_exec
            else:
                exc = None
                try:
                    code = compile(source, "<cell>", "exec")
                    self.timed(seconds, lambda: exec(code, self.ns))
                except Exception as caught:
                    traceback.print_exc()
                    exc = caught
            if exc is not None:
                reply.update(ok=False, **self.error(exc))
        except BaseException as exc:  # SystemExit, CellTimeout, KeyboardInterrupt
            reply.update(ok=False, **self.error(exc))
        finally:
            sys.stdout, sys.stderr = saved
        reply.update(stdout=out.value(), stderr=err.value(), figures=self.figures())
        return reply

    @staticmethod
    def figures():
        """The figures the cell showed or left open (base64 PNG), as Jupyter's inline backend
        would have drawn them below it; [] when the notebook draws none."""
        backend = sys.modules.get("grader_figures")
        if backend is None:
            return []
        try:
            backend.show()
            drawn = [f for f in backend.shown if type(f) is str][:10]
            backend.shown.clear()
            return drawn
        except Exception:  # whatever the notebook did to its figures
            return []

    def get(self, name):
        if name not in self.ns:
            return {"op": "value", "missing": True}
        try:
            return {"op": "value", "value": self.encode(self.ns[name])}
        except BaseException as exc:  # a value that cannot be sent: the test says so
            return {"op": "raise", **self.error(exc)}

    def call(self, key, payload, seed, seconds):
        self.seed(seed)
        out = _Bounded()
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        try:
            target = self.handles[key]
            args, kwargs = self.loads(payload)
            value = self.timed(seconds, lambda: self.encode(target(*args, **kwargs)))
            return {"op": "value", "value": value}
        except BaseException as exc:
            return {"op": "raise", **self.error(exc), "output": out.value()}
        finally:
            sys.stdout, sys.stderr = saved

    def inspect(self, op, key, arg, seconds):
        try:
            obj = self.handles[key]
            read = {"getattr": lambda: getattr(obj, arg), "getitem": lambda: obj[self.loads(arg)],
                    "len": lambda: len(obj), "iter": lambda: list(obj)}[op]
            value = self.timed(seconds, lambda: self.encode(read()))
            return {"op": "value", "value": value}
        except BaseException as exc:
            return {"op": "raise", **self.error(exc)}

    def serve(self):
        self.channel.send({"op": "ready", "python": sys.version.split()[0],
                           "attention": self.attention})
        while True:
            try:
                message = self.channel.recv()
            except EOFError:
                return
            op = message[0] if isinstance(message, tuple) and message else None
            if op not in REQUESTS:
                reply = {"op": "raise", "ename": "ValueError",
                         "evalue": f"unknown request {op!r}: expected one of {sorted(REQUESTS)}"}
            elif op in ("run", "get", "call"):
                reply = getattr(self, op)(*message[1:])
            else:
                reply = self.inspect(*message)
            try:
                self.channel.send(reply)
            except (ValueError, TypeError) as exc:  # a value that cannot be sent
                self.channel.send({"op": "raise", **self.error(exc)})


SHELL_LINE = re.compile(r"^(\s*)(!|%pip\b|%conda\b|%sx\b|%system\b|%matplotlib\b)(.*)$")
SHELL_CELL = ("%%bash", "%%sh", "%%shell", "%%script", "%%system")


def skip_shell(source):
    """Shell commands and installs (``!pip ...``, ``%pip``, ``%%bash`` cells) are skipped with
    a printed note: the sandbox has no network and nothing to install, and waiting for a
    download that cannot come would only cost the notebook its time. ``%matplotlib`` too:
    plots are not graded, and the sandbox's plain shell has no GUI to enable."""
    if source.lstrip().startswith(SHELL_CELL):
        first = source.lstrip().splitlines()[0]
        return f"print({('(grading: skipped a ' + first + ' cell)')!r})"
    lines = []
    for line in source.splitlines():
        match = SHELL_LINE.match(line)
        if match:
            note = f"(grading: skipped {(match.group(2) + match.group(3)).strip()[:80]})"
            line = f"{match.group(1)}print({note!r})"
        lines.append(line)
    return "\n".join(lines)


def seed_all(seed):
    """Seed ``random``, and numpy and torch where they are imported. The grader seeds its own
    test cells with this too, so both sides of the sandbox line draw the same numbers."""
    random.seed(seed)
    for name, fn in (("numpy", "random.seed"), ("torch", "manual_seed")):
        module = sys.modules.get(name)
        if module is not None:
            try:
                target = module
                for part in fn.split("."):
                    target = getattr(target, part)
                target(seed)
            except Exception:
                pass


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
    spec = importlib.util.spec_from_file_location("_grader_guard", GUARD)
    guard = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(guard)
        import torch
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return guard.install_sentinel(torch)


GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.py")
STARTS_PROGRAMS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")
# walking the garbage collector is how code finds the hook itself, to rewrite it
FINDS_THE_HOOK = ("gc.get_objects", "gc.get_referrers", "gc.get_referents")


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

    # Everything the hook uses is bound as a default argument: immutable values and builtins
    # (no closure, no function of ours), so neither replacing module attributes nor writing
    # to the locals of its frame (reachable from the traceback of a refusal) changes it.
    def hook(event, args, refused=frozenset((*STARTS_PROGRAMS, *FINDS_THE_HOOK)),
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


def run_submission(channel) -> None:
    """Become the runner of one submission: the notebook's heavy imports (already done in a
    process forked from a template), the uid fallback's hook, torch's attention switched off
    where asked, then serve the grader until it hangs up."""
    sys.argv = [""]
    preload(os.environ.pop("GRADER_PRELOAD", ""))
    confined = "GRADER_CONFINE" in os.environ
    refuse_syscalls(programs=confined)
    if confined:
        confine(json.loads(os.environ.pop("GRADER_CONFINE")))
    Runner(channel, refuse_attention()).serve()


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


def preload(modules: str) -> None:
    """Import what the notebook's given cells import (comma-separated), now: a sandbox started
    ahead of need, or a template, has done it before the submission's turn, and native
    libraries are loaded before the uid fallback's hook refuses ctypes."""
    for module in filter(None, modules.split(",")):
        try:
            importlib.import_module(module)
        except ImportError:
            pass


# --- the template: one import of torch per grading worker, a fresh child per submission -----
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL, CAPABILITY_VERSION_3 = 4, 0x20080522
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
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
    """Kill every process of ``uid`` and wait until none runs; then remove its System V IPC
    objects, which outlive its processes. Each pass kills every
    process found, and a process being killed can no longer fork, so a fork bomb does not
    outrun it; a killed process dies a moment later, and one left a zombie runs no code.
    Killed as root, through a pidfd checked after it was opened (never a new process that took
    the pid of one that exited): this process never takes ``uid``, whose processes could then
    signal it."""
    deadline = time.monotonic() + wait
    while True:
        found = running_as(uid)
        if not found:
            break
        if time.monotonic() > deadline:
            return
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
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            remove_ipc_of(uid)
        finally:
            os._exit(0)
    os.waitpid(helper, 0)


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


def _become_student(request, sock):
    """In the child forked for one submission: its own session, only its own connection
    open, its own scratch folder, memory and process limits, the submission's uid; then the
    runner."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(sock, 0)
    os.dup2(sock, 1)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    uid, scratch = request["uid"], request["scratch"]
    with open("/proc/self/oom_score_adj", "w") as handle:  # the first the OOM killer takes
        handle.write("1000")
    os.environ.update(HOME=scratch, TMPDIR=scratch)
    os.chdir(scratch)
    drop_to(uid)
    limit(int(os.environ.pop("GRADER_RLIMIT_AS_MB", "0")),
          int(os.environ.pop("GRADER_RLIMIT_NPROC", "0")))
    run_submission(Channel())


def template(ctl):
    """Serve one grading worker over ``ctl`` (a Unix seqpacket socket; JSON messages): import
    the heavy packages once, then for each submission fork a fresh child that becomes the
    runner (``fork``: a connection passed along, the uid, the scratch folder), and after it
    kill everything of that uid and remove what it left (``stop``). Exits when the worker hangs
    up. Children that exit are reported (``exited``) with their exit status."""
    preload(os.environ.pop("GRADER_PRELOAD", ""))
    preload("IPython.core.interactiveshell")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    children = {}

    def send(message):
        ctl.send(json.dumps(message).encode())

    def reap():
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.pop(pid)
                send({"op": "exited", "pid": pid, "code": os.waitstatus_to_exitcode(status)})

    send({"op": "ready"})
    while True:
        ready = select.select([ctl, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap()
        if ctl not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 1)
        if not data:  # the worker is done: nothing to keep, so no interpreter teardown
            os._exit(0)
        request = json.loads(data)
        if request["op"] == "fork":
            remove_tree(request["scratch"])
            os.makedirs(request["scratch"], mode=0o700)
            os.chown(request["scratch"], request["uid"], request["uid"])
            pid = os.fork()
            if pid == 0:
                try:
                    _become_student(request, fds[0])
                finally:
                    os._exit(0)
            os.close(fds[0])
            children[pid] = request
            send({"op": "forked", "pid": pid})
        elif request["op"] == "stop":
            uid = request["uid"]
            try:  # whatever the submission left, the template goes on serving
                end_uid(uid)
                for place in SHARED_WRITABLE:
                    remove_owned(place, uid)
                remove_tree(request["scratch"])
            except Exception:
                pass
            reap()
            send({"op": "stopped"})


if __name__ == "__main__":
    if sys.argv[1:] == ["--template"]:
        template(socket.socket(fileno=os.dup(0)))
    else:
        channel = Channel()
        limit(int(os.environ.pop("GRADER_RLIMIT_AS_MB", "0")),
              int(os.environ.pop("GRADER_RLIMIT_NPROC", "0")))
        run_submission(channel)
