"""Jobs that fail in every way a grading worker can, for the worker pool's tests (importable by
name: the pool's workers are forked from a fork server, which imports it by name)."""

import faulthandler
import os
import signal
import time


class Custom(BaseException):
    pass


def job(kind: str) -> str:
    if kind == "exit":
        raise SystemExit(3)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "base":
        raise Custom("not an Exception")
    if kind == "error":
        raise ValueError("a grader bug")
    if kind == "os_exit":
        os._exit(7)
    if kind == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "segfault":
        faulthandler.disable()
        faulthandler._sigsegv()
    if kind == "hang":
        time.sleep(600)
    if kind == "unpicklable":
        return lambda: None
    return f"graded {kind}"
