"""Grading where instructors grade in containers: Docker's default capabilities (``docker run``,
Gradescope) deny bubblewrap its namespaces, so grading falls back to an unprivileged uid per
sandbox. Simulated here as root with ``capsh`` keeping only Docker's capabilities (.ci/run
installs libcap2-bin); Docker itself does not run on these machines.

What the uid fallback cannot stop that bubblewrap does, and why that is acceptable where it is
used (one submission per container on Gradescope; a course's own image in Docker):
- the network: a notebook can reach the internet and the host's loopback (asserted in the
  hostile suite's uid run); nothing of the grader's listens there, and a student can reach the
  internet from their own laptop anyway;
- world-readable system files (/etc/passwd, the Python environment): public knowledge; the
  grader's own files are checked unreadable before grading, or the run refuses;
- world-writable places (/tmp, /dev/shm), within the file-size rlimit, while the sandbox runs:
  what its uid left there is removed when it stops, before another student's sandbox may get
  that uid (``test_hostile.py``).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from helpers import docker_capabilities, python_others_can_read

from autograder.course import COURSE, source_notebook

REPO = Path(__file__).resolve().parents[1]
A = "01_language_models"
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("capsh") is None or shutil.which("setpriv") is None,
    reason="needs root, capsh (libcap2-bin) and setpriv to simulate Docker's capabilities")


def in_docker(command, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(docker_capabilities(command), capture_output=True, text=True,
                          cwd=REPO, **kwargs)


def test_doctor_names_the_fallback_and_the_fix(private_course):
    exposed = in_docker([sys.executable, "-m", "autograder", "doctor"])
    out = exposed.stdout
    assert out.startswith("isolation: uid fallback"), out
    assert "Creating new namespace failed: Operation not permitted" in out
    assert "network: NOT cut off" in out
    assert "starts: each submission" in out, out
    if os.stat(COURSE).st_mode & 0o005:  # a checkout readable by others, as clones are
        assert f"READABLE to a sandbox's uid; fix: chmod -R go-rwx {COURSE}" in out
        assert exposed.returncode == 1, "doctor must fail where grading would refuse"
        assert "grading would refuse here" in out
    hidden = in_docker([sys.executable, "-m", "autograder", "--course", str(private_course),
                        "doctor"])
    assert hidden.returncode == 0, hidden.stdout + hidden.stderr[-2000:]
    assert "the course (hidden tests): unreadable to a sandbox's uid" in hidden.stdout
    assert "packages no answer may use: closed to a sandbox's uid" in hidden.stdout
    full = subprocess.run([sys.executable, "-m", "autograder", "doctor"], capture_output=True,
                          text=True, cwd=REPO)
    if "bubblewrap: available" in full.stdout:  # with all capabilities, the strongest
        assert full.stdout.startswith("isolation: bubblewrap")


def test_grade_refuses_a_course_the_sandbox_could_read_and_writes_nothing(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="clone-"))  # as a fresh clone leaves it: 0755 all along
    base.chmod(0o755)
    course = base / "course"
    shutil.copytree(COURSE, course)
    course.chmod(0o755)
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    shutil.copy(source_notebook(A), subs / "alice" / f"{A}.ipynb")
    refused = in_docker([sys.executable, "-m", "autograder", "--course", str(course), "grade",
                         A, "--submissions", str(subs), "--out", str(tmp_path / "out")])
    assert refused.returncode == 2
    assert "cannot grade safely with the uid fallback" in refused.stderr
    assert f"Fix: chmod -R go-rwx {course}" in refused.stderr
    assert not (tmp_path / "out").exists()
    shutil.rmtree(base)


def test_grade_refuses_a_checkouts_git_history_the_sandbox_could_read(tmp_path, private_course):
    """git's objects hold every version of the hidden tests: in a clone, they must be as closed
    to the sandbox's uid as the course (``private_course`` closes the withheld packages)."""
    base = Path(tempfile.mkdtemp(prefix="clone-"))
    base.chmod(0o755)
    course = base / "assignments"
    shutil.copytree(COURSE, course)
    course.chmod(0o700)
    (base / ".git").mkdir(mode=0o755)
    (base / ".git" / "packed-refs").write_text("the hidden tests' history\n")
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    shutil.copy(source_notebook(A), subs / "alice" / f"{A}.ipynb")
    try:
        refused = in_docker([sys.executable, "-m", "autograder", "--course", str(course), "grade",
                             A, "--submissions", str(subs), "--out", str(tmp_path / "out")])
    finally:
        shutil.rmtree(base)
    assert refused.returncode == 2 and f"chmod -R go-rwx {base / '.git'}" in refused.stderr


def test_grade_refuses_while_a_withheld_package_is_readable(tmp_path, private_course):
    """A package no answer may use (here nltk) must be closed to the sandbox's uid, whose hook
    alone a student could get around; the fix named is the command that closes them all."""
    from autograder.isolation.exposure import package_folders

    nltk = package_folders(["nltk"])[0]
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    shutil.copy(source_notebook(A), subs / "alice" / f"{A}.ipynb")
    command = [sys.executable, "-m", "autograder", "--course", str(private_course), "grade", A,
               "--submissions", str(subs), "--out", str(tmp_path / "out")]
    nltk.chmod(0o755)
    try:
        refused = in_docker(command)
        doctor = in_docker([sys.executable, "-m", "autograder", "doctor"])
    finally:
        nltk.chmod(0o700)
    assert refused.returncode == 2 and f"chmod -R go-rwx {nltk}" in refused.stderr
    assert "READABLE to a sandbox's uid; fix: python -m autograder hide-withheld" in \
        doctor.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("python", ["this one", "one others can read"])
def test_the_hostile_suite_holds_under_the_uid_fallback(python):
    """The hostile suite, run again as root with only Docker's capabilities: every test whose
    outcome the isolation can change. With a Python others can read (an image's /usr), each
    runner is forked from its worker's template, and the template's own tests run too; with
    one they cannot (pyenv in /root, as here), each starts anew."""
    from autograder.isolation.exposure import python_readable_by_others

    env = {**os.environ, "SEQLAB_TEST_ISOLATION": "uid"}
    files = ["tests/test_hostile.py"]
    executable = sys.executable
    if python == "one others can read":
        if python_readable_by_others():
            pytest.skip("this Python is one others can read: the first run forked already")
        folder = Path(tempfile.mkdtemp(prefix="python-for-all-"))
        executable = python_others_can_read(folder)
        if executable is None:
            shutil.rmtree(folder)
            pytest.skip(f"no system Python {sys.version_info.major}.{sys.version_info.minor}")
        files.append("tests/test_template.py")
    try:
        run = in_docker([executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         "-m", "not same_under_every_isolation", *files], env=env, timeout=1500)
    finally:
        if executable != sys.executable:
            shutil.rmtree(folder)
    assert run.returncode == 0, run.stdout[-5000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]


@pytest.fixture(scope="module")
def gradescope(tmp_path_factory, private_course):
    """A Gradescope image, built by the bundle's own setup.sh into a folder laid out like
    /autograder (the local CPU wheel of torch instead of the download)."""
    from autograder.authoring.gradescope_bundle import bundle

    root = Path(tempfile.mkdtemp(prefix="gradescope-"))  # like /autograder: others may enter
    root.chmod(0o755)
    path = bundle(A, tmp_path_factory.mktemp("bundle") / "bundle.zip", private_course)
    with zipfile.ZipFile(path) as zf:
        zf.extractall(root / "source")
    for script in ("setup.sh", "run_autograder"):
        (root / "source" / script).chmod(0o755)
    torch = f"torch=={__import__('torch').__version__.split('+')[0]}"
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], capture_output=True,
                           text=True, timeout=1200,
                           env={**os.environ, "AUTOGRADER_ROOT": str(root),
                                "AUTOGRADER_TORCH": torch, "AUTOGRADER_PIP_FLAGS": ""})
    assert setup.returncode == 0, setup.stderr[-3000:]
    yield root
    shutil.rmtree(root, ignore_errors=True)


def run_autograder(root: Path, files: dict[str, bytes]) -> dict:
    """One Gradescope submission, graded with Docker's capabilities only."""
    sub, results = root / "submission", root / "results"
    shutil.rmtree(sub, ignore_errors=True)
    shutil.rmtree(results, ignore_errors=True)
    sub.mkdir()
    for name, data in files.items():
        (sub / name).write_bytes(data)
    done = subprocess.run(docker_capabilities([str(root / "source" / "run_autograder")]),
                          env={**os.environ, "AUTOGRADER_ROOT": str(root)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert results.stat().st_mode & 0o077 == 0  # the results are root's alone
    return json.loads((results / "results.json").read_text())


def test_gradescope_bundle_end_to_end_with_dockers_capabilities(gradescope, tmp_path):
    from autograder.authoring.release import release

    solution = run_autograder(gradescope, {"hw.ipynb": source_notebook(A).read_bytes()})
    assert solution["score"] == 18, solution["output"]
    assert solution["output"].startswith("Graded in isolation: uid fallback")
    stub = release(A, tmp_path / "release") / f"{A}.ipynb"
    untouched = run_autograder(gradescope, {f"{A}.ipynb": stub.read_bytes()})
    assert untouched["score"] == 0 and len(untouched["tests"]) == 7
    master = gradescope / "source" / "course" / "source" / A / f"{A}.ipynb"
    spy = json.loads(source_notebook(A).read_text())
    spy["cells"].insert(3, {"cell_type": "code", "metadata": {}, "outputs": [],
                            "execution_count": None, "source": (
        "import json, os\nfor path in ["
        f"{str(master)!r}, {str(gradescope / 'results' / 'results.json')!r}]:\n"
        "    try:\n        open(path, 'a').write('x')\n        print('WROTE', path)\n"
        "    except OSError as err:\n        print('blocked', type(err).__name__)\n")})
    hostile = run_autograder(gradescope, {"hw.ipynb": json.dumps(spy).encode()})
    assert hostile["score"] == 18 and "WROTE" not in json.dumps(hostile)
    assert "_oracle_counts" not in json.dumps(hostile)
    wrong = run_autograder(gradescope, {"report.pdf": b"%PDF-1.4 not a notebook"})
    assert wrong["score"] == 0 and "a PDF was submitted (report.pdf)" in wrong["output"]
    assert len(wrong["tests"]) == 7
