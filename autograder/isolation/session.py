"""The grader's side of the sandbox boundary: a session with one runner, and proxies for the
student's functions and objects.

THE RULE: nothing a student controls ever becomes code, an import, a path or a pickle on the
grader's side. What crosses back from the sandbox is JSON, decoded here into plain data only:
None, bools, numbers, strings, lists, tuples, dicts, sets, NumPy arrays and torch tensors (built
from raw bytes of a numeric dtype). Everything else, modules, classes, functions and the
student's own objects included, arrives as a ``StudentObject``: an opaque handle that the grader
can call or ask about (the sandbox answers with more plain data) but that never runs here. A
tag this module does not know is a ``ProtocolError``: that student's row says so, nobody else's
changes. Names of exceptions are mapped to Python's builtin exception classes only.

Arguments go the other way as pickles (the sandbox may unpickle what the grader sends); functions
that a test passes in, such as a callback (defined in a test cell, or in ``autograder.testing``,
the helpers hidden tests import), stay here and are called back over the same channel with
plain-data arguments.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import io
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import threading
import time
import types
from collections import Counter, OrderedDict

from .cputime import Meter, Usage
from .protocol import MAX_FRAME, NUMERIC, REQUESTS

TEST_MODULE = "__grader_tests__"
CALLBACK_MODULES = (TEST_MODULE, "autograder.testing")  # the grader's functions a test passes in

MAX_CONTAINERS = 1_000_000
"""Lists and objects one message from the sandbox may hold: a value's cost to the grader is
its count of Python objects, not its bytes (56 MB of empty lists are 14 million lists, about a
gigabyte). Arrays and tensors are one object each, whatever their size."""
START_SECONDS = 60.0
GRACE_SECONDS = 5.0  # after a soft timeout inside the sandbox, before the hard kill
DICTS = {"dict": dict, "Counter": Counter, "OrderedDict": OrderedDict, "defaultdict": dict}
DTYPES = NUMERIC  # what the runner sends is what the grader accepts: one table


class SandboxGone(Exception):
    """The sandbox died or was killed; ``reason`` says why in words a student can act on."""

    def __init__(self, reason: str, timed_out: bool = False):
        super().__init__(reason)
        self.reason, self.timed_out = reason, timed_out


def call_under_rules(target: StudentObject, args, kwargs, forbidden: tuple[str, ...],
                     attention: bool, metered: bool = False):
    """Call a student's function that may not use the ``forbidden`` packages, nor torch's
    attention if ``attention`` (what ``checks.own_work`` asks of a graded answer). The sandbox
    enforces both by construction; this checks, from what the grader set up and what the
    sandbox reported before any student code ran, that it did, and fails closed if not.
    ``metered``: return (its value, the sandbox's CPU ``Usage`` during the call) instead."""
    session = target._session
    withheld = set(session.sandbox.withheld)
    missing = [p for p in forbidden if p.split(".")[0] not in withheld and p not in withheld]
    if missing:
        raise AssertionError(f"the grading sandbox does not keep {', '.join(missing)} away from "
                             "answers, so this answer cannot be graded; please tell your "
                             "instructor (they withhold it in the assignment's metadata)")
    if attention and session.attention:
        raise AssertionError(f"torch's attention could not be switched off in the grading "
                             f"sandbox ({session.attention}), so this answer cannot be graded; "
                             "please tell your instructor")
    if metered:
        return session.call_metered(target, args, kwargs)
    return session.call(target, args, kwargs)


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise TimeoutError in the grader's own code after ``seconds`` (a timer signal, so only
    in the main thread, where grading workers run; elsewhere the request's deadline alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if seconds <= 0:
        raise TimeoutError("no time was left for the grader's function")

    def expire(signum, frame):
        raise TimeoutError(f"the grader's function ran past the {seconds:.3g} s left to the "
                           "test")

    outer, start = signal.getitimer(signal.ITIMER_REAL)[0], time.monotonic()  # a nested call
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer) if outer else seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))


class ProtocolError(Exception):
    """The sandbox sent something that is not the plain data it may send."""


class StudentObject:
    """A value that lives in the sandbox. Calls and attribute reads are forwarded; nothing of
    the student's runs here, so it compares equal only to itself and is not a number."""

    __slots__ = ("_session", "_key", "_callable")

    def __init__(self, session, key, is_callable):
        self._session, self._key, self._callable = session, key, is_callable

    def __call__(self, *args, **kwargs):
        return self._session.call(self, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._session.inspect("getattr", self, name)

    def __getitem__(self, key):
        return self._session.inspect("getitem", self, key)

    def __len__(self):
        value = self._session.inspect("len", self)
        if type(value) is not int:
            raise TypeError("len() of the student's object did not return an int")
        return value

    def __iter__(self):
        value = self._session.inspect("iter", self)
        return iter(value if type(value) is list else [])

    def __repr__(self):
        return f"<student's {type(self).__name__} object>"


_classes: dict[str, type] = {}


def _student_class(name: str) -> type:
    """A StudentObject subclass carrying the student's class name, for readable test messages."""
    name = name if name.isidentifier() else "StudentObject"
    if name not in _classes:
        _classes[name] = type(name, (StudentObject,), {"__slots__": ()})
    return _classes[name]


def _array(spec: dict):
    import numpy as np

    if not isinstance(spec, dict) or spec.get("dtype") not in DTYPES:
        raise ProtocolError("bad array")
    shape = spec["shape"]
    if not isinstance(shape, list) or any(type(s) is not int or s < 0 for s in shape):
        raise ProtocolError("bad array shape")
    data = base64.b64decode(spec["b64"], validate=True)
    return np.frombuffer(data, dtype=spec["dtype"]).reshape(shape).copy()


class Session:
    """One running sandbox for one submission: ``box`` is a sandbox started for it (perhaps
    ahead of need, or forked from a template: see ``grade``), used for this submission alone."""

    def __init__(self, sandbox, box):
        self.sandbox = sandbox
        self.box = box
        self.proc = box.proc
        self.callbacks: dict[str, object] = {}
        self.buffer = b""
        self.closed = False
        self.deadline = time.monotonic() + START_SECONDS  # of the current test cell
        self.timed_out = False  # whether a call of the current test cell ran out of time
        reply = self._receive(time.monotonic() + START_SECONDS)
        if reply.get("op") != "ready":
            raise ProtocolError("the sandbox did not start")
        # sent before any student code ran: why torch's attention is not refused ("" if it is)
        self.attention = str(reply.get("attention", "not requested"))

    # --- framing ------------------------------------------------------------------------
    def _send(self, message) -> None:
        data = pickle.dumps(message)
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._gone() from None

    def _read(self, n: int, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        while len(self.buffer) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise self._gone(timed_out=True)
            try:
                chunk = os.read(fd, 1 << 20)
            except ConnectionResetError:  # a forked runner's socket, its process killed
                chunk = b""
            if not chunk:
                raise self._gone()
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _receive(self, deadline: float) -> dict:
        (size,) = struct.unpack(">I", self._read(4, deadline))
        if size > MAX_FRAME:
            self.close()
            raise SandboxGone("the notebook sent a value too large to grade (over 64 MB)")
        data = self._read(size, deadline)
        if data.count(b"[") + data.count(b"{") > MAX_CONTAINERS:
            return {"op": "raise", "ename": "ValueError", "evalue": (
                f"the value holds over {MAX_CONTAINERS:,} lists, tuples, sets or dicts, more "
                "than the grader takes; return arrays or fewer, larger containers")}
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            raise ProtocolError("the sandbox sent malformed data") from None
        if not isinstance(message, dict):
            raise ProtocolError("the sandbox sent malformed data")
        return message

    def _gone(self, timed_out: bool = False) -> SandboxGone:
        if not timed_out:
            try:  # the pipe closes a moment before the process is reaped
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        code = self.proc.poll()
        out_of_memory = self.close()
        if timed_out:
            return SandboxGone("ran past its time limit and was stopped (an infinite loop?)",
                               timed_out=True)
        if out_of_memory:
            return SandboxGone(f"the kernel ran out of memory (limit "
                               f"{self.sandbox.limits.memory_mb} MB) and was stopped")
        signum = -code if code is not None and code < 0 else (
            code - 128 if code is not None and code > 128 else 0)  # bwrap reports 128 + signal
        how = {11: "a segmentation fault", 9: "killed", 6: "aborted"}.get(
            signum, f"signal {signum}" if signum else f"exit code {code}")
        if code is None:
            return SandboxGone("the kernel closed its connection to the grader and stopped "
                               "answering")
        return SandboxGone(f"the kernel died ({how}; os._exit, a crash, or out of memory)")

    def close(self) -> bool:
        if self.closed:
            return False
        self.closed = True
        return self.sandbox.stop(self.box)

    # --- requests -----------------------------------------------------------------------
    def request(self, message, seconds: float) -> dict:
        """Send one request; serve callbacks until its answer arrives (or the time is up)."""
        if message[0] not in REQUESTS:
            raise ValueError(f"unknown request {message[0]!r}: expected one of {sorted(REQUESTS)}")
        if self.closed:
            raise SandboxGone("the kernel is no longer running")
        deadline = time.monotonic() + seconds + GRACE_SECONDS
        self._send(message)
        while True:
            reply = self._receive(deadline)
            if reply.get("op") != "callback":
                return reply
            self._send(self._run_callback(reply, deadline))

    def _run_callback(self, reply: dict, deadline: float):
        """Run the grader's function that student code called back, on the time left to the
        request that code serves: it runs here, where no sandbox limit stops it."""
        try:
            fn = self.callbacks[reply["id"]]
            args, kwargs = self.decode(reply["args"]), self.decode(reply["kwargs"])
            with _time_limit(deadline - time.monotonic()):
                value = fn(*args, **kwargs)
            return ("ok", self._pickle(value))
        except Exception as exc:
            return ("error", type(exc).__name__, str(exc))

    def _pickle(self, value) -> bytes:
        session = self

        class Pickler(pickle.Pickler):
            def persistent_id(self, obj):
                if isinstance(obj, StudentObject):
                    return ("handle", obj._key)
                if isinstance(obj, (types.FunctionType, types.MethodType, types.LambdaType)) \
                        and getattr(obj, "__module__", None) in CALLBACK_MODULES:
                    key = str(len(session.callbacks))
                    session.callbacks[key] = obj
                    return ("callback", key)
                return None

        buffer = io.BytesIO()
        Pickler(buffer).dump(value)
        return buffer.getvalue()

    def run_cell(self, source: str, seed: int, seconds: float) -> dict:
        return self.request(("run", source, seed, seconds), seconds)

    def get(self, name: str, seconds: float):
        """The student's value of a global name, or KeyError."""
        reply = self.request(("get", name), seconds)
        if reply.get("missing"):
            raise KeyError(name)
        return self._result(reply)

    def call(self, target: StudentObject, args, kwargs, seed: int = 0,
             seconds: float | None = None):
        seconds = self.budget() if seconds is None else seconds
        reply = self.request(("call", target._key, self._pickle((list(args), dict(kwargs))),
                              seed, seconds), seconds)
        return self._result(reply)

    def call_metered(self, target: StudentObject, args, kwargs) -> tuple[object, Usage]:
        """``call``, and the CPU time the sandbox's processes spent on it, counted by the
        kernel and read here, outside the sandbox (``cputime``)."""
        seconds = self.budget()
        message = ("call", target._key, self._pickle((list(args), dict(kwargs))), 0, seconds)
        root = getattr(self.proc, "pid", None) if isinstance(self.proc, subprocess.Popen) \
            else None
        with Meter(self.box.groups, self.box.uid, root) as usage:
            reply = self.request(message, seconds)
        return self._result(reply), usage

    def inspect(self, op: str, target: StudentObject, arg=None):
        seconds = self.budget()
        payload = self._pickle(arg) if op == "getitem" else arg
        return self._result(self.request((op, target._key, payload, seconds), seconds))

    def begin_test_cell(self, seconds: float) -> None:
        """Start the time budget of one test cell: every request it makes shares ``seconds``."""
        self.deadline = time.monotonic() + seconds
        self.timed_out = False

    def budget(self) -> float:
        """Seconds left for the current test cell (see ``begin_test_cell``)."""
        return max(0.1, self.deadline - time.monotonic())

    def _result(self, reply: dict):
        if reply.get("op") == "value":
            return self.decode(reply.get("value"))
        if reply.get("op") != "raise":
            raise ProtocolError("the sandbox answered out of turn")
        name, value = str(reply.get("ename", "Error")), str(reply.get("evalue", ""))
        if name == "CellTimeout":
            self.timed_out = True
            raise TimeoutError("your code ran past the test cell's time limit of "
                               f"{self.sandbox.limits.timeout_cell:g} s")
        exc = getattr(builtins, name, None)
        if isinstance(exc, type) and issubclass(exc, Exception) and exc not in (
                StopIteration, StopAsyncIteration):
            raise exc(value)
        raise RuntimeError(f"your code raised {name}: {value}")

    # --- plain data ---------------------------------------------------------------------
    def decode(self, x):
        """``x`` as plain data; anything malformed (a set of lists, an array whose bytes do not
        fit its shape) is a ProtocolError, this student's alone, never a grader failure."""
        try:
            return self._decode(x)
        except (ValueError, TypeError, KeyError, OverflowError) as err:
            raise ProtocolError(f"the sandbox sent a malformed value ({type(err).__name__})") \
                from None

    def _decode(self, x, depth: int = 0):
        if depth > 40:
            raise ProtocolError("value nested too deeply")
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) is list:
            return [self._decode(v, depth + 1) for v in x]
        if type(x) is not dict or not x:
            raise ProtocolError("unexpected value")
        tag = next(iter(x))
        body = x[tag]
        if tag == "__tuple__":
            return tuple(self._decode(body, depth + 1))
        if tag == "__set__":
            return set(self._decode(body, depth + 1))
        if tag == "__dict__":
            pairs = {self._key(self._decode(k, depth + 1)): self._decode(v, depth + 1)
                     for k, v in body}
            return DICTS.get(x.get("type"), dict)(pairs)
        if tag == "__int__" and type(body) is str and len(body) < 5000:
            return int(body)
        if tag == "__float__" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "__ndarray__":
            return _array(body)
        if tag == "__npscalar__":
            return _array(body)[()]
        if tag == "__tensor__":
            import torch

            tensor = torch.from_numpy(_array(body))
            if x.get("requires_grad") is True and tensor.is_floating_point():
                tensor.requires_grad_(True)
            return tensor
        if tag == "__handle__" and type(body) is str:
            return _student_class(str(x.get("type", "")))(self, body, x.get("callable") is True)
        raise ProtocolError(f"unexpected value tag {tag!r}")

    @staticmethod
    def _key(value):
        try:
            hash(value)
        except TypeError:
            raise ProtocolError("unhashable dict key") from None
        return value
