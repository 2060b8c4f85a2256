"""The grader's handle on a grading worker's template (``privileged/template.py``, the process
that imported torch once and forks each submission's runner): starting it, asking it to fork a
runner for a uid and to end that uid after, and a forked runner as the session sees a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import time
from typing import TYPE_CHECKING

from . import cgroups

if TYPE_CHECKING:
    from .sandbox import Sandbox

TEMPLATE_SECONDS = 180.0  # to start (torch, on a crowded machine), fork or clean up


class TemplateGone(Exception):
    """The template stopped answering (it died, or was killed): start another."""


class Template:
    """The handle of a grading worker's template (``privileged/template.py``, which says what a
    child shares with it). Nothing of the grader is in the template: it was started from the
    sandbox's support folder alone, so a child inherits torch, not the hidden tests."""

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
            cgroups.empty_and_remove(folder)
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


