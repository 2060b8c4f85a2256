"""The CPU time a sandbox's processes use, read by the grader from the kernel.

A cost check ("rnn_backward takes a few forward passes") must count the student's own work: not
wall time, which other programs on the machine stretch (an honest loop-based answer once lost
its point to a classmate's 200 busy processes), and not a number the runner sends back, which
student code in that process can rewrite. The kernel counts every process's CPU time outside
the sandbox, where the grader reads it:

- where the sandbox's cgroup accounts CPU (v2 ``cpu.stat``; v1 ``cpuacct.usage``, which the
  ``cpu`` folder has where the two controllers share a hierarchy), that count covers every
  process the sandbox ever ran, exactly (``exact``);
- otherwise the grader sums each process's user and system time from ``/proc`` (its threads and
  the children it waited for included; to the nanosecond where no thread ended meanwhile, else
  to a clock tick) over the sandbox's processes: those in its cgroup, else
  those of its uid, else the process tree the grader started. A process that ends without being
  waited for takes its time with it, so a watcher samples the sandbox's processes while the call
  runs and names every process besides those that were there before it (``others``): the cost
  of a call that ran one cannot be certified that way, nor that of a call during which one of
  the sandbox's processes ended.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
WATCH_SECONDS = 0.005  # between two looks at the sandbox's processes (without exact accounting)


@dataclass
class Usage:
    """What one metered call cost: CPU ``seconds`` of the sandbox's processes; whether the
    count is the cgroup's own (``exact``); the processes whose time it could not count
    (``others``, pids: any that started or ended during the call; always empty when
    ``exact``)."""

    seconds: float = 0.0
    exact: bool = False
    others: set[int] = field(default_factory=set)


def _cgroup_seconds(groups: dict[str, Path]) -> float | None:
    """The CPU seconds a cgroup of ``groups`` counted, or None where none accounts CPU."""
    for folder in groups.values():
        try:
            stat = (Path(folder) / "cpu.stat").read_text().split()
            if "usage_usec" in stat:
                return int(stat[stat.index("usage_usec") + 1]) / 1e6
        except (OSError, ValueError, IndexError):
            pass
        try:
            return int((Path(folder) / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            pass
    return None


def _stat(pid: int) -> tuple[float, int, float] | None:
    """Of process ``pid``: (its user and system CPU seconds, in clock ticks: its threads, ended
    ones too, and the children it waited for; when it started, in ticks since boot; the CPU
    seconds of its threads running now, to the nanosecond), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    fine = 0  # stays 0 where the kernel keeps no schedstat: the ticks count alone
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                fine += int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):  # a thread that ended meanwhile, or no schedstat
        pass
    fields = text[text.rindex(")") + 2:].split()  # from field 3 (state) on: comm may hold spaces
    return sum(int(f) for f in fields[11:15]) / TICK, int(fields[19]), fine / 1e9


def process_seconds(pid: int) -> float | None:
    """User and system CPU seconds of process ``pid`` so far, in clock ticks (``_stat``);
    None if it is gone."""
    stat = _stat(pid)
    return None if stat is None else stat[0]


def _real_uid(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _children(pid: int) -> list[int]:
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found += [int(p) for p in handle.read().split()]
    except OSError:
        pass
    return found


def members(groups: dict[str, Path], uid: int | None, root: int | None):
    """A function listing the sandbox's processes now: those in its cgroup (no process leaves a
    cgroup on its own), else those whose real uid is the sandbox's own (set once the runner has
    become that uid; the permissions of ``/proc/PID`` follow the effective uid and a process may
    make itself undumpable, so the status line decides), else ``root`` and its descendants."""
    for folder in groups.values():
        procs = Path(folder) / "cgroup.procs"
        if procs.exists():
            return lambda: {int(p) for p in procs.read_text().split()}
    if uid is not None:
        return lambda: {int(p) for p in os.listdir("/proc") if p.isdigit() and _real_uid(p) == uid}

    def tree():
        found, todo = set(), [root]
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo += _children(pid)
        return found

    return tree


class Meter:
    """Meter one call into a sandbox: ``with Meter(groups, uid, root) as usage: ...``, then
    ``usage`` holds what the sandbox's processes spent meanwhile (``Usage``)."""

    def __init__(self, groups: dict[str, Path], uid: int | None = None, root: int | None = None):
        self.groups, self.usage = groups, Usage()
        self.list = members(groups, uid, root)
        self.done = threading.Event()

    def __enter__(self) -> Usage:
        exact = _cgroup_seconds(self.groups)
        if exact is not None:
            self.usage.exact, self.start = True, exact
            return self.usage
        self.own = {pid: stat for pid in self.list() if (stat := _stat(pid)) is not None}
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()
        return self.usage

    def _watch(self) -> None:
        while True:
            began = time.perf_counter()
            try:
                self.usage.others |= self.list() - set(self.own)
            except OSError:  # the cgroup is gone: the sandbox ended
                return
            # a look through all of /proc (by uid) takes a few ms: at most a fifth of a core
            if self.done.wait(max(WATCH_SECONDS, 4 * (time.perf_counter() - began))):
                return

    def __exit__(self, *exc) -> None:
        if self.usage.exact:
            self.usage.seconds = max(0.0, (_cgroup_seconds(self.groups) or 0.0) - self.start)
            return
        self.done.set()
        self.watcher.join()
        ticks = fine = 0.0
        for pid, (ticks_before, started, fine_before) in self.own.items():
            stat = _stat(pid)
            if stat is None or stat[1] != started:  # it ended, perhaps taking its time along
                self.usage.others.add(pid)
            else:
                ticks, fine = ticks + stat[0] - ticks_before, fine + stat[2] - fine_before
        # the threads' own counts are exact but forget a thread that ended; the clock ticks
        # remember it, to a tick
        self.usage.seconds = max(0.0, ticks, fine)

