"""Each submission's runner is a child forked from its grading worker's template, a process that
imported torch once (``sandbox.Template``). What a child may have of the template is its
imports, nothing else: not root, not a capability, not the template's connection to the
grader; and what a child leaves (files, processes) is gone before the next one starts.

Runs with the isolation in force: bubblewrap here, and the uid fallback when
``test_container.py`` runs this file under Docker's capabilities with a Python others can read.
"""

import os
import platform
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from autograder.isolation.exposure import python_readable_by_others
from autograder.isolation.kinds import choose
from autograder.isolation.privileged import identity
from autograder.isolation.sandbox import Limits, Sandbox, sandbox_problem, support_folder
from autograder.isolation.session import SandboxGone, Session

ISOLATION = os.environ.get("SEQLAB_TEST_ISOLATION", "bubblewrap")
pytestmark = pytest.mark.skipif(bool(sandbox_problem()) or os.geteuid() != 0,
                                reason="needs a sandbox started by root (which forks)")

FACTS = r'''
import os, sys
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
links = []
for fd in os.listdir("/proc/self/fd"):
    try:
        links.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # the listing's own, closed by now
        pass
try:
    os.kill(os.getppid(), 0)
    parent = "signalled"
except PermissionError:
    parent = "refused"
try:
    open(os.path.join(os.path.dirname(os.getcwd()), "beside-my-folder"), "w")
    beside = "written"
except OSError:
    beside = "refused"
here = os.stat(os.getcwd())
FACTS = {"uid": list(os.getresuid()), "gid": list(os.getresgid()), "groups": os.getgroups(),
         "caps": [int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
         "no_new_privs": status["NoNewPrivs"].strip(), "parent": parent, "beside": beside,
         "sockets": len({link for link in links if link.startswith("socket:")}),
         "folder": [here.st_uid, oct(here.st_mode & 0o777)], "torch": "torch" in sys.modules}
'''

LEAVES = r'''
import os, time
with open("/tmp/left-by-the-last-student", "w") as handle:
    handle.write("for the next one")
read, write = os.pipe()
if os.fork() == 0:  # a daemon in a session of its own, outliving the cell
    os.setsid()
    if os.fork() == 0:
        os.write(write, str(os.getpid()).encode())
        time.sleep(600)
    os._exit(0)
DAEMON = int(os.read(read, 32))
folder = os.open("/tmp", os.O_RDONLY)
for _ in range(3000):  # a tree too deep to remove by recursion
    os.mkdir("deep", dir_fd=folder)
    inner = os.open("deep", os.O_RDONLY, dir_fd=folder)
    os.close(folder)
    folder = inner
try:  # what outlives processes: System V IPC, POSIX message queues, keys in a keyring
    import ctypes, threading
    libc = ctypes.CDLL(None)
    SEGMENT = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    QUEUE = libc.mq_open(b"/left-behind", 0o102, 0o600, None)  # O_CREAT | O_RDWR
    KEY = libc.syscall(248, b"user", b"left-behind", b"a secret", 8, -4)  # add_key, x86_64
    if os.fork() == 0:  # a process whose first thread ends while another runs on (a zombie)
        threading.Thread(target=time.sleep, args=(600,)).start()
        libc.syscall(60, 0)  # exit, this thread only (x86_64)
except PermissionError:  # the uid fallback refuses ctypes (and has no other way to make them)
    SEGMENT = QUEUE = KEY = None
'''

OWNERS = r'''
import os
OWNERS = []  # of the processes that run (a zombie runs no code, unless other threads do)
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    except (OSError, ValueError):
        continue
    if status["State"].split()[0] != "Z" or int(status["Threads"]) > 1:
        OWNERS.append(int(status["Uid"].split()[0]))
LEFT = os.path.exists("/tmp/left-by-the-last-student") or os.path.exists("/tmp/deep")
with open("/proc/sysvipc/shm") as handle:
    SEGMENTS = [int(line.split()[1]) for line in list(handle)[1:]]
try:
    import ctypes
    libc = ctypes.CDLL(None)
    QUEUE = libc.mq_open(b"/left-behind", 0)  # O_RDONLY
    KEY = libc.syscall(250, 10, -4, b"user", b"left-behind", 0)  # KEYCTL_SEARCH, x86_64
except PermissionError:
    QUEUE = KEY = -1
'''


@pytest.fixture
def sandbox(tmp_path):
    assert choose().kind == ISOLATION
    box = Sandbox(support_folder(choose()), Limits(timeout_cell=20), choose(),
                  preload=("torch",))
    assert box.forks, "root's sandbox forks each runner from a template"
    with identity.lease(2) as held:  # two uids, in turn, as a grading worker has them
        box.uids = held.uids
        yield box
        box.close_template()
    shutil.rmtree(box.support, ignore_errors=True)


def run(session: Session, code: str, name: str):
    reply = session.run_cell(code, 0, 20)
    assert reply["ok"], reply
    return session.get(name, 20)


def test_a_child_has_its_imports_and_nothing_else_of_the_template(sandbox):
    seen = []
    for slot in (0, 1):
        uid = sandbox.uids[slot]
        session = Session(sandbox, sandbox.start(f"{os.getpid()}-{slot}", uid))
        facts = run(session, FACTS, "FACTS")
        session.close()
        assert facts["uid"] == [uid] * 3 and facts["gid"] == [uid] * 3, facts
        assert facts["groups"] == [] and facts["caps"] == [0] * 5, facts
        assert facts["no_new_privs"] == "1", facts
        assert facts["parent"] == "refused", "the template is root's: no signal reaches it"
        assert facts["sockets"] == 1, "only its own connection, never the template's"
        assert facts["beside"] == "refused" and facts["folder"] == [uid, "0o700"], facts
        assert facts["torch"], "torch came imported from the template"
        seen.append(facts["uid"][0])
    assert seen[0] != seen[1], "two submissions in a row never share a uid"


def test_a_child_leaves_nothing_for_the_next(sandbox):
    uid = sandbox.uids[0]
    first = Session(sandbox, sandbox.start(f"{os.getpid()}-0", uid))
    daemon = run(first, LEAVES, "DAEMON")
    segment = first.get("SEGMENT", 20)
    made = [first.get(name, 20) for name in ("SEGMENT", "QUEUE", "KEY")]
    if platform.machine() == "x86_64" and made != [None] * 3:  # the keyring is refused
        assert made[0] >= 0 and made[1] >= 0 and made[2] == -1, made
    first.close()
    for slot in (1, 0):  # the next submission, then the one after, which gets the same uid
        session = Session(sandbox, sandbox.start(f"{os.getpid()}-{slot}", sandbox.uids[slot]))
        itself = int(sandbox.uids[slot] == uid)  # the one process it may see
        assert run(session, OWNERS, "OWNERS").count(uid) == itself, \
            f"a process of uid {uid} (daemon {daemon}) outlived its submission"
        assert not session.get("LEFT", 20), "its file in /tmp outlived it"
        assert segment not in session.get("SEGMENTS", 20), "its shared memory outlived it"
        assert session.get("QUEUE", 20) == -1, "its message queue outlived it"
        assert session.get("KEY", 20) == -1 or platform.machine() != "x86_64", \
            "its key outlived it"
        session.close()


STOPS_THE_TEMPLATE = r'''
import os, signal
template = os.getppid()
for _ in range(8):  # if the template ever took this uid, these would stop it
    if os.fork() == 0:
        os.setsid()
        while True:
            try:
                os.kill(template, signal.SIGSTOP)
            except PermissionError:
                pass
'''


def test_a_childs_processes_cannot_stop_the_template(sandbox):
    """The template kills a submission's processes as root, never as their uid, so they
    cannot signal it while it ends them: it serves the next submission without a restart."""
    for attempt in range(3):
        session = Session(sandbox, sandbox.start(f"{os.getpid()}-{attempt % 2}"))
        template = sandbox.template
        assert session.run_cell(STOPS_THE_TEMPLATE, 0, 20)["ok"]
        session.close()
        assert sandbox.template is template and template.proc.poll() is None


def test_a_template_that_died_is_replaced(sandbox):
    session = Session(sandbox, sandbox.start(f"{os.getpid()}-0"))
    os.killpg(sandbox.template.proc.pid, signal.SIGKILL)
    sandbox.template.proc.wait()
    with pytest.raises(SandboxGone, match="kernel died"):
        session.run_cell("print('still here?')", 0, 10)
    session.close()
    after = Session(sandbox, sandbox.start(f"{os.getpid()}-1"))
    assert after.run_cell("print('graded')", 0, 10)["stdout"] == "graded\n"
    after.close()


def test_the_uid_fallback_forks_only_where_others_can_read_python(monkeypatch):
    """A child imports from where its template found Python; where that is a home folder
    others may not enter (pyenv in /root), the uid fallback starts each runner anew, from a
    Python its uid can run."""
    import sysconfig

    base = Path(tempfile.mkdtemp())  # in /tmp, which others may enter
    try:
        lib = base / "home" / "lib"
        lib.mkdir(parents=True)
        for folder in (base, base / "home", lib):
            folder.chmod(0o755)
        monkeypatch.setattr(sysconfig, "get_paths", lambda: dict.fromkeys(
            ("stdlib", "platstdlib", "purelib", "platlib"), str(lib)))
        assert python_readable_by_others()
        (base / "home").chmod(0o700)
        assert not python_readable_by_others()
    finally:
        shutil.rmtree(base)


def test_a_new_run_removes_the_cgroups_of_runs_that_died(tmp_path):
    """cgroups outlive their processes: a grading run killed before its cleanup leaves its
    sandboxes' folders, which the next run removes (those of runs still going stay)."""
    from autograder.isolation import cgroups

    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True)
    stale, alive = cgroups.make(f"{int(dead.stdout)}-0"), cgroups.make(f"{os.getpid()}-0")
    if not stale:
        pytest.skip("this host does not let the grader make cgroups")
    box = Sandbox(support_folder(choose()), Limits(), choose())
    box.close_template()
    shutil.rmtree(box.support, ignore_errors=True)
    assert not any(folder.exists() for folder in stale.values())
    assert all(folder.exists() for folder in alive.values())
    for folder in alive.values():
        folder.rmdir()


def test_removing_what_a_uid_left_never_follows_a_link(tmp_path):
    """After a submission, root removes what its uid left in places anyone may write; there
    another sandbox's uid may plant links, which must lead nowhere."""
    from autograder.isolation.privileged.ending import remove_owned

    uid, other = 61999, 61998
    shared, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    for folder in (shared, elsewhere):
        folder.mkdir()
        folder.chmod(0o1777)
    (elsewhere / "theirs").write_text("a file of the uid, somewhere a link points to")
    os.chown(elsewhere / "theirs", uid, uid)
    (shared / "to-elsewhere").symlink_to(elsewhere)  # root's link: not followed
    (shared / "its-link").symlink_to(elsewhere)
    os.lchown(shared / "its-link", uid, uid)  # the uid's link: removed, not its target
    nested = shared / "anyones" / "its-folder" / "locked"
    nested.mkdir(parents=True)
    (nested / "file").write_text("left behind")
    (shared / "anyones").chmod(0o777)
    os.chown(shared / "anyones", other, other)
    for path in (nested.parent, nested, nested / "file"):
        os.chown(path, uid, uid)
    nested.chmod(0)
    remove_owned(shared, uid)
    assert sorted(p.name for p in shared.iterdir()) == ["anyones", "to-elsewhere"]
    assert list((shared / "anyones").iterdir()) == []
    assert (elsewhere / "theirs").exists()
    remove_owned(shared / "to-elsewhere", uid)  # a link is no folder to clear
    assert (elsewhere / "theirs").exists()


STARTS_A_PROGRAM = r'''
import multiprocessing.util, os, sys
read, write = os.pipe()
try:  # the way to start a program that raises no audit event (nor says when exec failed)
    child = multiprocessing.util.spawnv_passfds(
        os.fsencode(sys.executable), [sys.executable, "-c", "open('it-ran', 'w')"], [write])
    os.waitpid(child, 0)
except PermissionError:
    pass
STARTED = "started" if os.path.exists("it-ran") else "refused"
'''


def test_the_uid_fallback_refuses_starting_any_program(sandbox):
    """Bubblewrap lets a notebook start programs (inside it, as its uid); the uid fallback,
    whose sandboxes see the host, refuses them, in the kernel (a seccomp filter), not only in
    the audit hook, which some ways of starting one never tell."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(f"the filter's syscall numbers are not known for {platform.machine()}")
    session = Session(sandbox, sandbox.start(f"{os.getpid()}-0"))
    started = run(session, STARTS_A_PROGRAM, "STARTED")
    session.close()
    assert started == ("refused" if ISOLATION == "uid" else "started")
