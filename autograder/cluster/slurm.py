"""Slurm, as the grader uses it: submit a batch script, and ask what became of a job.

Only Slurm's own commands, in their machine-readable forms: ``sbatch --parsable``, ``scontrol
show job -o`` (the controller's view, while it keeps a job: ``MinJobAge``, five minutes by
default, after it ended) and ``sacct -P`` (the accounting database, for jobs the controller
has forgotten; some clusters have none). Options given to ``sbatch`` by an instructor are
checked here: each in its long form, never one the grader sets itself.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
                   "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})
"""Job states after which a job runs no more."""

OWNED = ("array", "dependency", "output", "error", "open-mode", "chdir", "parsable", "wrap")
"""sbatch options the grader sets itself: an instructor's value would break the run."""

ONCE = ("hold", "begin")
"""sbatch options of one submission, not of the run: given to the jobs submitted then, never
written into the scripts (a resubmission by --resume, or by hand, must not be held again)."""


@dataclass(frozen=True)
class Job:
    """One job, or one task of an array (``id`` "123_4", ``task`` 4), as Slurm reports it."""

    id: str
    state: str           # PENDING, RUNNING, COMPLETED, TIMEOUT, OUT_OF_MEMORY, ...
    exit_code: int = 0   # its exit status (0 when a signal ended it)
    signal: int = 0      # the signal that ended it, if one did
    task: int | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    def describe(self) -> str:
        how = f"signal {self.signal}" if self.signal else f"exit code {self.exit_code}"
        return f"{self.state} ({how})" if self.ended and self.state != "COMPLETED" else self.state


def missing() -> str:
    """Why Slurm's commands cannot be used here ('' when they can)."""
    absent = [c for c in ("sbatch", "scontrol") if shutil.which(c) is None]
    if absent:
        return (f"Slurm's commands are not here ({', '.join(absent)} not found): run this on "
                "a login node of the cluster, where sbatch works")
    return ""


def _run(command: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise RuntimeError(missing() or f"{command[0]} not found") from None


def submit(script, *options: str) -> str:
    """``sbatch --parsable [options] script``; the job id. RuntimeError with sbatch's reason
    (an unknown partition or account, a request the cluster refuses)."""
    done = _run(["sbatch", "--parsable", *options, str(script)])
    if done.returncode != 0:
        raise RuntimeError(f"sbatch refused {script}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip().split(";")[0]


def wait_for(script, *options: str) -> int:
    """Submit ``script`` with ``sbatch --wait`` and return the job's exit status once it ends
    (it may first wait in the queue)."""
    done = _run(["sbatch", "--wait", "--parsable", *options, str(script)])
    if done.returncode != 0 and not done.stdout.strip():
        raise RuntimeError(f"sbatch refused {script}: {done.stderr.strip()}")
    return done.returncode


_FIELD = re.compile(r"(?:^|\s)(JobId|ArrayJobId|ArrayTaskId|JobState|ExitCode)=(\S+)")


def jobs(ids: list[str]) -> dict[str, Job]:
    """What Slurm knows of the jobs ``ids`` (a job array's id gives all its tasks): job or task
    id -> ``Job``. Asks the controller first, then accounting for the ones it has forgotten;
    a job neither knows is left out."""
    found: dict[str, Job] = {}
    for job in ids:
        shown = _run(["scontrol", "show", "job", "-o", job])
        if shown.returncode == 0:
            for line in shown.stdout.splitlines():
                fields = dict(_FIELD.findall(line))
                if "JobId" in fields:
                    found.update(_from_fields(fields))
    forgotten = [job for job in ids if not any(k == job or k.startswith(f"{job}_")
                                                 for k in found)]
    if forgotten and shutil.which("sacct"):
        shown = _run(["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j",
                      ",".join(forgotten)])
        if shown.returncode == 0:
            for line in shown.stdout.splitlines():
                job_id, state, code = (line.split("|") + ["", "", ""])[:3]
                if job_id and "[" not in job_id:  # a pending range has no state of its own
                    task = job_id.partition("_")[2]
                    found[job_id] = _job(job_id, state, code,
                                         int(task) if task.isdigit() else None)
    return found


def _from_fields(fields: dict[str, str]) -> dict[str, Job]:
    task = fields.get("ArrayTaskId")
    if task is None:
        return {fields["JobId"]: _job(fields["JobId"], fields["JobState"],
                                      fields.get("ExitCode", "0:0"), None)}
    parent = fields.get("ArrayJobId", fields["JobId"])
    if task.isdigit():
        return {f"{parent}_{task}": _job(f"{parent}_{task}", fields["JobState"],
                                         fields.get("ExitCode", "0:0"), int(task))}
    # tasks not yet started share one record: "3-5,7", "1-9:2", "4-6%2"
    return {f"{parent}_{i}": Job(f"{parent}_{i}", fields["JobState"], task=i)
            for i in _indices(task.partition("%")[0])}


def _job(job_id: str, state: str, code: str, task: int | None) -> Job:
    status, _, signal = code.partition(":")
    return Job(job_id, state.split()[0] if state else "UNKNOWN",
               int(status) if status.isdigit() else 0, int(signal) if signal.isdigit() else 0,
               task)


def _indices(text: str) -> list[int]:
    """'1-3,7,9-13:2' -> [1, 2, 3, 7, 9, 11, 13]."""
    found = []
    for part in text.split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        found += range(int(first), int(last or first) + 1, int(step or 1))
    return found


def array_spec(indices: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3,7', as ``--array`` takes it."""
    parts, run = [], []
    for i in sorted(set(indices)):
        if run and i != run[-1] + 1:
            parts.append(run)
            run = []
        run.append(i)
    if run:
        parts.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in parts)


def options(given: list[str]) -> dict[str, str | None]:
    """An instructor's sbatch options (each ``--name=value`` or ``--flag``, several in one
    string allowed) -> {name: value or None}. ValueError for a short form, which cannot be told
    from its value here, and for an option the grader sets itself."""
    found: dict[str, str | None] = {}
    for text in given:
        for token in shlex.split(text):
            if not token.startswith("--") or len(token) < 3:
                raise ValueError(f"--sbatch options must be in sbatch's long form, "
                                 f"--name=value (e.g. --partition=short), got {token!r}")
            name, eq, value = token[2:].partition("=")
            if name in OWNED:
                raise ValueError(f"--sbatch={token}: the grader sets --{name} itself; "
                                 f"leave it out")
            found[name] = value if eq else None
    return found


def directives(values: dict[str, str | None]) -> list[str]:
    """``#SBATCH`` lines for {name: value or None}."""
    return [f"#SBATCH --{name}" + ("" if value is None else f"={value}")
            for name, value in values.items()]


def minutes(text: str) -> int:
    """A Slurm time ('90', '30:00', '1:30:00', '2-12', '2-12:30:00') in whole minutes, seconds
    rounded up."""
    days, dash, rest = text.strip().partition("-")
    if not dash:
        days, rest = "0", days
    try:
        parts = [int(p) for p in rest.split(":")]
        if dash:  # days-hours[:minutes[:seconds]]
            hours, mins, secs = (parts + [0, 0])[:3]
        else:  # minutes | minutes:seconds | hours:minutes:seconds
            hours, mins, secs = ([0, *parts, 0] if len(parts) == 1 else
                                 [0, *parts] if len(parts) == 2 else parts)
        return int(days) * 1440 + hours * 60 + mins + (1 if secs else 0)
    except ValueError:
        raise ValueError(f"--time must be a Slurm time such as 90, 1:30:00 or 1-00:00:00, "
                         f"got {text!r}") from None


def clock(total_minutes: int) -> str:
    """Minutes as Slurm's D-HH:MM:SS."""
    days, rest = divmod(int(total_minutes), 1440)
    return (f"{days}-" if days else "") + f"{rest // 60:02d}:{rest % 60:02d}:00"


def megabytes(text: str) -> int:
    """A Slurm memory size ('4G', '500M', '2048', '1T') in MB."""
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip().upper())
    if not match:
        raise ValueError(f"--mem must be a size such as 16G or 4000M, got {text!r}")
    number, unit = int(match.group(1)), match.group(2) or "M"
    return {"K": number // 1024, "M": number, "G": number * 1024, "T": number * 1024**2}[unit]
