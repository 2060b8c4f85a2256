"""The program that runs inside the sandbox, as the student: executes student cells, answers
the grader's calls.

Standalone on purpose (standard library only; numpy and torch only when the student's values
need them): it runs where nothing of the grader is installed but ``autograder.checks`` (for the
notebook's own imports) and, beside this file, the modules it imports by their plain names
(``protocol``, ``rules``, and ``guard``, which ``rules`` runs before any student code where
answers may not use torch's attention). The grader never imports it: it starts it
(``python runner.py``, as the sandbox's uid) or a template forks a process that becomes it.
It talks to the grader over its original stdin/stdout; file descriptors 0-2 are then pointed
at /dev/null, so student output can never reach the protocol by accident. Everything it sends
is plain data (JSON): the grader never unpickles, imports or calls anything that came from
here. Whatever student code does to this process (patching it included) can therefore change
only the data sent back, never a test.
"""

import base64
import builtins
import io
import json
import os
import pickle
import re
import signal
import struct
import sys
import traceback

import rules
from protocol import MAX_TEXT, NUMERIC, REQUESTS, preload, seed_all


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


def run_submission(channel) -> None:
    """Become the runner of one submission: the notebook's heavy imports (already done in a
    process forked from a template), the uid fallback's hook, torch's attention switched off
    where asked, then serve the grader until it hangs up."""
    sys.argv = [""]
    preload(os.environ.pop("GRADER_PRELOAD", ""))
    confined = "GRADER_CONFINE" in os.environ
    rules.refuse_syscalls(programs=confined)
    if confined:
        rules.confine(json.loads(os.environ.pop("GRADER_CONFINE")))
    Runner(channel, rules.refuse_attention()).serve()




def main(channel=None) -> None:
    """Serve one submission over ``channel`` (default: stdin/stdout), under the limits the
    grader set in the environment: the entry point of every runner, started or forked."""
    channel = channel or Channel()
    rules.limit(int(os.environ.pop("GRADER_RLIMIT_AS_MB", "0")),
                int(os.environ.pop("GRADER_RLIMIT_NPROC", "0")))
    run_submission(channel)


if __name__ == "__main__":
    main()
