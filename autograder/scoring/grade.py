"""Grade every submission of an assignment; every submission ends as exactly one row.

Submissions are graded concurrently by a pool of worker processes. Each worker starts one
sandbox per submission for the student's code and runs the hidden tests itself (see execute.py);
workers never run student code, and only this process writes grades: grades.csv (rewritten
atomically after every student, so an interrupted run keeps what it has), feedback/<student>/,
the autograded notebook for formgrader, and nbgrader's gradebook (so ``nbgrader export`` agrees).
At the end it writes the similarity report (similarity.py) and the ``flags`` column it gives.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..course import COURSE, check_assignment, generate, working_course
from ..intake.late import LatePolicy, load_timestamps
from ..intake.normalize import (
    fingerprint,
    manual,
    master_step,
    plan,
    read_notebook,
)
from ..intake.submissions import collect
from ..isolation.kinds import UID, Isolation
from ..isolation.limits import Limits
from ..isolation.sandbox import Sandbox
from ..isolation.session import START_SECONDS
from . import gradebook, similarity
from .feedback import write_feedback
from .graded_copy import MARKDOWN
from .handgrading import apply, cells_of, sync, totals
from .prepare import Prepared, prepare_grading
from .results import Result, Status, clip
from .spreadsheet import write_csv
from .workers import Failure, run_jobs

WORKER_NICENESS = 5
COLUMNS = ("student_id", "name", "assignment", "score", "max_score", "auto_score",
           "manual_score", "needs_manual", "status", "message", "flags", "tests_version")

class _Worker:
    """A grading worker's sandboxes: each submission gets a sandbox of its own, never used for
    a second one. Where the sandbox forks each submission's runner from this worker's template
    (``Sandbox.forks``: the template imported torch once), a child starts in milliseconds.
    Elsewhere each starts Python, IPython and torch anew, about as long as grading a short
    notebook, so the next one starts while this one is graded. Either way two per worker exist
    at most, and their names (cgroups, uids) alternate between two per worker."""

    sandbox: Sandbox | None = None
    uids: tuple[int, ...] = ()  # the two this worker's sandboxes take in turn, where needed
    run = 0  # the grading process's id, which names this run's sandboxes
    index = 0
    started = 0
    ahead = None

    @classmethod
    def setup(cls, index: int, run: int, support: str, limits: Limits, isolation: Isolation,
              withhold: tuple[str, ...], refuse_attention: bool,
              preload: tuple[str, ...], master: dict, uids: tuple[int, ...]) -> None:
        cls.index, cls.run, cls.master = index, run, master
        cls.uids = uids[2 * index:2 * index + 2]  # this worker's two, in turn
        # the run's own work (generate_assignment, the similarity report, the gradebook) goes
        # first when the cores are busy: done beside the grading, it is not left for the end
        os.nice(WORKER_NICENESS)
        cls.sandbox = Sandbox(Path(support), limits, isolation, write=False, withhold=withhold,
                              refuse_attention=refuse_attention, preload=preload)
        cls.sandbox.template_name = template_name(run, index)
        try:  # ahead of need; on a crowded machine the first submission starts it again
            cls.ahead = cls.start()
        except Exception:
            cls.ahead = None

    @classmethod
    def start(cls):
        cls.started += 1
        return cls.sandbox.start(f"{cls.run}-{2 * cls.index + cls.started % 2}",
                                 cls.uids[cls.started % 2] if cls.uids else None)

    @classmethod
    def teardown(cls) -> None:
        """The worker is done: stop the sandbox it started ahead, if any, and its template."""
        if cls.ahead is not None:
            cls.sandbox.stop(cls.ahead)
            cls.ahead = None
        cls.sandbox.close_template()

    @classmethod
    def grade(cls, notebook: str) -> dict:
        """Everything done with one student's notebook, here and not in the process that
        writes every student's grades: read and plan it (``{"problem": why}`` if it cannot be
        graded), grade it, and build its graded copy (``{"result": ..., "graded": json}``)."""
        from .execute import grade_steps
        from .graded_copy import graded_notebook

        try:
            steps = plan(cls.master, read_notebook(Path(notebook)))
        except ValueError as err:
            return {"problem": str(err)}
        box, cls.ahead = cls.ahead or cls.start(), None
        if not cls.sandbox.forks:
            cls.ahead = cls.start()  # the next submission's, while this one is graded
        result = grade_steps(steps, cls.sandbox, box)
        graded = graded_notebook(steps, result.pop("outputs"), cls.master["metadata"])
        return {"result": result, "graded": graded}


def template_name(run: int, index: int) -> str:
    """The name of grading worker ``index``'s template (cgroups, scratch folder) in run ``run``."""
    return f"{run}-template{index}"


def _grade_one(notebook: str) -> dict:
    return _Worker.grade(notebook)


def write_grades(path: Path, rows: list[dict]) -> None:
    """grades.csv, as a whole, each cell data (``spreadsheet``: never a formula)."""
    write_csv(path, COLUMNS, rows)


def read_grades(path: Path) -> list[dict]:
    """The rows of a grades.csv as written (strings), in file order; [] when there is none."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def settled_rows(out: Path, assignment: str) -> list[dict]:
    """The rows of ``out/grades.csv`` that are final. All of them when the run that wrote them
    finished. After an interrupted run (Ctrl-C, a scheduler's time limit or ``scancel``, a
    killed task), only rows whose copy in the gradebook was written, and ungradable ones (they
    have none): a row written just before the interruption may lack its copy, and a grader
    failure it records may be the interruption itself (its worker killed with it)."""
    rows = read_grades(Path(out) / "grades.csv")
    manifest = Path(out) / "manifest.json"
    if not rows or not manifest.exists() or json.loads(manifest.read_text()).get("finished",
                                                                                   True):
        return rows
    recorded = gradebook.students(Path(out) / "course", assignment)
    return [r for r in rows if r["status"] == Status.UNGRADABLE
            or (r["status"] != Status.ERROR and r["student_id"] in recorded)]


def in_shard(student_id: str, shard: tuple[int, int] | None) -> bool:
    """Whether ``student_id`` belongs to shard I of N (1-based): a hash, so every machine
    agrees without talking to the others, and a student stays in the same shard."""
    if shard is None:
        return True
    index, count = shard
    digest = hashlib.sha256(student_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count == index - 1


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' -> (I, N) with 1 <= I <= N."""
    try:
        index, count = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ValueError(f"shard must look like I/N (e.g. 2/8), got {text!r}") from None
    if not 1 <= index <= count:
        raise ValueError(f"shard {text!r}: need 1 <= I <= N")
    return index, count


def _lost(tests: list[dict]) -> str:
    """One sentence naming every test that lost points and why (never a hidden test's code)."""
    failed = [t for t in tests if t["points"] < t["max_points"]]
    if not failed:
        return ""
    lost = sum(t["max_points"] - t["points"] for t in failed)
    reasons = "; ".join(clip(f"{t['test']}: {t['message'] or 'failed'}", 200) for t in failed)
    return clip(f"Lost {lost:g} point(s): {reasons}", 1500)


class _Run:
    """Bookkeeping for one grading run: rows in submission order, written after each result.

    nbgrader's ``generate_assignment`` (the gradebook's assignment and its cells) runs
    while the first submissions are graded (``generated``, a future): each
    graded student's row and feedback are written at once, and their copy in the nbgrader
    course (submitted and autograded notebooks, gradebook) as soon as it exists."""

    def __init__(self, assignment, out, work, max_score, generated, policy, timestamps, log,
                 previous: list[dict]):
        self.assignment, self.out, self.work = assignment, out, work
        self.max_score, self.generated, self.policy = max_score, generated, policy
        self.timestamps, self.log = timestamps, log
        self.previous = {r["student_id"]: r for r in previous}  # kept byte for byte
        self.order = [r["student_id"] for r in previous]
        self.export_order: list[str] = []
        self.rows: dict[str, dict] = {}
        self.pending: list[tuple] = []  # graded, not yet in the nbgrader course
        self.version = ""  # the master's tests these rows were graded with (``fingerprint``)

    def row(self, sub, student: str, **fields) -> dict:
        return {"student_id": student, "name": sub.name, "assignment": self.assignment,
                "score": 0.0, "max_score": self.max_score, "auto_score": 0.0,
                "manual_score": 0.0, "needs_manual": 0, "status": Status.GRADED,
                "message": sub.note, "tests_version": self.version, **fields}

    def all_rows(self) -> list[dict]:
        """Earlier rows in their order (regraded ones replaced), then new students in the
        export's order, whatever order the workers finished in."""
        rank = {s: i for i, s in enumerate(self.export_order)}
        new = sorted((s for s in self.rows if s not in self.previous),
                     key=lambda s: rank.get(s, len(rank)))
        return [self.rows.get(s) or self.previous[s] for s in self.order + new]

    def finish(self, sub, student: str, graded: str | None, result: Result | None,
               row: dict, seconds: float) -> None:
        """Write one student's row and feedback (the gradebook copy follows in ``record``).
        This is the end of the per-student boundary: whatever fails here is this student's
        ``error`` row, and every other student's row is written as usual."""
        tests = result["tests"] if result else []
        try:
            parts = {"note": row["message"]}
            if result:
                cells = cells_of(result)
                when = self.timestamps.get(student, sub.timestamp)
                off, late = self.policy.penalty(self.assignment, when, totals(cells)[3],
                                                self.max_score, student)
                parts.update(result=result["message"], late=late, lost=_lost(tests))
                row.update(status=result["status"],
                           message=" ".join(m for m in parts.values() if m))
                apply(row, cells, off)
                self.pending.append((sub, student, graded, result, when, off))
            self.rows[student] = row
            write_feedback(self.out / "feedback" / student, row, tests,
                           result["manual"] if result else [], parts)
        except Exception as err:
            self.pending = [p for p in self.pending if p[1] != student]
            row = self.rows[student] = self.row(sub, student, status=Status.ERROR, message=(
                f"grading failed while recording this submission ({type(err).__name__}: "
                f"{clip(str(err), 200)}); this is not the student's doing, please report"))
            with contextlib.suppress(Exception):
                write_feedback(self.out / "feedback" / student, row, [])
        write_grades(self.out / "grades.csv", self.all_rows())
        score = "pending" if row["score"] == "" else f"{row['score']:g}"
        self.log(f"[{seconds:6.1f} s] {student}: {score}/{row['max_score']:g} "
                 f"{row['status']} {row['message']}")
        self.record(wait=False)

    def record(self, wait: bool) -> None:
        """Put the graded students into the nbgrader course, once it is generated (now if
        ``wait``): their notebooks, then the gradebook in one session. A student whose copy
        fails keeps the row, which then says so."""
        if not self.pending or not (wait or self.generated.done()):
            return
        self.generated.result()  # a failed generate_assignment stops the run here
        pending, self.pending = self.pending, []
        failed: dict[str, Exception] = {}
        for sub, student, graded, _, when, _ in pending:
            try:
                self._copy(sub, student, graded, when)
            except Exception as err:
                failed[student] = err
        entries = [(student, result["tests"], result["manual"], when, off)
                   for sub, student, _, result, when, off in pending if student not in failed]
        due = self.policy.due.get(self.assignment)
        try:
            said = gradebook.record_many(self.work, self.assignment, self.assignment, entries,
                                         due)
        except Exception:  # find who: one session each
            said = []
            for entry in entries:
                try:
                    said += gradebook.record_many(self.work, self.assignment, self.assignment,
                                                  [entry], due)
                except Exception as err:
                    failed[entry[0]] = err
        for line in said:  # manual grades a regrade kept or invalidated
            self.log(line)
        for student, err in failed.items():  # keep the row; say the gradebook copy is missing
            row = self.rows[student]
            row.update(status=Status.ERROR, message=(
                f"{row['message']} (not recorded in the gradebook: {type(err).__name__}: "
                f"{clip(str(err), 200)}; please report)").strip())
            result = next(r for _, s, _, r, _, _ in pending if s == student)
            write_feedback(self.out / "feedback" / student, row, result["tests"],
                           result["manual"])
        if failed:
            write_grades(self.out / "grades.csv", self.all_rows())

    def _copy(self, sub, student, graded: str, when) -> None:
        """The submitted and the autograded notebook, where nbgrader keeps them."""
        name = f"{self.assignment}.ipynb"
        for stage in ("submitted", "autograded"):
            folder = self.work / stage / student / self.assignment
            folder.mkdir(parents=True, exist_ok=True)
            if when is not None:
                (folder / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
        shutil.copyfile(sub.notebook, self.work / "submitted" / student / self.assignment / name)
        (self.work / "autograded" / student / self.assignment / name).write_text(
            graded, encoding="utf-8")


@dataclass(frozen=True)
class Settings:
    """How one grading run grades; ``grade``'s keyword arguments, checked once."""

    course: Path = COURSE
    limits: Limits = field(default_factory=Limits)
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    isolation: Isolation | None = None  # the strongest available (``kinds.choose``) if None
    unsafe: bool = False
    policy: LatePolicy = field(default_factory=LatePolicy)
    timestamps: Path | None = None
    regrade: bool = False
    only: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None
    log: Callable = print

    def __post_init__(self):
        workers = self.workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        if not isinstance(self.limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(self.limits).__name__}")


def grade(assignment: str, submissions: Path, out: Path, course: Path = COURSE, *,
          limits: Limits | None = None, workers: int | None = None, unsafe: bool = False,
          isolation: Isolation | None = None, policy: LatePolicy | None = None,
          timestamps: Path | None = None, regrade: bool = False, only: list[str] | None = None,
          shard: tuple[int, int] | None = None, log=print) -> list[dict]:
    """Grade the submissions of ``assignment``; write ``out/grades.csv`` and ``out/feedback/``.

    Grades already in ``out`` are kept: students graded there before are skipped (resume)
    unless ``regrade``; ``only`` regrades the named students and nobody else; either way every
    other row keeps its score, status and message, and the gradebook changes only for those
    graded. ``shard`` (I, N) grades a fixed 1/N of the students (see ``merge``). ``isolation``
    is the strongest available unless given. Returns all rows.
    """
    settings = Settings(course=Path(course), limits=limits or Limits(),
                        workers=(os.cpu_count() or 1) if workers is None else workers,
                        isolation=isolation, unsafe=unsafe, policy=policy or LatePolicy(),
                        timestamps=timestamps, regrade=regrade, only=tuple(only or ()),
                        shard=shard, log=log)
    check_assignment(assignment, settings.course)
    out = Path(out).resolve()
    unpacked = Path(tempfile.mkdtemp(prefix="autograder-unpacked-"))
    try:
        # read the whole export before writing anything: a bad export leaves no output behind
        subs = collect(Path(submissions), assignment, unpacked)
        unknown = sorted(set(settings.only) - {s.student_id for s in subs})
        if unknown:
            raise ValueError(f"--only names student(s) not in the export: {', '.join(unknown)}")
        with prepare_grading(assignment, settings.course, settings.limits,
                             isolation=settings.isolation, unsafe=settings.unsafe,
                             private=(out, Path(submissions)),
                             workers=settings.workers) as prepared:
            if prepared.isolation.kind == UID:  # its permissions hide the output
                out.mkdir(mode=0o700, parents=True, exist_ok=True)
            return _grade(assignment, subs, out, settings, prepared)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)


def _grade(assignment: str, subs, out: Path, settings: Settings,
           prepared: Prepared) -> list[dict]:
    log = settings.log
    out.mkdir(parents=True, exist_ok=True)
    # an interrupted run's rows without their gradebook copy are graded again; --only keeps
    # every row it does not name as it is
    previous = (read_grades(out / "grades.csv") if settings.only
                else settled_rows(out, assignment))
    work = working_course(assignment, out / "course", settings.course)
    master, sandbox = prepared.master, prepared.sandbox
    max_score = sum(s.points for s in map(master_step, master["cells"])
                    if s.kind == "test" or manual(s))
    mine = [s for s in subs if in_shard(s.student_id, settings.shard)]
    # beside the grading: nbgrader's generate_assignment, then the similarity report (against
    # the whole export, other shards' students too; it needs the notebooks, not the grades)
    background = ThreadPoolExecutor(1)
    generated = background.submit(lambda: read_notebook(
        generate(assignment, work) / f"{assignment}.ipynb"))
    said: list[str] = []  # the report's line, logged after the grades
    similar = background.submit(lambda: similarity.report_class(
        master=master, notebooks={s.student_id: s.notebook for s in subs},
        release=generated.result(), out=out, students=[s.student_id for s in mine],
        log=said.append))
    background.shutdown(wait=False)
    run = _Run(assignment, out, work, max_score, generated, settings.policy,
               load_timestamps(settings.timestamps), log, previous)
    run.export_order = [s.student_id for s in subs]
    _write_manifest(out, assignment, subs, mine, settings.shard, max_score, finished=False)
    version = run.version = fingerprint(master)
    stale = sorted(s.student_id for s in mine if s.student_id in run.previous and
                   run.previous[s.student_id].get("tests_version", "") != version)
    if settings.only:
        todo = [s for s in mine if s.student_id in settings.only]
    else:
        failed = {r["student_id"] for r in run.previous.values() if r["status"] == Status.ERROR}
        todo = [s for s in mine if settings.regrade or s.student_id not in run.previous
                or s.student_id in stale or s.student_id in failed]
        if stale and not settings.regrade:
            log(f"the assignment's tests changed since {len(stale)} student(s) were graded "
                f"in {out} (tests version {version}): grading them again: "
                f"{', '.join(stale[:20])}{' ...' if len(stale) > 20 else ''}")
    log(f"grading {assignment}: {len(todo)} submission(s), {settings.workers} worker(s); "
        f"{sandbox.limits_in_force}; {sandbox.starts}")
    if not settings.only and len(todo) < len(mine):
        log(f"{len(mine) - len(todo)} student(s) already graded in {out} are kept "
            "(--regrade grades them again, --only ID... regrades chosen students; rows the "
            "grader failed on, status error, are graded again)")
    try:
        _grade_all(run, master, todo, settings.limits, prepared, settings.workers)
    except BaseException:  # interrupted: the rows written still get their gradebook copy
        with contextlib.suppress(Exception):
            run.record(wait=True)
        raise
    run.record(wait=True)
    flags = similar.result()
    for line in said:
        log(line)
    for row in run.all_rows():  # cells to review, for the instructor only: no score changes
        row["flags"] = flags.get(row["student_id"], "")
    write_grades(out / "grades.csv", run.all_rows())
    _write_manifest(out, assignment, subs, mine, settings.shard, max_score, finished=True)
    name_students_of(out, log)
    return sync(out, settings.policy, log=log)  # with the manual grades the gradebook keeps


def _grade_all(run, master, todo, limits, prepared, workers) -> None:
    """A submission intake could not read is its row at once; the workers grade the rest."""
    jobs = []
    for sub in todo:
        if sub.problem:
            run.finish(sub, sub.student_id, None, None,
                       run.row(sub, sub.student_id, status=Status.UNGRADABLE,
                               message=" ".join(m for m in (sub.note, sub.problem) if m)), 0.0)
        else:
            jobs.append(sub)
    if jobs:
        _run_jobs(run, master, jobs, limits, prepared, workers)


def _run_jobs(run, master, jobs, limits, prepared, workers) -> None:
    """Grade ``jobs`` in parallel; every job ends as exactly one row, whatever its worker does
    (see ``workers.run_jobs``). Ctrl-C stops the run: rows written so far stay, and running
    the same command again grades the students still missing."""
    os.environ.setdefault("PYTHONHASHSEED", "0")
    started = time.perf_counter()
    by_student = {sub.student_id: sub for sub in jobs}
    work = ((sub.student_id, (str(sub.notebook),)) for sub in jobs)
    # the notebook's own limit, plus every cell's grace and the sandbox's start: a safety net
    deadline = limits.timeout_notebook + 2 * limits.timeout_cell + START_SECONDS + 60

    sandbox, uids = prepared.sandbox, prepared.uids.uids

    def cleanup(student, index):  # a worker died: what its sandboxes left outside it
        mine = uids[2 * index:2 * index + 2] or (None, None)
        for slot, uid in zip((2 * index, 2 * index + 1), mine):
            sandbox.cleanup(f"{os.getpid()}-{slot}", uid)
        sandbox.cleanup(template_name(os.getpid(), index))

    results = run_jobs(work, _grade_one, workers, deadline, setup=_Worker.setup,
                       setup_args=(os.getpid(), str(sandbox.support), limits, sandbox.isolation,
                                   sandbox.withheld, sandbox.refuse_attention,
                                   sandbox.preload, master, uids),
                       teardown=_Worker.teardown, on_failure=cleanup,
                       preload=(__name__, "autograder.scoring.execute", "numpy", "torch",
                                *MARKDOWN))
    try:
        for student, done in results:
            sub, result, graded = by_student[student], None, None
            if isinstance(done, Failure):
                row = run.row(sub, student, status=Status.ERROR, message=(
                    f"grading failed: {done.reason}; this is not the student's doing unless "
                    "it repeats, please report"))
            elif "problem" in done:
                row = run.row(sub, student, status=Status.UNGRADABLE, message=" ".join(
                    m for m in (sub.note, done["problem"]) if m))
            else:
                row, result, graded = run.row(sub, student), done["result"], done["graded"]
            run.finish(sub, student, graded, result, row, time.perf_counter() - started)
    except KeyboardInterrupt:
        results.close()
        left = [s for s in by_student if s not in run.rows]
        run.log(f"interrupted: {len(by_student) - len(left)} of {len(by_student)} graded and "
                f"written to {run.out / 'grades.csv'}; run the same command again to grade "
                f"the other {len(left)}")
        raise
    finally:  # what a worker stopped before its teardown left of its template (cgroups)
        for index in range(workers):
            sandbox.cleanup(template_name(os.getpid(), index))


def name_students_of(out: Path, log) -> None:
    """Every student this output is responsible for, ungradable ones too, in its gradebook
    with the name the export gave (``roster.name_students``), so formgrader shows people."""
    from .roster import from_export, name_students

    manifest = json.loads((out / "manifest.json").read_text())
    people = manifest.get("people", {})
    try:
        name_students(out / "course", {s: from_export(people[s]["name"], people[s]["lms"])
                                       for s in manifest["responsible"] if s in people})
    except Exception as err:  # names are for people reading formgrader; grades stand without
        log(f"names not recorded in the gradebook ({type(err).__name__}: {str(err)[:200]})")


def _write_manifest(out: Path, assignment: str, subs, mine, shard, max_score: float,
                    finished: bool) -> None:
    """Who was in the export, who this output is responsible for (``merge`` checks it), and
    whether the run finished (``settled_rows``); names and the maximum score let ``merge``
    write the row of a student no run graded; how the export named each student (``people``:
    grades go back to the LMS by it)."""
    data = {"assignment": assignment, "shard": list(shard) if shard else None,
            "students": [s.student_id for s in subs],
            "responsible": [s.student_id for s in mine], "finished": finished,
            "max_score": max_score, "names": {s.student_id: s.name for s in subs},
            "people": {s.student_id: {"name": s.name, "lms": s.lms, "exported": s.exported}
                       for s in subs}}
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".manifest", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(data, indent=1))
    os.replace(tmp, out / "manifest.json")
