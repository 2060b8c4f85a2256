"""Start the sandbox that student code runs in: bubblewrap, an unprivileged user, hard limits.

The sandbox sees a whitelist, not the host: the system (/usr, /etc), this Python and its
environment, and a support folder with the runner. The course (source notebooks, hidden tests),
the gradebook, the output folder and every other student's files are simply not there. It has no
network (a fresh network namespace: not even the host's loopback), writes only to its
size-capped scratch folder and /tmp (tmpfs), and runs as an unprivileged uid when the grader is
root. Packages an
answer must not call (the course's reference implementation, nltk, sacrebleu, transformers, and
whatever an assignment's master notebook lists under ``metadata.autograder.withhold``) are
withheld: a stub that raises ImportError is mounted over each one's real folder (found by real
path, so symbolic links and lib64 lead there too) and comes first on PYTHONPATH, so no import
path reaches them.
Where answers must compute attention themselves, the runner switches torch's attention off
before any student code runs (``guard``).

Memory and process caps use cgroups (v1 or v2) when this host lets us create them, and fall back
to rlimits (address space, processes of the sandbox's user) otherwise; ``Sandbox.limits_in_force``
says which.

Starting Python and importing torch is most of a sandbox's start (about 1.3 s of CPU). Where the
grader is root, each grading worker therefore keeps a ``Template``: one sandbox that imported
torch once, from which each submission's runner is forked as a child that becomes an
unprivileged uid (not the one of the submission before it) before any student code runs, and
whose processes, files and IPC objects are removed after it. Under bubblewrap, a worker's
submissions share that sandbox (its /tmp, namespaces, cgroups) in turn, never at once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from .kinds import (
    BUBBLEWRAP,
    NONE,
    STUB_MARK,
    UID,
    UID_BASE,
    UID_SPAN,
    Isolation,
    as_uid,
    choose,
)
from .runner import SHARED_WRITABLE, remove_owned, remove_tree

WITHHELD = ("seqlab", "nltk", "sacrebleu", "transformers", "autograder")
CGROUP_V1 = Path("/sys/fs/cgroup")
CGROUP_PARENT = "seqlab-grader"
SCRATCH_BYTES = 256 * 2**20
TEMPLATE_SECONDS = 180.0  # to start (torch, on a crowded machine), fork or clean up
PRELOADABLE = ("numpy", "torch", "matplotlib")
RUNNER = Path(__file__).with_name("runner.py")
TEMPLATE_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN", "CAP_FOWNER",
                         "CAP_DAC_OVERRIDE", "CAP_KILL")
"""What a template keeps inside bubblewrap: switching each child to its uid (and dropping the
child's bounding set), making the child's scratch folder its own, killing the child's processes
and removing what it left."""
CHECKS = Path(__file__).parents[1] / "checks.py"
GUARD = Path(__file__).parents[1] / "guard.py"


@dataclass(frozen=True)
class Limits:
    timeout_cell: float = 30.0
    timeout_notebook: float = 300.0
    memory_mb: int = 4096
    max_procs: int = 256
    cpus: float = 1.0  # cores one submission may keep busy at most, all its processes together

    def __post_init__(self):
        for name in ("timeout_cell", "timeout_notebook", "memory_mb", "max_procs", "cpus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")


def _cgroup_dirs(name: str) -> dict[str, Path]:
    """Writable cgroup folders for one sandbox: {'memory': ..., 'pids': ...} and, where the
    host has it, {'cpu': ...} (v1), or {'unified': ...} (v2), or {} when this host does not let
    us create them."""
    v1 = {c: CGROUP_V1 / c for c in ("memory", "pids", "cpu")}
    if all((v1[c] / "cgroup.procs").exists() for c in ("memory", "pids")):
        try:
            made = {}
            for controller, root in v1.items():
                if not (root / "cgroup.procs").exists():
                    continue  # no cpu controller: the CPU share is not enforced
                folder = root / CGROUP_PARENT / name
                folder.mkdir(parents=True, exist_ok=True)
                made[controller] = folder
            return made
        except OSError:
            return {}
    v2 = CGROUP_V1 / CGROUP_PARENT
    try:
        controllers = set((CGROUP_V1 / "cgroup.controllers").read_text().split())
        if {"memory", "pids"} <= controllers:
            wanted = " ".join(f"+{c}" for c in ("memory", "pids", "cpu") if c in controllers)
            v2.mkdir(exist_ok=True)
            (CGROUP_V1 / "cgroup.subtree_control").write_text(wanted)
            (v2 / "cgroup.subtree_control").write_text(wanted)
            folder = v2 / name
            folder.mkdir(exist_ok=True)
            return {"unified": folder}
    except OSError:
        pass
    return {}


CPU_PERIOD_US = 100_000


def _limit_cpu(folder: Path, cpus: float, unified: bool) -> bool:
    """Cap the CPU time of everything in the cgroup at ``cpus`` cores (CFS bandwidth: quota
    per period); False where this cgroup cannot (v2 without the cpu controller)."""
    quota = max(1000, int(cpus * CPU_PERIOD_US))
    if unified:
        control = folder / "cpu.max"
        if not control.exists():
            return False
        control.write_text(f"{quota} {CPU_PERIOD_US}")
        return True
    (folder / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
    (folder / "cpu.cfs_quota_us").write_text(str(quota))
    return True


def _rlimits_that_hold(limits: Limits, uid: int | None = None) -> list[str]:
    """The names of the rlimits ``runner.limit`` manages to set here, tried in a child process
    (setting them in the grader itself would cap the grader), as ``uid`` when given (the uid
    the sandbox's runner will have)."""
    script = ("import json, sys; runner = {'__name__': 'runner', '__file__': 'runner.py'}; "
              "exec(sys.stdin.read(), runner); "
              "print(json.dumps(runner['limit'](int(sys.argv[1]), int(sys.argv[2]))))")
    probe = subprocess.run((as_uid(uid) if uid is not None else []) +
                           [sys.executable, "-I", "-c", script, str(limits.memory_mb),
                            str(limits.max_procs)],
                           input=RUNNER.read_text(), capture_output=True, text=True)
    try:
        return json.loads(probe.stdout)
    except ValueError:
        return []


def _limit_memory(folder: Path, limit: int, unified: bool) -> None:
    """Cap memory, swap included, at ``limit`` bytes.

    cgroup v1 refuses (EINVAL) a memory limit above the memory+swap limit and a memory+swap
    limit below the memory limit, so the order of the two writes depends on which way the
    folder's current values move; writing the one that fails second makes both hold.
    """
    if unified:
        (folder / "memory.max").write_text(str(limit))
        swap = folder / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")
        return
    memory, swap = folder / "memory.limit_in_bytes", folder / "memory.memsw.limit_in_bytes"
    if not swap.exists():  # the host has no swap accounting
        memory.write_text(str(limit))
        return
    try:
        memory.write_text(str(limit))
    except OSError:  # memsw (lower, from an earlier run) must move first
        swap.write_text(str(limit))
        memory.write_text(str(limit))
    else:
        swap.write_text(str(limit))


def _empty_and_remove(folder: Path, wait: float = 5.0) -> None:
    """Kill what is left in a cgroup and remove it; killed processes leave it a moment later."""
    deadline = time.monotonic() + wait
    while True:
        try:
            pids = (folder / "cgroup.procs").read_text().split()
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            folder.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)


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


def remove_stale_cgroups() -> None:
    """Remove the cgroups of grading runs that died before they could (killed): cgroups outlive
    their processes. Grading names its sandboxes' "<process id of the run>-...": a folder whose
    run no longer exists is stale (its processes, if any are left, are killed)."""
    for parent in (*(CGROUP_V1 / c / CGROUP_PARENT for c in ("memory", "pids", "cpu")),
                   CGROUP_V1 / CGROUP_PARENT):
        try:
            folders = [f for f in parent.iterdir() if f.is_dir()]
        except OSError:
            continue
        for folder in folders:
            run = folder.name.split("-")[0]
            if run.isdigit() and not _running(int(run)):
                _empty_and_remove(folder)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


FIGURES_BACKEND = '''"""Matplotlib's backend while a notebook is graded: figures shown (or left
open at the end of a cell) are kept as PNG for the graded copy, as Jupyter's inline backend
keeps them."""
import base64
import io

from matplotlib.backends.backend_agg import FigureCanvasAgg as FigureCanvas  # noqa: F401

shown = []


def show(*args, **kwargs):
    from matplotlib import pyplot

    for number in pyplot.get_fignums()[:10]:
        buffer = io.BytesIO()
        pyplot.figure(number).savefig(buffer, format="png", dpi=72)
        shown.append(base64.b64encode(buffer.getvalue()).decode())
    pyplot.close("all")
'''


COLAB_STAND_IN = '''"""Stand-in for google.colab while a notebook is graded: nothing to mount."""


class _Drive:
    def mount(self, *args, **kwargs):
        print("(grading: drive.mount skipped: the grader has no Google Drive)")

    def flush_and_unmount(self, *args, **kwargs):
        pass


class _Files:
    def upload(self, *args, **kwargs):
        print("(grading: files.upload skipped)")
        return {}

    def download(self, *args, **kwargs):
        pass


class _Output:
    def enable_custom_widget_manager(self, *args, **kwargs):
        pass

    def clear(self, *args, **kwargs):
        pass


drive, files, output = _Drive(), _Files(), _Output()
'''


@dataclass
class Box:
    """One running sandbox: its process, cgroups, working folder and, when forked from a
    template, its uid and the OOM kills its cgroups had counted before it started."""

    proc: subprocess.Popen | Forked
    groups: dict[str, Path]
    scratch: Path
    uid: int | None = None
    oom_before: int = 0


class TemplateGone(Exception):
    """The template stopped answering (it died, or was killed): start another."""


class Template:
    """A grading worker's template: one process, isolated like a sandbox (inside bubblewrap,
    or on the host in the uid fallback) but root there, that imported the notebook's heavy
    packages (torch: most of a sandbox's start) once. Each submission gets a child forked from
    it, which enters its own session, scratch folder and limits and becomes its own uid before
    any student code runs; after it, the template kills every process of that uid and removes
    what it left (``runner.template``). Nothing of the grader is in the template: it was started
    from ``runner.py`` alone, so a child inherits torch, not the hidden tests."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self.name = sandbox.template_name or f"{os.getpid()}-template"
        self.groups = sandbox._groups(self.name)
        self.ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = sandbox._popen(self.name, sandbox.command(template=True), self.groups,
                                   stdin=theirs)
        theirs.close()
        self.exited: dict[int, int] = {}
        self.replies: list[dict] = []
        self._reply("ready")

    def _collect(self, timeout: float) -> bool:
        """Read what the template sent within ``timeout`` s; False if nothing came."""
        if not select.select([self.ctl], [], [], max(0.0, timeout))[0]:
            return False
        try:
            data = self.ctl.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            raise TemplateGone("the template stopped")
        message = json.loads(data)
        if message["op"] == "exited":
            self.exited[message["pid"]] = message["code"]
        else:
            self.replies.append(message)
        return True

    def _reply(self, op: str) -> dict:
        deadline = time.monotonic() + TEMPLATE_SECONDS
        while not self.replies:
            if not self._collect(deadline - time.monotonic()) and time.monotonic() > deadline:
                raise TemplateGone(f"the template did not answer within {TEMPLATE_SECONDS:g} s")
        message = self.replies.pop(0)
        if message["op"] != op:
            raise TemplateGone(f"the template answered {message['op']!r} to {op!r}")
        return message

    def _request(self, message: dict, fds: list[int] = ()) -> None:
        try:
            socket.send_fds(self.ctl, [json.dumps(message).encode()], list(fds))
        except OSError as err:
            raise TemplateGone(f"the template is gone ({err})") from None

    def fork(self, uid: int, scratch: str) -> Forked:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._request({"op": "fork", "uid": uid, "scratch": scratch}, [theirs.fileno()])
        finally:
            theirs.close()
        return Forked(self, self._reply("forked")["pid"], mine)

    def end(self, uid: int, scratch: str) -> None:
        """Kill every process of ``uid`` and remove what it left."""
        self._request({"op": "stop", "uid": uid, "scratch": scratch})
        self._reply("stopped")

    def close(self) -> None:
        self.ctl.close()
        try:  # it has nothing to finish, and killed it is gone at once (its children with it)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for folder in self.groups.values():
            _empty_and_remove(folder)
        shutil.rmtree(self.sandbox.support / "scratch" / self.name, ignore_errors=True)


class Forked:
    """A submission's runner forked from a template, as the session sees a process: its
    connection as ``stdin``/``stdout``, and ``poll``/``wait`` for the exit status the template
    reports."""

    def __init__(self, template: Template, pid: int, sock: socket.socket):
        self.template, self.pid, self.sock = template, pid, sock
        self.stdin = sock.makefile("wb")
        self.stdout = sock.makefile("rb", buffering=0)

    def poll(self) -> int | None:
        with contextlib.suppress(TemplateGone):
            while self.pid not in self.template.exited and self.template._collect(0):
                pass
        if self.template.proc.poll() is not None:  # its children died with it
            return self.template.exited.get(self.pid, -signal.SIGKILL)
        return self.template.exited.get(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"runner {self.pid}", timeout)
            with contextlib.suppress(TemplateGone):
                self.template._collect(min(0.1, deadline - time.monotonic()))
        return self.poll()

    def close(self) -> None:
        for stream in (self.stdin, self.stdout, self.sock):
            with contextlib.suppress(OSError):
                stream.close()


class Sandbox:
    """Knows how to start ``runner.py`` for one submission, and how to clean up after it.

    ``support`` holds the runner, the guard and the stubs (all public); in the uid fallback it
    is a folder every sandbox uid may traverse (``support_folder``), and each sandbox's scratch
    folder inside it belongs to that sandbox's uid alone."""

    def __init__(self, support: Path, limits: Limits, isolation: Isolation, write: bool = True,
                 withhold: tuple[str, ...] = (), refuse_attention: bool = False,
                 preload: tuple[str, ...] = ()):
        self.limits = limits
        self.isolation = isolation
        self.refuse_attention = refuse_attention
        self.withheld = tuple(dict.fromkeys((*WITHHELD, *withhold)))
        # heavy packages the notebook's given cells import: the runner imports them before
        # it says it is ready, so a sandbox started ahead of need has done that work
        # (in the uid fallback always numpy and torch, whose native libraries must load before
        # the runner's hook refuses ctypes)
        wanted = (*preload, "numpy", "torch") if isolation.kind == UID else preload
        self.preload = tuple(p for p in dict.fromkeys(wanted)
                             if p in PRELOADABLE and p not in self.withheld)
        self.support = Path(support).resolve()
        if write:  # the grading process: workers pass write=False
            self._write_support()
            remove_stale_cgroups()
        self.template: Template | None = None  # started at the first ``start`` that forks
        self.template_name = ""  # its cgroups' and scratch folder's name; else "<pid>-template"
        probe = _cgroup_dirs(f"probe-{os.getpid()}")
        self.cgroups = bool(probe)
        self.cpu_share = "cpu" in probe or (
            "unified" in probe and (probe["unified"] / "cpu.max").exists())
        for folder in probe.values():
            folder.rmdir()

    @property
    def unsafe(self) -> bool:
        return self.isolation.kind == NONE

    @property
    def limits_in_force(self) -> str:
        """What holds for every sandbox, in words: the isolation, then only the caps that are
        enforced, then the time limits."""
        return (f"{self.isolation.describe()}; {self.caps_in_force}; "
                f"{self.limits.timeout_cell:g} s per cell, {self.limits.timeout_notebook:g} s "
                "per notebook")

    @property
    def caps_in_force(self) -> str:
        """The memory and process caps, each said to hold only where it is enforced."""
        if self.cgroups:
            caps = (f"memory {self.limits.memory_mb} MB and {self.limits.max_procs} processes "
                    "via cgroup")
        else:
            # a uid of the sandbox's own, or (bubblewrap started by a user) the grader's
            uid = UID_BASE if self.forks or self.isolation.kind == UID else None
            held = _rlimits_that_hold(self.limits, uid)
            shared = "" if uid is not None else ", shared with your own processes"
            named = [f"memory {self.limits.memory_mb} MB (address-space rlimit)"
                     if "memory" in held else
                     "memory NOT capped (no cgroup, and the address-space rlimit was refused)",
                     f"{self.limits.max_procs} processes (per-user rlimit{shared})"
                     if "processes" in held else
                     "processes NOT capped (no cgroup; the per-user rlimit does not bind root)"]
            caps = " and ".join(named)
        if self.cpu_share:
            return f"{caps}; at most {self.limits.cpus:g} CPU core(s) via cgroup"
        return (f"{caps}; CPU share NOT capped (no cpu cgroup here: a submission's processes "
                "compete with the others'; cost checks count CPU time, so they still hold)")

    def _write_support(self) -> None:
        site = self.support / "site"
        if site.exists():
            shutil.rmtree(site)
        (site / "autograder").mkdir(parents=True)
        shutil.copy(RUNNER, self.support / "runner.py")
        shutil.copy(GUARD, self.support / "guard.py")
        (site / "autograder" / "__init__.py").write_text(
            f'"""The checks test cells import; the rest of the grader {STUB_MARK}."""\n')
        shutil.copy(CHECKS, site / "autograder" / "checks.py")
        shutil.copy(GUARD, site / "autograder" / "guard.py")
        # Colab's own module, as a no-op stand-in: a notebook saved on Colab mounts Drive or
        # uploads files in cells of its own, which must not cost points where there is no Colab
        (site / "google" / "colab").mkdir(parents=True)  # `google` stays a namespace package
        (site / "google" / "colab" / "__init__.py").write_text(COLAB_STAND_IN)
        (site / "grader_figures.py").write_text(FIGURES_BACKEND)
        for name in self.withheld:
            if name == "autograder":
                continue
            (site / name).mkdir()
            (site / name / "__init__.py").write_text(
                f"raise ImportError({name!r} ' is not available while your notebook is graded: '"
                "'answers must be your own code (see the assignment rules)')\n")
        for path in [self.support, *self.support.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (self.support / "scratch").mkdir(exist_ok=True)
        (self.support / "scratch").chmod(0o711)  # enter your own folder; list nobody's

    def _bound(self) -> list[Path]:
        roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
                 Path(sys.executable).resolve().parent.parent}
        return sorted(r for r in roots if not any(o != r and o in r.parents for o in roots))

    def withheld_folders(self) -> list[Path]:
        """The real folders of the withheld packages installed here (links resolved)."""
        return package_folders(self.withheld)

    def _withheld_mounts(self, bound: list[Path]) -> list[str]:
        args = []
        for folder in self.withheld_folders():
            visible = any(r == folder or r in folder.parents for r in [*bound, Path("/usr")])
            if visible:
                # the stub over the real folder: any path to it (a symbolic link, lib64, a
                # sys.path entry of the student's own) finds the stub that says why
                args += ["--ro-bind", str(self.support / "site" / folder.name), str(folder)]
        return args

    def _dirs_for(self, path: Path, made: set[Path]) -> list[str]:
        args = []
        for parent in reversed(path.parents):
            if parent != Path("/") and parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        return args

    @staticmethod
    def _python() -> str:
        python = str(Path(sys.prefix) / "bin" / "python")
        return python if Path(python).exists() else sys.executable

    @property
    def forks(self) -> bool:
        """Whether each submission's runner is forked from a per-worker template (see
        ``Template``): where the grader is root, so the template can hand each child its own
        uid (the uid fallback; bubblewrap started by root). An unprivileged grader's bubblewrap
        maps one uid only, so there every submission gets a sandbox of its own started anew;
        so it does in the uid fallback where this Python lies where other users may not read
        (a home folder), since a child imports from where its template found the packages."""
        if self.isolation.kind == UID:  # the children read this Python where root does
            return python_readable_by_others()
        return self.isolation.kind == BUBBLEWRAP and os.geteuid() == 0

    @property
    def starts(self) -> str:
        """How each submission's runner starts, in words (``doctor``, a run's first line)."""
        if self.forks:
            return "each submission forked from its worker's template (torch imported once)"
        why = ("this Python is installed where other users may not read it"
               if self.isolation.kind == UID else "the grader is not root"
               if self.isolation.kind == BUBBLEWRAP else "no sandbox")
        return f"each submission's runner started anew ({why})"

    def command(self, uid: int | None = None, template: bool = False) -> list[str]:
        """The command that starts the runner of one submission as ``uid``, or (``template``)
        the worker's template, which stays root to give each child its uid."""
        python = self._python()
        tail = ["--template"] if template else []
        if self.isolation.kind == NONE:
            return [python, str(self.support / "runner.py")]
        if self.isolation.kind == UID:
            prefix = ["setpriv", "--pdeathsig=KILL", "--"] if template else as_uid(uid)
            return prefix + [python, str(self.support / "runner.py"), *tail]
        args = ["bwrap", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        # /tmp first: a venv under /tmp (CI checkouts) is then bound on top of it, not hidden
        args += ["--perms", "1777", "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp",
                 "--dev", "/dev", "--proc", "/proc",
                 "--mqueue", "/dev/mqueue"]  # POSIX message queues, where cleanup finds them
        made: set[Path] = {Path("/tmp")}
        bound = self._bound()
        for root in bound:
            if root != Path("/usr") and Path("/usr") not in root.parents:
                args += self._dirs_for(root, made) + ["--ro-bind", str(root), str(root)]
        args += self._withheld_mounts(bound)
        args += ["--perms", "0755", "--dir", "/grader",
                 "--ro-bind", str(self.support / "runner.py"), "/grader/runner.py",
                 "--ro-bind", str(self.support / "guard.py"), "/grader/guard.py",
                 "--ro-bind", str(self.support / "site"), "/grader/site",
                 # a template's children each get a folder of their own uid here, and /scratch
                 # itself is root's: they may enter their own folder, not write beside it
                 "--perms", "0711" if template else "1777", "--size", str(SCRATCH_BYTES),
                 "--tmpfs", "/scratch",
                 "--chdir", "/scratch", "--unshare-net", "--unshare-pid", "--unshare-ipc",
                 "--unshare-uts", "--die-with-parent", "--new-session", "--clearenv"]
        for key, value in self.environment("/scratch", "/scratch", "/grader/site").items():
            args += ["--setenv", key, value]
        if template:  # root, able to make children of other uids and clean up after them
            for cap in TEMPLATE_CAPABILITIES:
                args += ["--cap-add", cap]
        args.append("--")
        return args + [python, "/grader/runner.py", *tail]

    def environment(self, home: str, tmp: str, site: str) -> dict[str, str]:
        env = {"PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin", "HOME": home, "TMPDIR": tmp,
               "PYTHONPATH": site, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "MPLBACKEND": "module://grader_figures", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8", "NBGRADER_EXECUTION": "autograde",
               "SEQLAB_FAST": "1"}
        if self.refuse_attention:
            env["GRADER_REFUSE_ATTENTION"] = "1"
        env["GRADER_PRELOAD"] = ",".join(self.preload)
        if self.isolation.kind == UID:  # no mounts hide the withheld packages: the runner does
            env["GRADER_CONFINE"] = json.dumps([str(f) for f in self.withheld_folders()])
        if not self.cgroups:
            env["GRADER_RLIMIT_AS_MB"] = str(self.limits.memory_mb)
            env["GRADER_RLIMIT_NPROC"] = str(self.limits.max_procs)
        return env

    def start(self, name: str) -> Box:
        """Start the runner for one submission; its stdin/stdout are the protocol pipes (a
        socket when it is forked from this process's template)."""
        if self.forks:
            return self._fork(name)
        groups = self._groups(name)
        uid = uid_for(name) if self.isolation.kind == UID else None
        return Box(self._popen(name, self.command(uid), groups, uid=uid), groups,
                   self.support / "scratch" / name, uid)

    def _groups(self, name: str) -> dict[str, Path]:
        """The cgroups of one sandbox (or template), limits set; {} without cgroups."""
        groups = _cgroup_dirs(name) if self.cgroups else {}
        for controller, folder in groups.items():
            if controller in ("memory", "unified"):
                _limit_memory(folder, self.limits.memory_mb * 2**20, controller == "unified")
            if controller in ("pids", "unified"):
                (folder / "pids.max").write_text(str(self.limits.max_procs))
            if controller in ("cpu", "unified"):
                _limit_cpu(folder, self.limits.cpus, controller == "unified")
        return groups

    def _popen(self, name: str, command: list[str], groups: dict[str, Path],
               stdin=subprocess.PIPE, uid: int | None = None) -> subprocess.Popen:
        """Start ``command`` in ``groups`` (joined before exec, so every process it ever forks
        is counted), in a scratch folder ``name`` of its own (``uid``'s, when given)."""
        joins = " ".join(f"echo $$ > {folder / 'cgroup.procs'} &&" for folder in groups.values())
        scratch = self.support / "scratch" / name
        scratch.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin")}
        if self.isolation.kind != BUBBLEWRAP:
            env = {**self.environment(str(scratch), str(scratch), str(self.support / "site")),
                   "PATH": env["PATH"]}
        if uid is not None:
            os.chown(scratch, uid, uid)
        scratch.chmod(0o700)
        hidden = ()
        if command[0] == "bwrap":  # its options from a file descriptor, not its command line:
            # /proc/1/cmdline inside the sandbox (bubblewrap is pid 1 there) then shows
            # "bwrap --args 3 -- python /grader/runner.py", none of the host's paths
            end = command.index("--")
            args = os.memfd_create("bwrap-args")
            os.write(args, b"".join(a.encode() + b"\0" for a in command[1:end]))
            os.lseek(args, 0, os.SEEK_SET)
            command, hidden = ["bwrap", "--args", str(args), *command[end:]], (args,)
        try:
            return subprocess.Popen(["/bin/sh", "-c", f'{joins} exec "$@"', "sh", *command],
                                    stdin=stdin, stdout=subprocess.PIPE if stdin ==
                                    subprocess.PIPE else subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, cwd=scratch, env=env,
                                    start_new_session=True, pass_fds=hidden)
        finally:
            for fd in hidden:
                os.close(fd)

    def _fork(self, name: str) -> Box:
        """One submission's runner, forked from the template (started, or started again if it
        died, here)."""
        uid = uid_for(name)
        scratch = (Path("/scratch") if self.isolation.kind == BUBBLEWRAP
                   else self.support / "scratch") / name
        for attempt in (1, 2):
            if self.template is None or self.template.proc.poll() is not None:
                self.close_template()
                self.template = Template(self)
            try:
                return Box(self.template.fork(uid, str(scratch)), self.template.groups,
                           scratch, uid, oom_kills(self.template.groups))
            except TemplateGone:
                self.close_template()
                if attempt == 2:
                    raise

    def close_template(self) -> None:
        """Stop this process's template, if it has one (its children die with it)."""
        if self.template is not None:
            self.template.close()
            self.template = None

    def cleanup(self, name: str) -> None:
        """Remove what a sandbox named ``name`` left if its grading worker died with it: its
        cgroups (processes there are killed), the processes of its uid, its scratch folder."""
        for folder in (*(CGROUP_V1 / c / CGROUP_PARENT / name
                         for c in ("memory", "pids", "cpu")),
                       CGROUP_V1 / CGROUP_PARENT / name):
            if folder.is_dir():
                _empty_and_remove(folder)
        if self.isolation.kind == UID:
            _kill_uid(uid_for(name))
        remove_tree(self.support / "scratch" / name)

    @staticmethod
    def stop(box: Box) -> bool:
        """Kill what is left of one sandbox; return True when it hit its memory limit."""
        proc = box.proc
        if isinstance(proc, Forked):  # the template ends its uid; its cgroups stay
            try:
                proc.template.end(box.uid, str(box.scratch))
            except TemplateGone:  # killed now, bubblewrap's processes die with it; on the host,
                sandbox = proc.template.sandbox  # the uid's must be found
                if sandbox.template is proc.template:
                    sandbox.close_template()
                if sandbox.isolation.kind == UID:
                    _kill_uid(box.uid)
                    remove_tree(box.scratch)
            proc.close()
            return oom_kills(box.groups) > box.oom_before
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if box.uid is not None:  # what it started in sessions of its own, too
            _kill_uid(box.uid)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        out_of_memory = oom_kills(box.groups) > 0
        for folder in box.groups.values():
            _empty_and_remove(folder)
        remove_tree(box.scratch)
        return out_of_memory


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


def oom_kills(groups: dict[str, Path]) -> int:
    """How many times the memory cgroup in ``groups`` killed for memory (on old kernels: hit
    its limit); 0 without one."""
    for controller, folder in groups.items():
        try:
            if controller == "memory":  # oom_kill counts kills; failcnt (old kernels)
                control = (folder / "memory.oom_control").read_text().split()
                return (int(control[control.index("oom_kill") + 1]) if "oom_kill" in control
                        else int((folder / "memory.failcnt").read_text()))
            if controller == "unified":
                events = (folder / "memory.events").read_text().split()
                return int(events[events.index("oom_kill") + 1])
        except (OSError, ValueError):
            pass
    return 0


def uid_for(name: str) -> int:
    """The uid of the sandbox ``name`` in the uid fallback. Grading names its sandboxes
    "<grading process id>-<slot>", a slot per sandbox alive at once: they get different uids,
    and other grading runs almost surely others (64 slots in a block per process id)."""
    run, _, slot = name.rpartition("-")
    if run.isdigit() and slot.isdigit() and int(slot) < 64:
        return UID_BASE + (int(run) % 1024) * 64 + int(slot)
    return UID_BASE + zlib.crc32(name.encode()) % UID_SPAN


def _kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (as that uid: kill -1 reaches only its own), then remove
    what it left in the places every user may write: there the next sandbox given this uid,
    another student's, would find it (and the disk would keep it)."""
    subprocess.run(as_uid(uid) + ["kill", "-KILL", "-1"], capture_output=True)
    for place in SHARED_WRITABLE:
        remove_owned(place, uid)


def support_folder(out: Path, isolation: Isolation) -> Path:
    """Where the sandboxes' support and scratch folders go: a fresh folder of the grader's that
    the sandbox uids may only traverse, away from ``out``: in the uid fallback the output's own
    permissions (no access for others) could not hide them, and under bubblewrap the paths of
    what is bound into the sandbox show in its mount table, which then names nothing of the
    instructor's folders. ``out`` is kept for callers that name where grading writes."""
    folder = Path(tempfile.mkdtemp(prefix="autograder-sandbox-"))
    folder.chmod(0o711)
    return folder


def sandbox_problem() -> str:
    """Why no isolation at all can be had here ('' when bubblewrap or the uid fallback can)."""
    try:
        choose()
    except RuntimeError as err:
        return str(err)
    return ""
