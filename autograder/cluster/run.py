"""``python -m autograder slurm``: a whole course graded as one Slurm job array and a merge.

``start`` stages the LMS export once on the shared file system (the output folder), writes the
batch scripts into it and submits them: an array of N tasks, task i grading shard i/N (``grade
--shard``) into ``shards/i``, and a merge that runs once every task has ended, whatever their
exit codes (``--dependency=afterany``: with ``afterok`` a merge waits forever once one task
fails). A task the scheduler stops (its time limit, its memory, ``scancel``, a node failure,
preemption) costs its own students' rows only: the merge writes every other row and gives each
of them a row with status ``ungraded`` saying so, and ``resume`` grades just those shards
again, where they stopped, and merges again. ``follow`` waits with a progress bar over graded
students (each shard's grades.csv is rewritten after every student) and returns the merge's
exit status. ``check`` runs ``doctor`` on a compute node first.

The output folder::

    slurm.json            what was submitted: resume and follow read it
    export.zip|export/    the LMS export as staged (a late policy, LMS times beside it)
    slurm/grade.sbatch    the array: read it, or submit by hand with slurm/submit.sh
    slurm/merge.sbatch    the merge
    slurm/submit.sh       both, the merge after the array (afterany)
    slurm/logs/           each task's log (grade-<i>.log) and the merge's (merge.log)
    shards/<i>/           task i's grading output
    graded/               the merged output: grades.csv, feedback/, course/, similarity.*
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..course import check_assignment
from ..intake.submissions import collect
from ..scoring.grade import in_shard, read_grades
from . import costs, slurm

STATE = "slurm.json"
ADMIN = (
    "What a cluster's administrators can do: install bubblewrap on the compute nodes and allow "
    "unprivileged user namespaces there (sysctl user.max_user_namespaces > 0; on Debian and "
    "older Ubuntu kernels also kernel.unprivileged_userns_clone=1; on Ubuntu 23.10 and later "
    "an AppArmor profile that lets /usr/bin/bwrap create them, or "
    "kernel.apparmor_restrict_unprivileged_userns=0). Grading then runs each submission in "
    "bubblewrap as the instructor's own user. The uid fallback needs root and is for "
    "containers (Docker, Gradescope), never for a cluster's jobs.")


@dataclass
class Run:
    """One course graded on Slurm: what ``start`` submitted, kept in ``OUT/slurm.json``."""

    assignment: str
    out: str
    tasks: int
    workers: int
    students: int
    request: dict                  # costs.Request of a grading task, as submitted
    options: dict                  # the instructor's sbatch options
    submissions: list[dict] = field(default_factory=list)  # {array, tasks, merge, at}

    @property
    def folder(self) -> Path:
        return Path(self.out)

    def save(self) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".slurm", suffix=".json")
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(asdict(self), indent=1))
        os.replace(tmp, self.folder / STATE)


def load(out: Path) -> Run:
    path = Path(out) / STATE
    if not path.exists():
        raise ValueError(f"{out} holds no Slurm run ({STATE} is missing): pass the --out of "
                         "an earlier `python -m autograder slurm`")
    return Run(**json.loads(path.read_text()))


def shard_folder(out: Path, index: int) -> Path:
    return Path(out) / "shards" / str(index)


def stage(export: Path, out: Path) -> Path:
    """Copy the export into ``out`` once, where every task reads it (a zip is one file on the
    shared file system; a folder keeps its files' times, which late penalties may use)."""
    export = Path(export)
    if not export.exists():
        raise ValueError(f"submissions {export} does not exist")
    if export.is_dir():
        staged = out / "export"
        shutil.copytree(export, staged, symlinks=True)
    else:
        staged = out / f"export{''.join(export.suffixes[-1:]) or '.zip'}"
        shutil.copy2(export, staged)
    return staged


def _script(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _quoted(parts) -> str:
    return " ".join(shlex.quote(str(p)) for p in parts)


def write_scripts(run: Run, course: Path, staged: Path, grade_flags: list[str],
                  merge_mb: int, merge_minutes: int) -> None:
    """grade.sbatch, merge.sbatch and submit.sh in ``OUT/slurm``, to read or submit by hand."""
    out, folder = run.folder, run.folder / "slurm"
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    python = [sys.executable, "-m", "autograder", "--course", course.resolve()]
    # the environment's tools first, as activating it would (nbgrader runs alembic)
    venv_path = f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"'
    request = costs.Request(**run.request)
    grading = {"job-name": f"grade-{run.assignment}", "cpus-per-task": str(request.cpus),
               "mem": f"{request.mem_mb}M", "time": slurm.clock(request.minutes)}
    if "mem-per-cpu" in run.options:
        grading.pop("mem")
    (folder / "grade.sbatch").write_text(_script([
        "#!/bin/bash",
        f"# {run.assignment}, {run.students} student(s) in {run.tasks} task(s): task I grades "
        f"shard I/{run.tasks} into shards/I",
        f"# with {run.workers} worker(s) (grades.csv there is rewritten after every student).",
        f"# Requests: {request.describe()}.",
        "# Written by `python -m autograder slurm`; submit with submit.sh, or one stopped task",
        "# again with `sbatch --array=I grade.sbatch` (it resumes where it stopped).",
        f"#SBATCH --array=1-{run.tasks}",
        *slurm.directives({**grading, **run.options}),
        f"#SBATCH --output={folder / 'logs' / 'grade-%a.log'}",
        "#SBATCH --open-mode=append",
        f"#SBATCH --chdir={out}",
        "set -eu",
        venv_path,
        'echo "== task $SLURM_ARRAY_TASK_ID ($SLURM_JOB_ID) on $(hostname), '
        '$(date -u "+%F %T") UTC"',
        f"exec {_quoted(python)} grade {shlex.quote(run.assignment)} --submissions "
        f"{shlex.quote(str(staged))} \\",
        f"    --out {shlex.quote(str(out / 'shards'))}/$SLURM_ARRAY_TASK_ID "
        f"--shard $SLURM_ARRAY_TASK_ID/{run.tasks} --workers {run.workers} "
        f"{_quoted(grade_flags)}"]))
    merging = {"job-name": f"merge-{run.assignment}", "cpus-per-task": "1",
               "mem": f"{merge_mb}M", "time": slurm.clock(merge_minutes)}
    resume = f"python -m autograder slurm --resume {shlex.quote(str(out))}"
    (folder / "merge.sbatch").write_text(_script([
        "#!/bin/bash",
        f"# Joins the {run.tasks} shard(s) into graded/ once every grading task has ended, "
        "whatever its exit code",
        "# (submit.sh passes --dependency=afterany:<the array's id>). Students of a stopped "
        "task get",
        "# a row with status `ungraded` and the merge exits 1: resume with",
        f"#   {resume}",
        *slurm.directives({**merging, **{k: v for k, v in run.options.items()
                                         if k not in ("mem", "mem-per-cpu", "time",
                                                      "cpus-per-task")}}),
        f"#SBATCH --output={folder / 'logs' / 'merge.log'}",
        "#SBATCH --open-mode=append",
        f"#SBATCH --chdir={out}",
        "set -eu",
        venv_path,
        'echo "== merge ($SLURM_JOB_ID) on $(hostname), $(date -u "+%F %T") UTC"',
        f"shards=(); for i in $(seq 1 {run.tasks}); do shards+=("
        f"{shlex.quote(str(out / 'shards'))}/$i); done",
        f'exec {_quoted(python)} merge "${{shards[@]}}" --out '
        f"{shlex.quote(str(out / 'graded'))} --resume-with {shlex.quote(resume)}"]))
    (folder / "submit.sh").write_text(_script([
        "#!/bin/bash",
        "# Submit the grading array, then the merge once every task has ended (afterany).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        "array=$(sbatch --parsable grade.sbatch)",
        "array=${array%%;*}",
        "merge=$(sbatch --parsable --dependency=afterany:$array merge.sbatch)",
        'echo "grading: job array $array; merge: job ${merge%%;*}"',
        'echo "follow: squeue -j $array,${merge%%;*}"']))
    (folder / "submit.sh").chmod(0o755)


def _grade_flags(limits, staged_policy: Path | None, staged_times: Path | None,
                 unsafe: bool, memory_cap_mb: int) -> list[str]:
    flags = ["--timeout-cell", f"{limits.timeout_cell:g}", "--timeout-notebook",
             f"{limits.timeout_notebook:g}", "--memory-mb", str(memory_cap_mb), "--max-procs",
             str(limits.max_procs)]
    if staged_policy:
        flags += ["--late-policy", str(staged_policy)]
    if staged_times:
        flags += ["--timestamps", str(staged_times)]
    if unsafe:
        flags.append("--unsafe-no-sandbox")
    return flags


def start(assignment: str, submissions: Path, out: Path, tasks: int, course: Path, limits, *,
          workers: int = 4, sbatch: list[str] = (), late_policy: Path | None = None,
          timestamps: Path | None = None, unsafe: bool = False, check_first: bool = False,
          log=print) -> Run:
    """Stage the export, write the scripts into ``out``, submit the array and the merge."""
    if slurm.missing():
        raise RuntimeError(slurm.missing())
    check_assignment(assignment, course)
    for name, value in (("tasks", tasks), ("workers_per_task", workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    out = Path(out).resolve()
    if (out / STATE).exists():
        raise ValueError(f"{out} already holds a Slurm run: follow it with `slurm --follow "
                         f"{out}`, resume it with `slurm --resume {out}`, or choose another "
                         "--out")
    options = slurm.options(list(sbatch))
    once = [f"--{k}" + ("" if v is None else f"={v}") for k, v in options.items()
            if k in slurm.ONCE]
    options = {k: v for k, v in options.items() if k not in slurm.ONCE}
    with tempfile.TemporaryDirectory() as tmp:  # a bad export fails here, before any job
        students = [s.student_id for s in collect(Path(submissions), assignment, Path(tmp))]
    if tasks > len(students):
        log(f"{len(students)} student(s): {tasks} tasks would leave some empty; using "
            f"{len(students)}")
        tasks = len(students)
    largest = max(sum(in_shard(s, (i, tasks)) for s in students) for i in range(1, tasks + 1))
    mem = options.get("mem")
    if "mem-per-cpu" in options:
        mem = f"{slurm.megabytes(options['mem-per-cpu'] or '') * workers}M"
    request = costs.request(assignment, largest, workers, limits.memory_mb,
                            limits.timeout_notebook, len(students),
                            slurm.megabytes(mem) if mem else None)
    if request.memory_cap_mb < limits.memory_mb:
        log(f"each submission is capped at {request.memory_cap_mb} MB (not "
            f"{limits.memory_mb}), what --mem leaves each of {workers} worker(s)")
    out.mkdir(parents=True, exist_ok=True)
    if check_first:
        ok, report = check(course, limits, sbatch, out / "slurm", log=log)
        if not ok:
            raise RuntimeError(f"not submitted: grading would refuse on the compute node.\n"
                               f"{report}")
    staged = stage(Path(submissions), out)
    policy = times = None
    if late_policy is not None and Path(late_policy).exists():
        policy = out / "late_policy.toml"
        shutil.copy2(late_policy, policy)
    if timestamps is not None:
        times = out / "timestamps.csv"
        shutil.copy2(timestamps, times)
    run = Run(assignment, str(out), tasks, workers, len(students), asdict(request), options)
    write_scripts(run, Path(course), staged,
                  _grade_flags(limits, policy, times, unsafe, request.memory_cap_mb),
                  costs.GRADER_MB + 1024, costs.merge_minutes(len(students)))
    log(f"{assignment}: {len(students)} student(s) in {tasks} task(s) of {workers} worker(s), "
        f"the largest {largest}; each task asks for {request.describe()}")
    submit(run, list(range(1, tasks + 1)), once, log=log)
    return run


def submit(run: Run, indices: list[int], extra: list[str] = (), log=print) -> None:
    """Submit the tasks ``indices`` of the array (none: the merge alone), then the merge after
    them; record both in ``slurm.json`` as soon as each is accepted."""
    folder = run.folder / "slurm"
    extra = [f"--{k}" + ("" if v is None else f"={v}")
             for k, v in slurm.options(list(extra)).items()]
    entry = {"array": None, "tasks": slurm.array_spec(indices), "merge": None,
             "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    run.submissions.append(entry)
    if indices:
        entry["array"] = slurm.submit(folder / "grade.sbatch", f"--array={entry['tasks']}",
                                      *extra)
        run.save()
    after = [f"--dependency=afterany:{entry['array']}"] if indices else []
    once = [t for t in extra if t[2:].partition("=")[0] in slurm.ONCE]  # --hold: both jobs
    entry["merge"] = slurm.submit(folder / "merge.sbatch", *after, *once)
    run.save()
    jobs = ",".join(j for j in (entry["array"], entry["merge"]) if j)
    log(f"submitted: grading array {entry['array']} (tasks {entry['tasks'] or 'none'}), "
        f"merge {entry['merge']} (after every task has ended, whatever its exit code)"
        if indices else f"submitted: merge {entry['merge']}")
    log(f"follow: python -m autograder slurm --follow {shlex.quote(str(run.folder))}   "
        f"(or: squeue -j {jobs})")


def graded_count(run: Run, cache: dict) -> int:
    """Rows written so far in every shard (each grades.csv read again only once it changed)."""
    total = 0
    for i in range(1, run.tasks + 1):
        path = shard_folder(run.folder, i) / "grades.csv"
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            continue
        if cache.get(i, (None,))[0] != stamp:
            cache[i] = (stamp, len(read_grades(path)))
        total += cache[i][1]
    return total


def follow(out: Path, poll: float = 15, log=print, progress: bool = True) -> int:
    """Wait for the last submission of the run in ``out``, with a progress bar over graded
    students; report each task that did not complete and every ungraded student; return the
    merge's exit status."""
    from tqdm.auto import tqdm

    run = load(out)
    entry = run.submissions[-1]
    cache: dict = {}
    bar = tqdm(total=run.students, initial=graded_count(run, cache), unit="student",
               desc=f"grading {run.assignment}", disable=not progress)
    unknown = 0
    try:
        while True:
            merge = slurm.jobs([entry["merge"]]).get(entry["merge"])
            bar.update(graded_count(run, cache) - bar.n)
            if merge is not None and merge.ended:
                break
            unknown = unknown + 1 if merge is None else 0
            if unknown >= 3:
                bar.close()
                log(f"Slurm does not know the merge job {entry['merge']} (any more); its log "
                    f"is {run.folder / 'slurm' / 'logs' / 'merge.log'}")
                return 1
            time.sleep(poll)
    except KeyboardInterrupt:
        bar.close()
        log(f"stopped following; the jobs go on: python -m autograder slurm --follow "
            f"{shlex.quote(str(run.folder))}")
        raise
    bar.close()
    report(run, entry, log)
    if merge.state == "COMPLETED" or (merge.state == "FAILED" and merge.exit_code):
        return merge.exit_code
    return 128 + merge.signal if merge.signal else 1


def report(run: Run, entry: dict, log=print) -> None:
    """Each task of ``entry`` that did not complete (with its log's last line), and the merged
    output: its students by status, and how to resume the ungraded ones."""
    tasks = slurm.jobs([entry["array"]]) if entry["array"] else {}
    stopped = sorted((job for job in tasks.values() if job.state != "COMPLETED"),
                     key=lambda job: job.task or 0)
    over_memory = set()
    for job in stopped:
        last = _last_line(run, job.task)
        # cgroups end such a task OUT_OF_MEMORY; a node that samples memory kills it instead
        if job.state == "OUT_OF_MEMORY" or "memory limit" in last:
            over_memory.add(job.task)
        log(f"task {job.task}: {job.describe()}"
            + (", over its memory request" if job.task in over_memory else "") + f"; {last}")
    rows = read_grades(run.folder / "graded" / "grades.csv")
    if not rows:
        log(f"no merged output; see {run.folder / 'slurm' / 'logs' / 'merge.log'}")
        return
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    log(f"{len(rows)} student(s) in {run.folder / 'graded' / 'grades.csv'}: "
        + ", ".join(f"{n} {status}" for status, n in counts.items()))
    ungraded = [r["student_id"] for r in rows if r["status"] == "ungraded"]
    if ungraded:
        advice = []
        current = costs.Request(**run.request)
        if any(job.state == "TIMEOUT" for job in stopped):
            time_now = slurm.minutes(run.options["time"]) if run.options.get("time") \
                else current.minutes
            advice.append(f"--sbatch=--time={slurm.clock(2 * time_now)}")
        if over_memory:
            mem_now = slurm.megabytes(run.options["mem"]) if run.options.get("mem") \
                else current.mem_mb
            advice.append(f"--sbatch=--mem={2 * mem_now}M")
        log(f"{len(ungraded)} student(s) not graded, their task stopped: "
            f"{', '.join(ungraded[:20])}{' ...' if len(ungraded) > 20 else ''}")
        log(f"resume: python -m autograder slurm --resume {shlex.quote(str(run.folder))}"
            + (f" {' '.join(advice)}   (these tasks ran out of time or memory)"
               if advice else ""))


def _last_line(run: Run, task: int | None) -> str:
    path = run.folder / "slurm" / "logs" / f"grade-{task}.log"
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return f"no log ({path})"
    return f"its log ends: {lines[-1][:300]}" if lines else f"its log is empty ({path})"


def shards_to_grade(run: Run) -> list[int]:
    """The shards whose run did not finish (killed, or never started)."""
    todo = []
    for i in range(1, run.tasks + 1):
        manifest = shard_folder(run.folder, i) / "manifest.json"
        if not manifest.exists() or not json.loads(manifest.read_text()).get("finished"):
            todo.append(i)
    return todo


def resume(out: Path, sbatch: list[str] = (), log=print) -> Run | None:
    """Submit again just the shards whose run did not finish, then the merge; None when
    nothing is left to do. Refuses while the last submission still runs."""
    if slurm.missing():
        raise RuntimeError(slurm.missing())
    run = load(out)
    entry = run.submissions[-1]
    known = slurm.jobs([j for j in (entry["array"], entry["merge"]) if j])
    running = [job.id for job in known.values() if not job.ended]
    if running:
        raise ValueError(f"the run in {out} is still going ({', '.join(running)}): follow it "
                         f"with `slurm --follow {out}`, or scancel it first")
    todo = shards_to_grade(run)
    merged = read_grades(run.folder / "graded" / "grades.csv")
    if not todo and merged and all(r["status"] != "ungraded" for r in merged):
        log(f"nothing to resume: every student is graded in {run.folder / 'graded'}")
        return None
    if todo:
        log(f"resuming shard(s) {slurm.array_spec(todo)} of {run.tasks}: each grades the "
            "students it had not finished")
    else:
        log("every shard finished; merging again")
    submit(run, todo, list(sbatch), log=log)
    return run


def check(course: Path, limits, sbatch: list[str] = (), folder: Path | None = None,
          log=print) -> tuple[bool, str]:
    """Run ``doctor`` as a one-task job with the instructor's options (partition, account):
    (whether grading would go ahead on that node, what it reported)."""
    if slurm.missing():
        raise RuntimeError(slurm.missing())
    options = slurm.options(list(sbatch))
    made = folder is None
    folder = Path(tempfile.mkdtemp(prefix=".slurm-check-", dir=Path.cwd()) if made
                  else folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        script, output = folder / "check.sbatch", folder / "check.log"
        output.unlink(missing_ok=True)
        doctor = [sys.executable, "-m", "autograder", "--course", Path(course).resolve(),
                  "doctor", "--timeout-cell", f"{limits.timeout_cell:g}",
                  "--timeout-notebook", f"{limits.timeout_notebook:g}",
                  "--memory-mb", str(limits.memory_mb), "--max-procs", str(limits.max_procs)]
        script.write_text(_script([
            "#!/bin/bash",
            "# What isolation grading would use on a compute node (written by `python -m "
            "autograder slurm --check`).",
            *slurm.directives({"job-name": "grading-check", "ntasks": "1",
                               "cpus-per-task": "1", "mem": f"{costs.GRADER_MB + 1024}M",
                               "time": slurm.clock(costs.MIN_MINUTES), **options}),
            f"#SBATCH --output={output}",
            'echo "node: $(hostname)"',
            f"exec {_quoted(doctor)}"]))
        log("checking a compute node (a one-task job; it may wait in the queue) ...")
        status = slurm.wait_for(script)
        text = output.read_text(errors="replace").strip() if output.exists() else ""
    finally:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
    if status == 0:
        return True, text
    if "isolation:" not in text:  # doctor did not even start
        text += (f"\n(the job exited with status {status} before doctor reported: is this "
                 f"checkout, with {sys.executable}, on storage the compute nodes share?)")
    return False, f"{text}\n{ADMIN}"
