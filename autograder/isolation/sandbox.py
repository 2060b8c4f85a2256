"""Start the sandbox that student code runs in: bubblewrap, an unprivileged user, hard limits.

The sandbox sees a whitelist, not the host: the system (/usr, /etc), this Python and its
environment, and a support folder with the runner. The course (source notebooks, hidden tests),
the gradebook, the output folder and every other student's files are simply not there. It has no
network (a fresh network namespace: not even the host's loopback), writes only to its own
size-capped scratch tmpfs, and runs as ``nobody`` when the grader is root. Packages an answer must
not call (the course's reference implementation, nltk, sacrebleu, transformers, and whatever an
assignment's master notebook lists under ``metadata.autograder.withhold``) are withheld: a stub
that raises ImportError is mounted over each one's real folder (found by real path, so symbolic
links and lib64 lead there too) and comes first on PYTHONPATH, so no import path reaches them.
Where answers must compute attention themselves, the runner switches torch's attention off
before any student code runs (``guard``).

Memory and process caps use cgroups (v1 or v2) when this host lets us create them, and fall back
to rlimits (address space, processes of the sandbox's user) otherwise; ``Sandbox.limits_in_force``
says which.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from .kinds import BUBBLEWRAP, NONE, UID, UID_BASE, UID_SPAN, Isolation, as_uid, choose

NOBODY = 65534
WITHHELD = ("seqlab", "nltk", "sacrebleu", "transformers", "autograder")
CGROUP_V1 = Path("/sys/fs/cgroup")
CGROUP_PARENT = "seqlab-grader"
SCRATCH_BYTES = 256 * 2**20
PRELOADABLE = ("numpy", "torch", "matplotlib")
RUNNER = Path(__file__).with_name("runner.py")
CHECKS = Path(__file__).parents[1] / "checks.py"
GUARD = Path(__file__).parents[1] / "guard.py"


@dataclass(frozen=True)
class Limits:
    timeout_cell: float = 30.0
    timeout_notebook: float = 300.0
    memory_mb: int = 4096
    max_procs: int = 256

    def __post_init__(self):
        for name in ("timeout_cell", "timeout_notebook", "memory_mb", "max_procs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")


def _cgroup_dirs(name: str) -> dict[str, Path]:
    """Writable cgroup folders for one sandbox: {'memory': ..., 'pids': ...} (v1), or
    {'unified': ...} (v2), or {} when this host does not let us create them."""
    v1 = {c: CGROUP_V1 / c for c in ("memory", "pids")}
    if all((d / "cgroup.procs").exists() for d in v1.values()):
        try:
            made = {}
            for controller, root in v1.items():
                folder = root / CGROUP_PARENT / name
                folder.mkdir(parents=True, exist_ok=True)
                made[controller] = folder
            return made
        except OSError:
            return {}
    v2 = CGROUP_V1 / CGROUP_PARENT
    try:
        controllers = (CGROUP_V1 / "cgroup.controllers").read_text().split()
        if {"memory", "pids"} <= set(controllers):
            v2.mkdir(exist_ok=True)
            (CGROUP_V1 / "cgroup.subtree_control").write_text("+memory +pids")
            (v2 / "cgroup.subtree_control").write_text("+memory +pids")
            folder = v2 / name
            folder.mkdir(exist_ok=True)
            return {"unified": folder}
    except OSError:
        pass
    return {}


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
    """One running sandbox: its process, cgroups, working folder and (uid fallback) uid."""

    proc: subprocess.Popen
    groups: dict[str, Path]
    scratch: Path
    uid: int | None = None


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
        if write:
            self._write_support()
        probe = _cgroup_dirs(f"probe-{os.getpid()}")
        self.cgroups = bool(probe)
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
            uid = {UID: UID_BASE, BUBBLEWRAP: NOBODY if os.geteuid() == 0 else None}.get(
                self.isolation.kind)
            held = _rlimits_that_hold(self.limits, uid)
            shared = " of nobody, shared by the sandboxes running at once" if uid == NOBODY \
                else ""
            named = [f"memory {self.limits.memory_mb} MB (address-space rlimit)"
                     if "memory" in held else
                     "memory NOT capped (no cgroup, and the address-space rlimit was refused)",
                     f"{self.limits.max_procs} processes (per-user rlimit{shared})"
                     if "processes" in held else
                     "processes NOT capped (no cgroup; the per-user rlimit does not bind root)"]
            caps = " and ".join(named)
        return caps

    def _write_support(self) -> None:
        site = self.support / "site"
        if site.exists():
            shutil.rmtree(site)
        (site / "autograder").mkdir(parents=True)
        shutil.copy(RUNNER, self.support / "runner.py")
        shutil.copy(GUARD, self.support / "guard.py")
        (site / "autograder" / "__init__.py").write_text("")
        shutil.copy(CHECKS, site / "autograder" / "checks.py")
        shutil.copy(GUARD, site / "autograder" / "guard.py")
        # Colab's own module, as a no-op stand-in: a notebook saved on Colab mounts Drive or
        # uploads files in cells of its own, which must not cost points where there is no Colab
        (site / "google" / "colab").mkdir(parents=True)  # `google` stays a namespace package
        (site / "google" / "colab" / "__init__.py").write_text(COLAB_STAND_IN)
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
        folders = []
        for name in self.withheld:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin and spec.submodule_search_locations and \
                    Path(spec.origin).exists():
                folders.append(Path(spec.origin).resolve().parent)
        return folders

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

    def command(self, uid: int | None = None) -> list[str]:
        python = self._python()
        if self.isolation.kind == NONE:
            return [python, str(self.support / "runner.py")]
        if self.isolation.kind == UID:
            return as_uid(uid) + [python, str(self.support / "runner.py")]
        args = ["bwrap", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        # /tmp first: a venv under /tmp (CI checkouts) is then bound on top of it, not hidden
        args += ["--perms", "1777", "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp",
                 "--dev", "/dev", "--proc", "/proc"]
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
                 "--perms", "1777", "--size", str(SCRATCH_BYTES), "--tmpfs", "/scratch",
                 "--chdir", "/scratch", "--unshare-net", "--unshare-pid", "--unshare-ipc",
                 "--unshare-uts", "--die-with-parent", "--new-session", "--clearenv"]
        for key, value in self.environment("/scratch", "/scratch", "/grader/site").items():
            args += ["--setenv", key, value]
        args.append("--")
        if os.geteuid() == 0:
            args += as_uid(NOBODY)
        return args + [python, "/grader/runner.py"]

    def environment(self, home: str, tmp: str, site: str) -> dict[str, str]:
        env = {"PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin", "HOME": home, "TMPDIR": tmp,
               "PYTHONPATH": site, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "LANG": "C.UTF-8", "NBGRADER_EXECUTION": "autograde", "SEQLAB_FAST": "1"}
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
        """Start the runner for one submission; its stdin/stdout are the protocol pipes."""
        groups = _cgroup_dirs(name) if self.cgroups else {}
        for controller, folder in groups.items():
            if controller in ("memory", "unified"):
                _limit_memory(folder, self.limits.memory_mb * 2**20, controller == "unified")
            if controller in ("pids", "unified"):
                (folder / "pids.max").write_text(str(self.limits.max_procs))
        # join the cgroups before exec, so every process the sandbox ever forks is counted
        joins = " ".join(f"echo $$ > {folder / 'cgroup.procs'} &&" for folder in groups.values())
        scratch = self.support / "scratch" / name
        scratch.mkdir(parents=True, exist_ok=True)
        uid = None
        env = {"PATH": os.environ.get("PATH", "/usr/bin")}
        if self.isolation.kind != BUBBLEWRAP:
            env = {**self.environment(str(scratch), str(scratch), str(self.support / "site")),
                   "PATH": env["PATH"]}
        if self.isolation.kind == UID:
            uid = uid_for(name)
            os.chown(scratch, uid, uid)
            scratch.chmod(0o700)
        proc = subprocess.Popen(["/bin/sh", "-c", f'{joins} exec "$@"', "sh", *self.command(uid)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=scratch, env=env,
                                start_new_session=True)
        return Box(proc, groups, scratch, uid)

    def cleanup(self, name: str) -> None:
        """Remove what a sandbox named ``name`` left if its grading worker died with it: its
        cgroups (processes there are killed), the processes of its uid, its scratch folder."""
        for folder in (*(CGROUP_V1 / c / CGROUP_PARENT / name for c in ("memory", "pids")),
                       CGROUP_V1 / CGROUP_PARENT / name):
            if folder.is_dir():
                _empty_and_remove(folder)
        if self.isolation.kind == UID:
            _kill_uid(uid_for(name))
        shutil.rmtree(self.support / "scratch" / name, ignore_errors=True)

    @staticmethod
    def stop(box: Box) -> bool:
        """Kill what is left of one sandbox; return True when it hit its memory limit."""
        proc = box.proc
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
        out_of_memory = False
        for controller, folder in box.groups.items():
            try:
                if controller == "memory":  # oom_kill counts kills; failcnt (old kernels)
                    control = (folder / "memory.oom_control").read_text().split()
                    out_of_memory = (int(control[control.index("oom_kill") + 1]) > 0
                                     if "oom_kill" in control else
                                     int((folder / "memory.failcnt").read_text()) > 0)
                elif controller == "unified":
                    events = (folder / "memory.events").read_text().split()
                    out_of_memory = int(events[events.index("oom_kill") + 1]) > 0
            except (OSError, ValueError):
                pass
            _empty_and_remove(folder)
        shutil.rmtree(box.scratch, ignore_errors=True)
        return out_of_memory


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
        _remove_owned(Path(place), uid)


SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock")


def _remove_owned(folder: Path, uid: int, depth: int = 0) -> None:
    """Remove what ``uid`` owns in ``folder``, and in the folders there that anyone may write
    (/tmp/.X11-unix), never following a symbolic link."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_uid == uid:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            elif entry.is_dir(follow_symlinks=False) and info.st_mode & 0o002 and depth < 4:
                _remove_owned(Path(entry.path), uid, depth + 1)
        except OSError:
            pass


def support_folder(out: Path, isolation: Isolation) -> Path:
    """Where the sandboxes' support and scratch folders go: under ``out`` usually; in the uid
    fallback, where the output's own permissions (no access for others) cannot hide them from
    the sandbox uids: a fresh folder of root's that they may only traverse."""
    if isolation.kind != UID:
        return Path(out) / "sandbox"
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
