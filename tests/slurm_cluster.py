"""A real one-node Slurm cluster on the loopback, for the tests of ``python -m autograder slurm``.

Debian's ``slurmctld``, ``slurmd``, ``slurm-client`` and ``munge`` (``.ci/run`` installs them),
started as root in the foreground from a temporary folder that holds everything they write:
munge's key (made here), socket, seed and log; ``slurm.conf`` with this machine's real CPU count
and memory (``slurmd -C``); the controller's state and the node's spool. Ports are free ones
picked at start, so two test runs on one host do not meet. Scheduling and accounting intervals
are short, so a job starts within a second and a task over its memory request is killed within
a second or two (``OverMemoryKill``: the node samples each job's memory, proportional set size,
every second, as clusters without cgroup enforcement do). No accounting database: ``sacct`` is
unavailable here, as on some clusters, so the grader falls back to ``scontrol``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

COMMANDS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue",
            "scontrol", "scancel")


def missing() -> str:
    """Why a cluster cannot start here ('' when it can)."""
    absent = [d for d in COMMANDS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if absent:
        return (f"Slurm is not installed ({', '.join(absent)} missing; Debian/Ubuntu: apt-get "
                "install slurmctld slurmd slurm-client munge, as .ci/run does)")
    if os.geteuid() != 0:
        return "a test cluster's slurmd must run as root"
    return ""


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line() -> str:
    """This machine as ``slurmd -C`` sees it: CPUs and RealMemory, real."""
    shown = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True,
                           check=True).stdout
    fields = dict(item.split("=", 1) for item in shown.split()[1:] if "=" in item)
    return f"CPUs={fields['CPUs']} RealMemory={fields['RealMemory']}"


@dataclass
class Cluster:
    folder: Path
    conf: Path
    node: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's commands need to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def stop(self) -> None:
        """Cancel what still runs on it (a job's steps outlive slurmd), then stop the daemons
        this cluster started, by pid, newest first."""
        env = {**os.environ, **self.env}
        if self.processes and all(p.poll() is None for p in self.processes):
            subprocess.run([_binary("scancel"), f"--user={os.geteuid()}"], env=env,
                           capture_output=True)
            end = time.monotonic() + 20
            while time.monotonic() < end and subprocess.run(
                    [_binary("squeue"), "-h", "-t", "PD,R,CG,S"], env=env, capture_output=True,
                    text=True).stdout.strip():
                time.sleep(0.5)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def start(folder: Path) -> Cluster:
    """Bring up munged, slurmctld and slurmd in ``folder``; return once the node is idle."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # munge's socket must be reachable; the key stays root's
    node = socket.gethostname().split(".")[0]
    munge = folder / "munge"
    munge.mkdir(mode=0o755)
    key = munge / "munge.key"
    subprocess.run([_binary("mungekey"), "--create", "--keyfile", str(key), "--bits", "1024"],
                   check=True, capture_output=True)
    sock = munge / "munge.socket"
    state, spool = folder / "state", folder / "spool"
    state.mkdir(), spool.mkdir()
    conf = folder / "slurm.conf"
    conf.write_text(f"""\
ClusterName=seqlabtest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={folder / 'slurmctld.pid'}
SlurmdPidFile={folder / 'slurmd.pid'}
SlurmctldLogFile={folder / 'slurmctld.log'}
SlurmdLogFile={folder / 'slurmd.log'}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=512
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill,UsePss
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
MaxArraySize=1001
NodeName={node} NodeAddr=127.0.0.1 {_node_line()} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
""")
    cluster = Cluster(folder, conf, node)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        for command in (
                [_binary("munged"), "--foreground", "--force", f"--socket={sock}",
                 f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}",
                 f"--seed-file={munge / 'munged.seed'}", f"--log-file={munge / 'munged.log'}"],
                [_binary("slurmctld"), "-D", "-i", "-f", str(conf)],
                [_binary("slurmd"), "-D", "-f", str(conf)]):
            log = open(folder / f"{Path(command[0]).name}.out", "w")
            cluster.processes.append(subprocess.Popen(command, env=env, stdout=log,
                                                      stderr=subprocess.STDOUT,
                                                      start_new_session=True))
            log.close()
            if command[0].endswith("munged"):
                _until(lambda: sock.exists(), "munged's socket", cluster)
        _until(lambda: _idle(env, node), "the node to become idle", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _idle(env: dict, node: str) -> bool:
    shown = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], env=env,
                           capture_output=True, text=True)
    return shown.returncode == 0 and shown.stdout.strip() == "idle"


def _until(ready, what: str, cluster: Cluster, seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while not ready():
        dead = [p.args[0] for p in cluster.processes if p.poll() is not None]
        if dead or time.monotonic() > end:
            logs = "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-1500:]}"
                             for f in sorted(cluster.folder.glob("*.out")) if f.stat().st_size)
            raise RuntimeError(f"the test cluster did not start: waiting for {what}; "
                               f"exited: {dead}\n{logs}")
        time.sleep(0.2)
