"""A grading worker's template: one process, isolated like a sandbox (inside bubblewrap, or on
the host in the uid fallback) but root there, that imported the notebook's heavy packages
(torch: most of a sandbox's start) once. For each submission it forks a child that enters its
own session, scratch folder and uid (``become.drop_to``) before any student code runs, then
becomes the runner (``runner.main``); after it, the template ends that uid (``ending.end_uid``).

What a child shares with its template, and so with the submissions graded before it in the same
worker: the packages imported before the fork (their module state as the template left it,
never a student's: each child is a fresh fork of the template, which runs no student code), the
template's view of the system (under bubblewrap: its mounts, /tmp, and its process and IPC
namespaces, emptied of the previous uid's processes, files and IPC objects), and its cgroups
(memory, processes, CPU share). A child has its own uid (not the previous submission's), session,
scratch folder and rlimits, no capability, and cannot signal its template.

Runs as ``python template.py`` with the worker's control socket as stdin. The grader never
imports it; it imports the runner (inside code) only in a child, after the child has dropped to
the student's uid.
"""

import json
import os
import resource
import select
import signal
import socket

from become import PR_SET_PDEATHSIG, drop_to
from ending import end_uid, remove_tree
from protocol import preload


def _become_student(request, sock):
    """In the child forked for one submission: its own session, only its own connection
    open, its own scratch folder, the submission's uid; then the runner (which sets its own
    limits)."""
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
    import runner  # the inside program, only now that this process is the student's

    runner.main()


def template(ctl):
    """Serve one grading worker over ``ctl`` (a Unix seqpacket socket; JSON messages): import
    the heavy packages once, then for each submission fork a fresh child that becomes the
    runner (``fork``: a connection passed along, the uid, the scratch folder), and after it
    kill everything of that uid and remove what it left (``stop``). Exits when the worker hangs
    up. Children that exit are reported (``exited``) with their exit status."""
    preload(os.environ.get("GRADER_PRELOAD", ""))  # the runner's preload finds them done
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
                remove_tree(request["scratch"])
            except Exception:
                pass
            reap()
            send({"op": "stopped"})




if __name__ == "__main__":
    import ctypes  # die with the grading worker that started this template

    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    template(socket.socket(fileno=os.dup(0)))
