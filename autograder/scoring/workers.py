"""A pool of grading workers that no single submission can stop.

``concurrent.futures.ProcessPoolExecutor`` breaks for good when one worker dies, and has no way to
stop a job that hangs, so one bad submission (or one grader bug it triggers) could end the whole
class's run. Here each worker is a process of its own that takes one job at a time over a pipe.
A job whose worker raises anything (``SystemExit``, ``KeyboardInterrupt`` and other
``BaseException``s included), dies (killed, ``os._exit``, a crash in native code) or runs past its
deadline ends as a ``Failure`` for that job alone; the worker is replaced by a fresh one and the
other jobs go on. Workers ignore Ctrl-C: the instructor's interrupt reaches only the parent,
which stops every worker and lets ``KeyboardInterrupt`` propagate (rows already written stay).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any


@dataclass(frozen=True)
class Failure:
    """Why a job produced no result, in words an instructor can act on."""

    reason: str


def _serve(conn, index: int, setup: Callable | None, setup_args: tuple, run: Callable,
           teardown: Callable | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if setup is not None:
        setup(index, *setup_args)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:  # done: clean up, and skip the interpreter's teardown (with torch
            if teardown is not None:  # loaded it takes longer than the parent waits)
                teardown()
            os._exit(0)
        try:
            reply = ("ok", run(*job))
        except BaseException as exc:  # noqa: BLE001 - every way a job can fail is one row
            conn.send(("raised", f"{type(exc).__name__}: {str(exc)[:300]}"))
            return  # whatever it left behind dies with this process; a fresh one takes over
        try:
            conn.send(reply)
        except Exception as exc:  # a result that cannot be sent back
            conn.send(("raised", f"the result could not be sent back ({type(exc).__name__}: "
                                 f"{str(exc)[:200]})"))


class _Worker:
    def __init__(self, context, index, setup, setup_args, run, teardown):
        self.index = index
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve,
                                       args=(child, index, setup, setup_args, run, teardown),
                                       daemon=True)
        self.process.start()
        child.close()
        self.key: Any = None
        self.deadline = float("inf")

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def run_jobs(jobs: Iterable[tuple[Any, tuple]], run: Callable, workers: int, deadline: float,
             setup: Callable | None = None, setup_args: tuple = (),
             teardown: Callable | None = None, preload: tuple[str, ...] = (),
             on_failure: Callable[[Any, int], None] | None = None
             ) -> Iterator[tuple[Any, Any]]:
    """Run ``run(*args)`` for each ``(key, args)`` of ``jobs`` in ``workers`` processes; yield
    ``(key, result)`` as jobs finish, where ``result`` is ``run``'s value or a ``Failure``.

    ``setup(index, *setup_args)`` runs once in each new worker, ``index`` being its place in
    the pool (0 .. workers - 1; a replacement takes the place of the worker it replaces), and
    ``teardown()`` in each worker told it is no longer needed, before it exits. A job
    still running ``deadline`` seconds after it started is stopped (its worker is killed);
    ``on_failure(key, index)`` is called after a worker was killed or died with that job, to
    clean up what it left outside itself.
    ``run`` and its arguments must be picklable: workers are forked from multiprocessing's
    fork server, a fresh process (no threads, none of this one's state) that imported
    ``preload`` once, so each worker starts with those imports done.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))  # takes effect when the server starts
    pending = list(jobs)[::-1]
    pool = [_Worker(context, i, setup, setup_args, run, teardown)
            for i in range(min(workers, len(pending)))]
    try:
        while pending or any(w.key is not None for w in pool):
            for w in pool:
                if w.key is None and pending:
                    key, args = pending.pop()
                    w.conn.send(args)
                    w.key, w.deadline = key, time.monotonic() + deadline
            busy = [w for w in pool if w.key is not None]
            timeout = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout)
            for i, w in enumerate(pool):
                if w.key is None:
                    continue
                failure = None
                if w.conn in ready:
                    try:
                        kind, value = w.conn.recv()
                    except (EOFError, OSError):
                        kind, value = "died", None
                    if kind == "ok":
                        key, w.key = w.key, None
                        yield key, value
                        continue
                    failure = (f"the grading worker raised {value}" if kind == "raised" else
                               None)
                if failure is None and (w.process.sentinel in ready or w.conn in ready):
                    w.process.join(5)
                    failure = f"the grading worker died (exit code {w.process.exitcode})"
                elif failure is None and time.monotonic() >= w.deadline:
                    failure = (f"grading took longer than {deadline:g} s and was stopped "
                               "(the worker hung)")
                if failure is None:
                    continue
                key = w.key
                w.stop()
                if on_failure is not None:
                    on_failure(key, w.index)
                pool[i] = (_Worker(context, i, setup, setup_args, run, teardown) if pending
                           else w)
                w.key = None
                yield key, Failure(failure)
    finally:
        for w in pool:
            try:
                if w.process.is_alive() and w.key is None:
                    w.conn.send(None)
            except OSError:
                pass
        for w in pool:
            w.process.join(0.5 if w.key is None else 0)
            w.stop()
