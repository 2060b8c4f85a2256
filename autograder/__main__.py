"""python -m autograder: release, publish, grade and self-test the course's assignments; build
the course's book."""

from __future__ import annotations

import argparse
import os
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


def merge_command(args) -> int:
    from .scoring.merge import merge

    merge(args.outputs, args.out)
    return 0


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

    p = command("merge", merge_command, "join the outputs of sharded grade runs")
    p.add_argument("outputs", nargs="+", type=Path, help="the --out folders of the shards")
    p.add_argument("--out", type=Path, required=True, help="folder for the merged output")

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
                                          "limits hold, and what to fix")
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


def main(argv=None) -> int:
    _grader_path()
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stopped (Ctrl-C)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
