"""The messages between grader and sandbox: one table of requests, anything else refused."""

import types
from pathlib import Path

import pytest
from helpers import sandbox_program

from autograder.isolation.protocol import REQUESTS
from autograder.isolation.session import ProtocolError, Session, StudentObject

Runner = sandbox_program("runner").Runner


class Channel:
    """Hands the runner a list of messages, then hangs up; keeps what it sends back."""

    def __init__(self, messages):
        self.messages, self.sent = list(messages), []

    def recv(self):
        if not self.messages:
            raise EOFError
        return self.messages.pop(0)

    def send(self, reply):
        self.sent.append(reply)


@pytest.mark.parametrize("message", [("exec", "import os"), ("__init__",), [], "run", (None,)])
def test_the_runner_refuses_a_request_outside_its_table(message):
    channel = Channel([message, ("get", "x")])
    Runner(channel, "not requested").serve()
    ready, refused, answered = channel.sent
    assert ready["op"] == "ready"
    assert refused["op"] == "raise" and refused["ename"] == "ValueError"
    assert "unknown request" in refused["evalue"] and "'run'" in refused["evalue"]
    assert answered == {"op": "value", "missing": True}  # it serves on after refusing


def test_the_grader_sends_only_requests_from_the_table():
    closed = types.SimpleNamespace(closed=True)
    with pytest.raises(ValueError, match="unknown request 'exec'"):
        Session.request(closed, ("exec", "import os"), 1.0)
    assert {"run", "get", "call", "getattr", "getitem", "len", "iter"} == set(REQUESTS)


def test_a_module_crosses_as_an_opaque_handle_never_as_an_import(tmp_path, monkeypatch):
    """A student's module (or any value naming one) must never make the grader import: a
    value that once crossed as {"__module__": name} was imported here, running the student's
    file from the folder the grader was started in."""
    (tmp_path / "planted.py").write_text("import sys\nsys.exit('the grader imported me')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = Runner(Channel([]), "not requested")
    sent = runner.encode({"m": types.ModuleType("planted"), "n": [1, 2.5, "x"]})
    session = Session.__new__(Session)
    value = session.decode(sent)
    assert isinstance(value["m"], StudentObject) and value["n"] == [1, 2.5, "x"]
    for forged in ({"__module__": "planted"}, {"__pickle__": "gASV"}, {"__path__": "/etc"},
                   {"__class__": "os.system"}):
        with pytest.raises(ProtocolError, match="unexpected value tag"):
            session.decode(forged)
    import sys

    assert "planted" not in sys.modules


def test_a_grader_function_called_back_stops_at_the_time_left_to_the_request():
    """Student code can call back a function of the grader's (a reference part, a model's
    step) with arguments it chooses; that runs in the grader, where no sandbox limit holds,
    so it gets only the time left to the request it serves."""
    import time

    def slow():
        while True:
            sum(range(1000))

    session = Session.__new__(Session)
    session.callbacks = {"0": slow}
    start = time.monotonic()
    reply = session._run_callback({"id": "0", "args": [], "kwargs": {"__dict__": []}},
                                  start + 0.5)
    assert reply[:2] == ("error", "TimeoutError") and "ran past" in reply[2]
    assert time.monotonic() - start < 5


CONFINED = r'''
import builtins, gc, os, os.path, sys
sys.path.insert(0, sys.argv[2])  # the sandbox's programs, beside each other
from rules import confine
withheld = sys.argv[1]
confine([withheld])

def tries(name, attempt):
    try:
        attempt()
        print(name, "got through")
    except PermissionError:
        print(name, "refused")

tries("reading a file", lambda: open(os.path.join(withheld, "__init__.py")).read())
os.symlink(withheld, "my-link")
tries("a link of one's own", lambda: open("my-link/__init__.py").read())
tries("walking the garbage collector", lambda: gc.get_objects())
tries("finding what refers to a folder", lambda: gc.get_referrers(withheld))
target = os.path.join(withheld, "__init__.py")
try:  # the hook's frame, from a refusal's traceback: what its locals let one change
    open(target)
except PermissionError as refusal:
    frame = refusal.__traceback__
    while frame.tb_next is not None:
        frame = frame.tb_next
    for value in frame.tb_frame.f_locals.values():
        for cell in getattr(value, "__closure__", None) or ():
            cell.cell_contents = None
    frame.tb_frame.f_locals["folders"] = ()
os.symlink(withheld, "another-link")
tries("after rewriting the hook's frame", lambda: open("another-link/__init__.py").read())
os.path.realpath = lambda path, **kwargs: "/nowhere"
os.fspath = lambda path: "/nowhere"
builtins.isinstance = lambda *args: False
builtins.type = lambda *args: bytes
tries("after replacing what the hook might use", lambda: open(target).read())
'''


def test_the_uid_fallbacks_hook_cannot_be_found_or_fooled(tmp_path):
    """The uid fallback withholds packages with an audit hook in the student's own process:
    student code must not be able to reach the hook (the garbage collector leads to it, and
    its code can then be swapped) nor change what it relies on (module attributes, builtins)."""
    import subprocess
    import sys

    withheld = tmp_path / "reference"
    withheld.mkdir()
    (withheld / "__init__.py").write_text("ANSWER = 42\n")
    programs = Path(sandbox_program("rules").__file__).parent
    run = subprocess.run([sys.executable, "-c", CONFINED, str(withheld), str(programs)],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:-1] == [
        "reading a file refused", "a link of one's own refused",
        "walking the garbage collector refused", "finding what refers to a folder refused",
        "after rewriting the hook's frame refused",
        "after replacing what the hook might use refused"], run.stdout
