"""Start the sandbox that student code runs in (bubblewrap, or the uid fallback's uid), with hard
limits, and clean up after it. ``SECURITY.md`` beside this file maps each threat to the file
that stops it.

The sandbox sees a whitelist, not the host: the system (/usr, /etc), this Python and its
environment, and a support folder with the programs it runs (``PROGRAMS``). The course (source
notebooks, hidden tests), the gradebook, the output folder and every other student's files are
simply not there. It has no network (a fresh network namespace: not even the host's loopback),
writes only to its size-capped scratch folder and /tmp (tmpfs), and runs as an unprivileged uid
when the grader is root: a uid leased for it (``privileged/identity.py``), never another
sandbox's. Packages an answer must not call (the course's reference implementation, nltk,
sacrebleu, transformers, and whatever an assignment's master notebook lists under
``metadata.autograder.withhold``) are withheld: a stub that raises ImportError is mounted over
each one's real folder (found by real path, so symbolic links and lib64 lead there too) and
comes first on PYTHONPATH, so no import path reaches them. Where answers must compute attention
themselves, the runner switches torch's attention off before any student code runs (``guard``).

Memory, process and CPU caps use cgroups (v1 or v2) when this host lets us create them, and
fall back to rlimits (address space, processes of the sandbox's user) otherwise;
``Sandbox.limits_in_force`` says which. When a sandbox stops, every process of its uid is
killed (``privileged/ending.py``) and, in its own cgroups, every process left.

Starting Python and importing torch is most of a sandbox's start (about 1.3 s of CPU). Where the
grader is root, each grading worker therefore keeps a template (``privileged/template.py``,
which says what a child shares with it): one sandbox that imported torch once, from which each
submission's runner is forked as a child that becomes an unprivileged uid (not the one of the
submission before it) before any student code runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import cgroups
from .exposure import STUB_MARK, package_folders, python_readable_by_others
from .kinds import BUBBLEWRAP, NONE, UID, Isolation, choose
from .limits import WITHHELD, Limits
from .privileged import identity
from .privileged.become import as_uid
from .privileged.ending import end_uid, remove_tree
from .templates import Forked, Template, TemplateGone

SCRATCH_BYTES = 256 * 2**20
PRELOADABLE = ("numpy", "torch", "matplotlib")
ISOLATION = Path(__file__).parent
PROGRAMS = {  # copied beside each other into every sandbox's support folder, run from there
    "runner.py": ISOLATION / "inside" / "runner.py",
    "rules.py": ISOLATION / "inside" / "rules.py",
    "protocol.py": ISOLATION / "protocol.py",
    "template.py": ISOLATION / "privileged" / "template.py",
    "become.py": ISOLATION / "privileged" / "become.py",
    "ending.py": ISOLATION / "privileged" / "ending.py",
    "guard.py": ISOLATION.parent / "guard.py",
}
TEMPLATE_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN", "CAP_FOWNER",
                         "CAP_DAC_OVERRIDE", "CAP_KILL")
"""What a template keeps inside bubblewrap: switching each child to its uid (and dropping the
child's bounding set), making the child's scratch folder its own, killing the child's processes
and removing what it left."""
CHECKS = ISOLATION.parent / "checks.py"


def _rlimits_that_hold(limits: Limits, support: Path, as_student: bool) -> list[str]:
    """The names of the rlimits the runner (``rules.limit``) manages to set here, tried in a
    process of their own (setting them in the grader itself would cap the grader), as a
    sandbox's uid where the runner will have one."""
    script = ("import json, sys; sys.path.insert(0, sys.argv[3]); import rules; "
              "print(json.dumps(rules.limit(int(sys.argv[1]), int(sys.argv[2]))))")
    command = [sys.executable, "-I", "-c", script, str(limits.memory_mb),
               str(limits.max_procs), str(support)]
    with identity.lease(1 if as_student else 0) as held:
        prefix = as_uid(held.uids[0]) if held.uids else []
        probe = subprocess.run(prefix + command, capture_output=True, text=True)
    try:
        return json.loads(probe.stdout)
    except ValueError:
        return []


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
    """One running sandbox: its process, cgroups, working folder, its uid (and the lease of it
    when it was leased for this sandbox alone), and, when forked from a template, the OOM kills
    its cgroups had counted before it started."""

    proc: subprocess.Popen | Forked
    groups: dict[str, Path]
    scratch: Path
    uid: int | None = None
    oom_before: int = 0
    lease: identity.Lease | None = None


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
            cgroups.remove_stale()
        self.template: Template | None = None  # started at the first ``start`` that forks
        self.template_name = ""  # its cgroups' and scratch folder's name; else "<pid>-template"
        probe = cgroups.make(f"probe-{os.getpid()}")
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
            own = self.forks or self.isolation.kind == UID
            held = _rlimits_that_hold(self.limits, self.support, own)
            shared = "" if own else ", shared with your own processes"
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
        for name, path in PROGRAMS.items():  # run from here, each importing its peers
            shutil.copy(path, self.support / name)
        (site / "autograder" / "__init__.py").write_text(
            f'"""The checks test cells import; the rest of the grader {STUB_MARK}."""\n')
        shutil.copy(CHECKS, site / "autograder" / "checks.py")
        shutil.copy(PROGRAMS["guard.py"], site / "autograder" / "guard.py")
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
        program = "template.py" if template else "runner.py"
        if self.isolation.kind == NONE:
            return [python, str(self.support / "runner.py")]
        if self.isolation.kind == UID:
            prefix = [] if template else as_uid(uid)
            return prefix + [python, str(self.support / program)]
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
        args += ["--perms", "0755", "--dir", "/grader"]
        for name in PROGRAMS:
            args += ["--ro-bind", str(self.support / name), f"/grader/{name}"]
        args += ["--ro-bind", str(self.support / "site"), "/grader/site",
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
        return args + [python, f"/grader/{program}"]

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

    @property
    def needs_uids(self) -> bool:
        """Whether each sandbox runs as a uid of its own, leased from ``identity``."""
        return self.forks or self.isolation.kind == UID

    def start(self, name: str, uid: int | None = None) -> Box:
        """Start the runner for one submission, as ``uid`` where sandboxes need uids (one
        leased for this sandbox alone when none is given); its stdin/stdout are the protocol
        pipes (a socket when it is forked from this process's template)."""
        lease = None
        if self.needs_uids and uid is None:
            lease = identity.lease(1)
            uid = lease.uids[0]
        if self.forks:
            box = self._fork(name, uid)
        else:
            groups = self._groups(name)
            box = Box(self._popen(name, self.command(uid), groups, uid=uid), groups,
                      self.support / "scratch" / name, uid)
        box.lease = lease
        return box

    def _groups(self, name: str) -> dict[str, Path]:
        """The cgroups of one sandbox (or template), limits set; {} without cgroups."""
        groups = cgroups.make(name) if self.cgroups else {}
        for controller, folder in groups.items():
            if controller in ("memory", "unified"):
                cgroups.limit_memory(folder, self.limits.memory_mb * 2**20,
                                     controller == "unified")
            if controller in ("pids", "unified"):
                (folder / "pids.max").write_text(str(self.limits.max_procs))
            if controller in ("cpu", "unified"):
                cgroups.limit_cpu(folder, self.limits.cpus, controller == "unified")
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

    def _fork(self, name: str, uid: int) -> Box:
        """One submission's runner, forked from the template (started, or started again if it
        died, here)."""
        scratch = (Path("/scratch") if self.isolation.kind == BUBBLEWRAP
                   else self.support / "scratch") / name
        for attempt in (1, 2):
            if self.template is None or self.template.proc.poll() is not None:
                self.close_template()
                self.template = Template(self)
            try:
                return Box(self.template.fork(uid, str(scratch)), self.template.groups,
                           scratch, uid, cgroups.oom_kills(self.template.groups))
            except TemplateGone:
                self.close_template()
                if attempt == 2:
                    raise

    def close_template(self) -> None:
        """Stop this process's template, if it has one (its children die with it)."""
        if self.template is not None:
            self.template.close()
            self.template = None

    def cleanup(self, name: str, uid: int | None = None) -> None:
        """Remove what a sandbox named ``name`` (run as ``uid``) left if its grading worker died
        with it: its cgroups (processes there are killed), its uid's processes, files and IPC
        objects, its scratch folder."""
        cgroups.remove(name)
        if uid is not None and self.isolation.kind == UID:
            end_uid(uid)
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
                    end_uid(box.uid)
                    remove_tree(box.scratch)
            proc.close()
            Sandbox._release(box)
            return cgroups.oom_kills(box.groups) > box.oom_before
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if box.uid is not None:  # what it started in sessions of its own, too
            end_uid(box.uid)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        out_of_memory = cgroups.oom_kills(box.groups) > 0
        for folder in box.groups.values():
            cgroups.empty_and_remove(folder)
        remove_tree(box.scratch)
        Sandbox._release(box)
        return out_of_memory

    @staticmethod
    def _release(box: Box) -> None:
        """Give back the uid leased for this sandbox alone, once nothing of it is left."""
        if box.lease is not None:
            box.lease.release()
            box.lease = None


def support_folder(isolation: Isolation | None = None) -> Path:
    """Where the sandboxes' support and scratch folders go: a fresh folder of the grader's that
    the sandbox uids may only traverse, away from the output: in the uid fallback the output's
    own permissions (no access for others) could not hide them, and under bubblewrap the paths
    of what is bound into the sandbox show in its mount table, which then names nothing of the
    instructor's folders."""
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
