"""Cgroups for sandboxes: memory, process and CPU caps that hold for every process a sandbox
ever starts, where the host lets the grader create cgroups (v1 or v2); their removal, also of
those that killed grading runs left; and how many times one killed for memory."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CGROUP_V1 = Path("/sys/fs/cgroup")
CGROUP_PARENT = "seqlab-grader"
CPU_PERIOD_US = 100_000
CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")  # v1; cpuacct counts CPU time exactly


def make(name: str) -> dict[str, Path]:
    """Writable cgroup folders for one sandbox: {'memory': ..., 'pids': ...} and, where the
    host has them, {'cpu': ..., 'cpuacct': ...} (v1), or {'unified': ...} (v2), or {} when this
    host does not let us create them."""
    v1 = {c: CGROUP_V1 / c for c in CONTROLLERS}
    if all((v1[c] / "cgroup.procs").exists() for c in ("memory", "pids")):
        try:
            made = {}
            for controller, root in v1.items():
                if not (root / "cgroup.procs").exists():
                    continue  # no cpu controller: the CPU share is not enforced here
                folder = root / CGROUP_PARENT / name
                folder.mkdir(parents=True, exist_ok=True)
                made[controller] = folder
            return made
        except OSError:
            return {}
    v2 = CGROUP_V1 / CGROUP_PARENT
    try:
        controllers = set((CGROUP_V1 / "cgroup.controllers").read_text().split())
        if {"memory", "pids"} <= controllers:
            wanted = " ".join(f"+{c}" for c in ("memory", "pids", "cpu") if c in controllers)
            v2.mkdir(exist_ok=True)
            (CGROUP_V1 / "cgroup.subtree_control").write_text(wanted)
            (v2 / "cgroup.subtree_control").write_text(wanted)
            folder = v2 / name
            folder.mkdir(exist_ok=True)
            return {"unified": folder}
    except OSError:
        pass
    return {}


def limit_cpu(folder: Path, cpus: float, unified: bool) -> bool:
    """Cap the CPU time of everything in the cgroup at ``cpus`` cores (CFS bandwidth: quota
    per period); False where this cgroup cannot (v2 without the cpu controller)."""
    quota = max(1000, int(cpus * CPU_PERIOD_US))
    if unified:
        control = folder / "cpu.max"
        if not control.exists():
            return False
        control.write_text(f"{quota} {CPU_PERIOD_US}")
        return True
    (folder / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
    (folder / "cpu.cfs_quota_us").write_text(str(quota))
    return True


def limit_memory(folder: Path, limit: int, unified: bool) -> None:
    """Cap memory, swap included, at ``limit`` bytes.

    cgroup v1 refuses (EINVAL) a memory limit above the memory+swap limit and a memory+swap
    limit below the memory limit, so the order of the two writes depends on which way the
    folder's current values move; writing the one that fails second makes both hold.
    """
    if unified:
        (folder / "memory.max").write_text(str(limit))
        swap = folder / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")
        return
    memory, swap = folder / "memory.limit_in_bytes", folder / "memory.memsw.limit_in_bytes"
    if not swap.exists():  # the host has no swap accounting
        memory.write_text(str(limit))
        return
    try:
        memory.write_text(str(limit))
    except OSError:  # memsw (lower, from an earlier run) must move first
        swap.write_text(str(limit))
        memory.write_text(str(limit))
    else:
        swap.write_text(str(limit))


def empty_and_remove(folder: Path, wait: float = 5.0) -> None:
    """Kill what is left in a cgroup and remove it; killed processes leave it a moment later."""
    deadline = time.monotonic() + wait
    while True:
        try:
            pids = (folder / "cgroup.procs").read_text().split()
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            folder.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)


def remove_stale() -> None:
    """Remove the cgroups of grading runs that died before they could (killed): cgroups outlive
    their processes. Grading names its sandboxes' "<process id of the run>-...": a folder whose
    run no longer exists is stale (its processes, if any are left, are killed)."""
    for parent in (*(CGROUP_V1 / c / CGROUP_PARENT for c in CONTROLLERS),
                   CGROUP_V1 / CGROUP_PARENT):
        try:
            folders = [f for f in parent.iterdir() if f.is_dir()]
        except OSError:
            continue
        for folder in folders:
            run = folder.name.split("-")[0]
            if run.isdigit() and not _running(int(run)):
                empty_and_remove(folder)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def oom_kills(groups: dict[str, Path]) -> int:
    """How many times the memory cgroup in ``groups`` killed for memory (on old kernels: hit
    its limit); 0 without one."""
    for controller, folder in groups.items():
        try:
            if controller == "memory":  # oom_kill counts kills; failcnt (old kernels)
                control = (folder / "memory.oom_control").read_text().split()
                return (int(control[control.index("oom_kill") + 1]) if "oom_kill" in control
                        else int((folder / "memory.failcnt").read_text()))
            if controller == "unified":
                events = (folder / "memory.events").read_text().split()
                return int(events[events.index("oom_kill") + 1])
        except (OSError, ValueError):
            pass
    return 0


def all_sandboxes_cpu_seconds() -> float | None:
    """The CPU seconds every sandbox on this host has used, those already removed included (a
    cgroup's count holds its descendants'): read around a grading run, it gives what the
    run's sandboxes cost, which their parent's rusage never sees. None where no cgroup of ours
    accounts CPU."""
    for folder in (CGROUP_V1 / CGROUP_PARENT, CGROUP_V1 / "cpuacct" / CGROUP_PARENT):
        try:
            stat = (folder / "cpu.stat").read_text().split()
            if "usage_usec" in stat:
                return int(stat[stat.index("usage_usec") + 1]) / 1e6
        except (OSError, ValueError, IndexError):
            pass
        try:
            return int((folder / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            pass
    return None


def remove(name: str) -> None:
    """Remove the cgroups of the sandbox ``name`` (killing what is left in them)."""
    for folder in (*(CGROUP_V1 / c / CGROUP_PARENT / name for c in CONTROLLERS),
                   CGROUP_V1 / CGROUP_PARENT / name):
        if folder.is_dir():
            empty_and_remove(folder)
