"""What one submission may cost and show: a CPU share it cannot exceed, nothing of the host's
paths inside the sandbox, no copy of a withheld package readable anywhere under the uid
fallback, and every CSV an instructor opens carrying students' text as text, never a formula."""

import csv
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from autograder.isolation.exposure import readable_copies, refuse_if_exposed
from autograder.isolation.kinds import choose
from autograder.isolation.sandbox import Limits, Sandbox, sandbox_problem, support_folder
from autograder.isolation.session import Session
from autograder.scoring.grade import COLUMNS, read_grades, write_grades
from autograder.scoring.similarity import Match, write_report
from autograder.scoring.spreadsheet import cell

needs_sandbox = pytest.mark.skipif(bool(sandbox_problem()),
                                   reason=f"needs bubblewrap: {sandbox_problem()}")

BUSY = """import os, time
start = time.monotonic()
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            pass
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
times = os.times()
print(times.children_user + times.children_system, time.monotonic() - start)
"""


@pytest.fixture
def session(tmp_path, request):
    """A session with one sandbox under the strongest isolation, ``Limits(**request.param)``."""
    sandbox = Sandbox(support_folder(choose()), Limits(**request.param), choose())
    session = Session(sandbox, sandbox.start(f"{os.getpid()}-0"))
    yield session
    session.close()
    sandbox.close_template()
    shutil.rmtree(sandbox.support, ignore_errors=True)


@needs_sandbox
@pytest.mark.parametrize("session", [{"cpus": 0.1}], indirect=True)
def test_a_submission_gets_at_most_its_cpu_share(session):
    """Three processes spinning for two seconds get a tenth of a core between them, not the
    machine: a class's other submissions keep theirs. Measured in CPU time (a busy machine
    can only make the share smaller) and by the kernel's count of throttled periods."""
    if not session.sandbox.cpu_share:
        pytest.skip("this host gives the grader no cpu cgroup (doctor says so)")
    assert "at most 0.1 CPU core(s) via cgroup" in session.sandbox.limits_in_force
    reply = session.run_cell(BUSY, 0, 30)
    cpu, wall = map(float, reply["stdout"].split())
    assert cpu <= 0.1 * wall * 1.25 + 0.1, (cpu, wall)
    group = session.box.groups.get("cpu") or session.box.groups["unified"]
    stats = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    assert int(stats["nr_throttled"]) > 0, stats


SNOOP = """import os
seen = []
for path in ("/proc/1/cmdline", "/proc/self/mountinfo", "/proc/self/environ"):
    try:
        with open(path, "rb") as handle:
            seen.append(handle.read().decode(errors="replace"))
    except OSError as err:
        seen.append(type(err).__name__)
print("\\n".join(seen))
"""


@needs_sandbox
@pytest.mark.parametrize("session", [{}], indirect=True)
def test_the_sandbox_shows_nothing_of_the_instructors_folders(session, tmp_path):
    """Bubblewrap is pid 1 in the sandbox, and its command line used to hold every host path
    it bound; its mount table names the sources of the binds. Neither may name the folders
    grading writes to or reads from."""
    shown = session.run_cell(SNOOP, 0, 30)["stdout"]
    assert "/proc/1/cmdline" not in shown and len(shown) > 100, shown[:300]
    assert str(tmp_path) not in shown
    assert "--ro-bind" not in shown  # bubblewrap's options stay out of its command line


def test_copies_of_withheld_packages_anywhere_readable_are_found(tmp_path_factory):
    """A local package mirror, another environment or a checkout with a withheld package,
    readable to the sandbox's uid, is a way around withholding it in the uid fallback: found
    by walking the host as that uid, named with the fix; closed, it is not found."""
    if os.geteuid() != 0:
        pytest.skip("checking as the sandbox's uid needs root")
    mirror = Path(tempfile.mkdtemp(prefix="seqlab-mirror-"))  # /tmp: every user may list it
    try:
        mirror.chmod(0o755)
        wheel = mirror / "seqlabfake-1.0-py3-none-any.whl"
        wheel.write_bytes(b"PK")
        tree = mirror / "src" / "seqlabfake"
        tree.mkdir(parents=True)
        (tree / "__init__.py").write_text("")
        stub = mirror / "site" / "seqlabfake"
        stub.mkdir(parents=True)
        (stub / "__init__.py").write_text("raise ImportError('seqlabfake is not available "
                                          "while your notebook is graded')")
        for path in mirror.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        readable_copies.cache_clear()
        found = readable_copies(["seqlabfake"])
        assert str(wheel) in found and str(tree) in found
        assert str(stub) not in found  # a sandbox's own stub says what it is
        with pytest.raises(RuntimeError, match="chmod -R go-rwx") as refused:
            refuse_if_exposed([], packages=["seqlabfake"])
        assert str(wheel) in str(refused.value)
        wheel.chmod(0o600)
        (mirror / "src").chmod(0o700)
        readable_copies.cache_clear()
        assert readable_copies(["seqlabfake"]) == []
    finally:
        readable_copies.cache_clear()
        shutil.rmtree(mirror)


# --- CSV files are data --------------------------------------------------------------------
FORMULAS = ['=HYPERLINK("http://x","click")', "+1+2", "-2+3", "@SUM(A1)", "\tx", "\r=1"]


def test_cells_a_spreadsheet_would_evaluate_are_text():
    for text in FORMULAS:
        assert cell(text) == "'" + text
        assert cell(cell(text)) == cell(text)  # written again, nothing more
    for kept in ("-0.5", "+3", "1e-3", "smith", "", 18.0, -1):
        assert cell(kept) == kept


def _read(path):
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def test_every_text_column_of_grades_csv_is_data(tmp_path):
    row = {c: FORMULAS[i % len(FORMULAS)] for i, c in enumerate(COLUMNS)}
    row.update(score=-0.0, max_score=18.0)
    write_grades(tmp_path / "grades.csv", [row])
    header, written = _read(tmp_path / "grades.csv")
    assert header == list(COLUMNS)
    for column, value in zip(header, written):
        if column in ("score", "max_score"):
            assert float(value) == row[column]  # numbers stay numbers
        else:
            assert value == "'" + row[column], column
    assert read_grades(tmp_path / "grades.csv")[0]["name"].startswith("'")


def test_every_column_of_similarity_csv_is_data(tmp_path):
    write_report([Match(FORMULAS[0], FORMULAS[1], FORMULAS[3], 0.9, 80, "", "")], out=tmp_path)
    header, written = _read(tmp_path / "similarity.csv")
    assert written[:3] == ["'" + FORMULAS[0], "'" + FORMULAS[1], "'" + FORMULAS[3]]
    assert written[3] == "0.900"
    assert json.loads((tmp_path / "similarity.json").read_text())[0]["student_id"] == FORMULAS[0]
