"""How the similarity report grows with the class: ``similarity.compare`` on N synthetic answers
to assignment 01, whole-class and as one task of a sharded run (``--shard-of T``: one task's
students against everyone, what each ``grade --shard`` computes).

A synthetic student answers each cell with one of the honest answers of ``tests/
similarity_class.py`` (or the master's solution), with three to six statements of their own
mixed in (a print, a check: distinct texts, as a real class writes, that the canonical form
keeps); one in twenty copies another student's answers. So most pairs of answers to a cell
share most of their code (a cell has two to five honest answers here, far fewer than a real
class writes): a pessimistic class, in which a student's honest answer is often reported
against the classmates who started from the same one. Every distinct text is fingerprinted
once; the measurement cell is compared with the library only, as grading does.

Prints wall time, CPU time and peak memory (the process's resident high-water mark) of the
fingerprints and of the comparisons, and the pairs reported. ``--all-pairs`` compares every
pair of students instead of the candidates of the fingerprint index (the same report, in time
that grows with the square of the class): run each in a process of its own, the peak memory is
the process's.

    python benchmarks/similarity_scale.py --answers 1000 [--shard-of 100] [--seed 0] [--all-pairs]
"""

from __future__ import annotations

import argparse
import ast
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from similarity_class import CLASS  # noqa: E402

from autograder.authoring.release import release  # noqa: E402
from autograder.course import COURSE, source_notebook  # noqa: E402
from autograder.intake.normalize import plan, read_notebook  # noqa: E402
from autograder.scoring import similarity  # noqa: E402

A = "01_language_models"
OWN_LINES = ["print('checked', {n})", "assert {n} > 0, 'check {n}'",
             "print(len(str({n})), {n} % 7)", "if {n} < 0:\n{indent}    print('odd', {n})"]


def variants() -> dict[str, list[str]]:
    """cell -> honest answers to it (the master's and the test class's)."""
    master = read_notebook(source_notebook(A))
    solution = similarity.answers(plan(master, master))
    found: dict[str, list[str]] = {}
    for cell, code in solution.items():
        found.setdefault(cell, []).append(code)
    for student, cells in CLASS[A].items():
        if student in ("paste", "share_a", "share_b", "adapted"):
            continue
        for cell, code in cells.items():
            found.setdefault(cell, []).append(code)
    return found


def with_own_lines(code: str, rng: random.Random) -> str:
    """``code`` with three to six statements of the student's own (a print, a check) before
    statements of it, at their indentation, so that it still parses."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    starts = sorted({(n.lineno, n.col_offset) for n in ast.walk(tree) if isinstance(n, ast.stmt)})
    lines = code.splitlines()
    for lineno, col in sorted(rng.sample(starts, min(len(starts), rng.randint(3, 6))),
                              reverse=True):
        line = rng.choice(OWN_LINES).format(n=rng.randint(1, 10**6), indent=" " * col)
        lines.insert(lineno - 1, " " * col + line)
    return "\n".join(lines) + "\n"


def synthetic_class(count: int, seed: int) -> dict[str, dict[str, str]]:
    rng = random.Random(seed)
    pool = variants()
    students: dict[str, dict[str, str]] = {}
    for i in range(count):
        name = f"s{i:05d}"
        if students and rng.random() < 0.05:  # a copy of someone else's answers
            students[name] = dict(students[rng.choice(list(students))])
            continue
        students[name] = {cell: with_own_lines(rng.choice(codes), rng)
                          for cell, codes in pool.items()}
    return students


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1000, help="students in the class")
    parser.add_argument("--shard-of", type=int, default=1,
                        help="compare one task's students (1/T of the class) with everyone")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--all-pairs", action="store_true",
                        help="compare every pair, not the index's candidates (the old way)")
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        released = read_notebook(release(A, Path(tmp), COURSE) / f"{A}.ipynb")
    given = similarity.release_code(released)
    library = similarity.library_sources()
    students = synthetic_class(args.answers, args.seed)
    chosen = list(students)[::args.shard_of]
    before = peak_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    master = read_notebook(source_notebook(A))
    matches = similarity.compare(students, library=library, given=given, students=chosen,
                                 all_pairs=args.all_pairs,
                                 measurements=similarity.measurement_cells(master))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    cells = sum(len(c) for c in students.values())
    print(f"{args.answers} students ({cells} answers, {len(chosen)} compared with everyone: "
          f"1/{args.shard_of} of the class, {'all pairs' if args.all_pairs else 'indexed'}): "
          f"compare {wall:.1f} s wall, {cpu:.1f} s CPU, "
          f"peak memory {peak_mb():.0f} MB (before: {before:.0f} MB), "
          f"{len(matches)} pair(s) reported")


if __name__ == "__main__":
    main()
