"""The messages between grader and sandbox: one table of requests, anything else refused."""

import types

import pytest

from autograder import checks
from autograder.remote import Session
from autograder.runner import REQUESTS, Runner


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
    Runner(channel, checks, None).serve()
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
