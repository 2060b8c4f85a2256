"""python -m autograder: release, publish, grade, export to the LMS and self-test the course's
assignments; build the course's book."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from .course import COURSE, check_assignment


def _limit_flags(p: argparse.ArgumentParser) -> None:
    from .isolation.limits import Limits

    default = Limits()  # the defaults live there, once
    p.add_argument("--timeout-cell", type=float, default=default.timeout_cell,
                   help=f"seconds per cell and per test cell (default {default.timeout_cell:g})")
    p.add_argument("--timeout-notebook", type=float, default=default.timeout_notebook,
                   help="seconds per submission, all cells together (default "
                        f"{default.timeout_notebook:g})")
    p.add_argument("--memory-mb", type=int, default=default.memory_mb,
                   help="memory per submission in MB, the torch its runner inherits from its "
                        f"worker's template included (default {default.memory_mb})")
    p.add_argument("--max-procs", type=int, default=default.max_procs,
                   help=f"processes and threads per submission (default {default.max_procs})")
    p.add_argument("--cpus", type=float, default=default.cpus,
                   help="CPU cores one submission may keep busy, where cgroups allow (default "
                        f"{default.cpus:g})")


def _limits(args):
    from .isolation.limits import Limits

    return Limits(args.timeout_cell, args.timeout_notebook, args.memory_mb, args.max_procs,
                  args.cpus)


def _grader_path() -> None:
    """Submissions often sit in or under the folder the grader is started from: nothing there
    may ever be imported, so the working directory leaves ``sys.path`` (workers inherit it)
    and the grader's own package is found where it is installed, after everything else."""
    home = str(Path(__file__).resolve().parents[1])
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd(), ".")]
    if home not in sys.path:
        sys.path.append(home)


# --- one function per command: each takes the parsed arguments, returns the exit status ---
def release_command(args) -> int:
    from .authoring.release import release

    print(f"release written to {release(args.assignment, args.out, args.course)}")
    return 0


def publish_command(args) -> int:
    from .authoring.publish import publish

    path = publish(args.out, args.repo, args.branch, args.course, names=args.assignments,
                   book=args.book)
    print(f"student edition written to {path}: commit and push it as its own repository")
    if args.book is None:
        print("it has no book: build one with make site and publish again with --book site")
    return 0


def book_command(args) -> int:
    from .authoring.book import build_book

    warnings = build_book(args.executed, args.out, args.course)
    for warning in warnings:
        print(warning, file=sys.stderr)
    print(f"book written to {args.out}/ ({len(warnings)} Sphinx warning(s)); preview it with "
          f"python -m http.server --directory {args.out}")
    return 0


def grade_command(args) -> int:
    from .intake.late import load_policy
    from .scoring.grade import grade, parse_shard

    policy = load_policy(args.late_policy or args.course / "late_policy.toml", args.extensions)
    rows = grade(check_assignment(args.assignment, args.course), args.submissions, args.out,
                 args.course, limits=_limits(args), workers=args.workers,
                 unsafe=args.unsafe_no_sandbox, policy=policy, timestamps=args.timestamps,
                 regrade=args.regrade, only=args.only,
                 shard=parse_shard(args.shard) if args.shard else None)
    print(f"{len(rows)} student(s) in {args.out / 'grades.csv'}")
    return 0


def sync_command(args) -> int:
    from .intake.late import load_policy
    from .scoring.handgrading import sync

    sync(args.out, load_policy(args.late_policy or args.course / "late_policy.toml",
                               args.extensions))
    return 0


def export_command(args) -> int:
    from .scoring.lms import export

    titles = {}
    for pair in args.title or ():
        assignment, sep, title = pair.partition("=")
        if not sep or not assignment or not title:
            raise ValueError(f"--title must look like ASSIGNMENT=TITLE, got {pair!r}")
        titles[assignment] = title
    export(args.outputs, args.lms, args.out, args.roster, args.allow_pending, titles)
    return 0


def merge_command(args) -> int:
    from .scoring.merge import merge, ungraded

    return 1 if ungraded(merge(args.outputs, args.out, resume=args.resume_with)) else 0


def slurm_command(args) -> int:
    from .cluster import run

    modes = [m for m, on in (("--resume", args.resume), ("--follow", args.follow),
                             ("ASSIGNMENT", args.assignment)) if on]
    if len(modes) > 1:
        raise ValueError(f"give one of ASSIGNMENT, --resume OUT or --follow OUT, not "
                         f"{' and '.join(modes)}")
    if args.follow:
        return run.follow(args.follow, args.poll)
    if args.resume:
        resumed = run.resume(args.resume, args.sbatch)
        return run.follow(args.resume, args.poll) if resumed and args.wait else 0
    limits = _limits(args)
    if not args.assignment:
        if not args.check:
            raise ValueError("slurm needs ASSIGNMENT --submissions EXPORT --out OUT --tasks N, "
                             "or --resume OUT, --follow OUT or --check")
        ok, report = run.check(args.course, limits, args.sbatch)
        print(report)
        return 0 if ok else 1
    missing = [f for f, v in (("--submissions", args.submissions), ("--out", args.out),
                              ("--tasks", args.tasks)) if v is None]
    if missing:
        raise ValueError(f"slurm {args.assignment} needs {', '.join(missing)}")
    run.start(args.assignment, args.submissions, args.out, args.tasks, args.course, limits,
              workers=args.workers_per_task, sbatch=args.sbatch,
              late_policy=args.late_policy or args.course / "late_policy.toml",
              timestamps=args.timestamps, unsafe=args.unsafe_no_sandbox,
              check_first=args.check)
    return run.follow(args.out, args.poll) if args.wait else 0


def gradescope_command(args) -> int:
    from .authoring.gradescope_bundle import bundle

    path = bundle(check_assignment(args.assignment, args.course), args.out, args.course,
                  _limits(args))
    print(f"Gradescope bundle written to {path}")
    return 0


def gradescope_run_command(args) -> int:
    from .scoring.gradescope import run

    report = run(check_assignment(args.assignment, args.course), args.submission, args.results,
                 args.course, _limits(args))
    print(report["output"])
    return 0


def hide_withheld_command(args) -> int:
    from .isolation.exposure import hide_withheld

    for folder in hide_withheld():
        print(f"closed to other users: {folder}")
    return 0


def doctor_command(args) -> int:
    from .isolation.doctor import doctor

    text, ok = doctor(_limits(args), args.course)
    print(text)
    return 0 if ok else 1


def selftest_command(args) -> int:
    from .authoring.selftest import selftest_all

    failures = selftest_all(args.assignment or None, args.course,
                            independence=args.independence)
    for failure in failures:
        print("FAIL:", failure, file=sys.stderr)
    return 1 if failures else 0


def parser() -> argparse.ArgumentParser:
    """The command line: each subcommand's arguments, and its function (``args.run``)."""
    top = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    top.add_argument("--course", type=Path, default=COURSE,
                     help="nbgrader course folder (default: the repository's assignments/)")
    commands = top.add_subparsers(dest="command", required=True)

    def command(name, run, help):
        p = commands.add_parser(name, help=help)
        p.set_defaults(run=run)
        return p

    p = command("release", release_command, "write the student version of an assignment")
    p.add_argument("assignment")
    p.add_argument("--out", type=Path, required=True, help="folder to write the release into")

    p = command("publish", publish_command, "build the student edition (lectures, library, "
                                            "released assignments) as a folder to push")
    p.add_argument("--out", type=Path, required=True,
                   help="new folder, earlier edition, or a clone of the edition's repository "
                        "(its .git is kept)")
    p.add_argument("--repo", help="the edition's GitHub address, for the Colab badges and setup "
                                  "cells (default: [tool.seqlab.colab] of pyproject.toml)")
    p.add_argument("--branch", help="its branch (default: the one in pyproject.toml)")
    p.add_argument("--assignments", nargs="+", metavar="NAME",
                   help="the assignments released so far (default: the released list of "
                        "<course>/course.toml, else every assignment)")
    p.add_argument("--book", type=Path,
                   help="the course's book (make site), published with the edition's GitHub "
                        "Pages workflow")

    p = command("book", book_command, "build the course's book (static HTML) from the lectures "
                                      "as executed by python -m seqlab.course")
    p.add_argument("--executed", type=Path, default=Path("executed"),
                   help="the lecture runs (default: executed/, as make course writes it)")
    p.add_argument("--out", type=Path, default=Path("site"),
                   help="new folder or an earlier book (default: site/)")

    p = command("grade", grade_command, "autograde a folder or LMS zip of submissions")
    p.add_argument("assignment")
    p.add_argument("--submissions", type=Path, required=True,
                   help="folder with one sub-folder per student, or a zip export")
    p.add_argument("--out", type=Path, required=True,
                   help="writes grades.csv, feedback/<student>/ and the working course")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="submissions graded at once (default: the CPU count)")
    _limit_flags(p)
    p.add_argument("--late-policy", type=Path, default=None,
                   help="TOML with [due] and [penalty] (default: <course>/late_policy.toml)")
    p.add_argument("--extensions", type=Path, default=None,
                   help="CSV (student_id, due[, assignment]): per-student due dates (default: "
                        "extensions.csv beside the late policy)")
    p.add_argument("--timestamps", type=Path, default=None,
                   help="CSV (student_id, timestamp) from the LMS: trusted submission times")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run student code without isolation (only for code you trust)")
    p.add_argument("--regrade", action="store_true",
                   help="grade again students already graded in --out (default: keep them)")
    p.add_argument("--only", nargs="+", metavar="ID",
                   help="regrade just these students; every other row stays as it is")
    p.add_argument("--shard", metavar="I/N",
                   help="grade a fixed 1/N of the students (join the outputs with merge)")

    p = command("sync", sync_command, "bring the grades, comments and extra credit entered "
                                      "in formgrader into grades.csv and the feedback")
    p.add_argument("out", type=Path, help="the --out folder of a grade run")
    p.add_argument("--late-policy", type=Path, default=None,
                   help="TOML with [due] and [penalty] (default: <course>/late_policy.toml)")
    p.add_argument("--extensions", type=Path, default=None,
                   help="CSV (student_id, due[, assignment]): per-student due dates")

    p = command("export", export_command, "write the LMS's grade import files and feedback "
                                          "bundles for grading outputs (the course so far)")
    p.add_argument("outputs", nargs="+", type=Path,
                   help="the --out folders of grade (or merge), one per assignment")
    p.add_argument("--lms", required=True, choices=("canvas", "moodle", "d2l", "plain"),
                   help="whose import files to write (plain: one CSV for any spreadsheet)")
    p.add_argument("--out", type=Path, required=True, help="folder for the files to upload")
    p.add_argument("--roster", type=Path, default=None,
                   help="the LMS's export of its people: Canvas's gradebook export, Moodle's "
                        "participants export, Brightspace's grade export (names, emails, ids; "
                        "also recorded in each output's gradebook)")
    p.add_argument("--allow-pending", action="store_true",
                   help="write grades still waiting for a grader (or a regrade) as empty, "
                        "the LMS's 'no grade', instead of refusing")
    p.add_argument("--title", action="append", metavar="ASSIGNMENT=TITLE",
                   help="the LMS's name for an assignment's column or grade item (default: "
                        "the roster's column of the same name, else the assignment's name)")

    p = command("slurm", slurm_command, "grade on a Slurm cluster: one job array of --tasks "
                                        "shards and a merge after it (see README)")
    p.add_argument("assignment", nargs="?")
    p.add_argument("--submissions", type=Path, help="the LMS export (zip or folder); staged "
                                                    "once into --out")
    p.add_argument("--out", type=Path, help="on storage the compute nodes share: the scripts, "
                                            "the shards' outputs, graded/ (the merge)")
    p.add_argument("--tasks", type=int, help="array tasks, each grading 1/N of the students")
    p.add_argument("--workers-per-task", type=int, default=4,
                   help="submissions graded at once in each task; its CPUs (default 4)")
    p.add_argument("--sbatch", action="append", default=[], metavar="OPTIONS",
                   help="sbatch options in long form, e.g. --sbatch='--partition=short "
                        "--account=cs101'; --time, --mem override the derived requests")
    p.add_argument("--wait", action="store_true",
                   help="wait with a progress bar; exit with the merge's status")
    p.add_argument("--poll", type=float, default=15, help="seconds between looks (default 15)")
    p.add_argument("--resume", type=Path, metavar="OUT",
                   help="submit again the shards of OUT that did not finish, then merge")
    p.add_argument("--follow", type=Path, metavar="OUT",
                   help="wait for the run in OUT (as --wait does)")
    p.add_argument("--check", action="store_true",
                   help="run doctor as a one-task job first; submit nothing if grading would "
                        "refuse there (alone: only the check)")
    _limit_flags(p)
    p.add_argument("--late-policy", type=Path, default=None,
                   help="TOML with [due] and [penalty] (default: <course>/late_policy.toml)")
    p.add_argument("--timestamps", type=Path, default=None,
                   help="CSV (student_id, timestamp) from the LMS: trusted submission times")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run student code without isolation (only for code you trust)")

    p = command("merge", merge_command, "join the outputs of sharded grade runs (exit status "
                                        "1 when a shard left students ungraded)")
    p.add_argument("outputs", nargs="+", type=Path, help="the --out folders of the shards")
    p.add_argument("--out", type=Path, required=True, help="folder for the merged output")
    p.add_argument("--resume-with", default="", metavar="TEXT",
                   help="how to grade a stopped shard, quoted in its students' rows (default: "
                        "run that shard's grade command again, then merge)")

    p = command("gradescope", gradescope_command, "write a Gradescope autograder bundle (zip)")
    p.add_argument("assignment")
    p.add_argument("--out", type=Path, required=True, help="the zip to write")
    _limit_flags(p)

    p = command("gradescope-run", gradescope_run_command,
                "(inside Gradescope) grade one submission")
    p.add_argument("assignment")
    p.add_argument("--submission", type=Path, required=True)
    p.add_argument("--results", type=Path, required=True)
    _limit_flags(p)

    p = command("doctor", doctor_command, "say which isolation grading would use here, which "
                                          "limits hold, and what to fix (exit status 1 where "
                                          "grading would refuse)")
    _limit_flags(p)

    command("hide-withheld", hide_withheld_command, "close the packages no answer may use "
            "(the course's library, nltk, sacrebleu, transformers, the grader) to other users, "
            "as the uid fallback requires (Docker, Gradescope)")

    p = command("selftest", selftest_command, "solution gets full marks, release gets 0")
    p.add_argument("assignment", nargs="*", help="default: every assignment")
    p.add_argument("--independence", action="store_true",
                   help="also stub each answer in turn: only the test cells that use it may "
                        "lose points (grades one more submission per answer)")
    return top


class Terminated(KeyboardInterrupt):
    """SIGTERM: what a scheduler sends at a job's time limit, on ``scancel`` or preemption
    (then SIGKILL a little later). A run stops as on Ctrl-C: the rows written stay, graded
    students get their gradebook copy, and the same command resumes."""


def _terminated(signum, frame):
    raise Terminated


def main(argv=None) -> int:
    _grader_path()
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return args.run(args)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Terminated:
        print("stopped (SIGTERM: a time limit, scancel or preemption)", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("stopped (Ctrl-C)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
