import fcntl
import os
import shutil
import socket
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import matplotlib
import pytest
from helpers import Handler

import seqlab  # noqa: F401  before any test imports torch: how its threads wait (seqlab.threads)

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[1]
# Real corpora for tests live beside the repository on course machines; a fresh clone lacks them.
SHARED_DATA = Path(os.environ.get("SEQLAB_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_file():
    def get(relative: str) -> Path:
        path = SHARED_DATA / relative
        if not path.exists():
            pytest.skip(f"{path} not present (real corpora are only on course machines)")
        return path

    return get


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test reads or fills the user's real data cache or results folder."""
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "seqlab-cache"))
    monkeypatch.delenv("SEQLAB_RESULTS", raising=False)
    monkeypatch.delenv("SEQLAB_DEVICE", raising=False)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def closed_port():
    """A loopback port nobody listens on: connecting fails at once, like a machine offline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class LectureRuns:
    """Each lecture executed once per test session in FAST mode, into one folder, as ``make
    course`` does: the notebook tests time and check these runs, and the book test builds the
    book from them, whichever asks first (so no lecture runs twice, in any test order)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._done: dict[str, float | BaseException] = {}

    def run(self, path: Path) -> float:
        """Seconds ``path`` took (it runs on first call); its failure, raised again, after."""
        from seqlab.course import run_notebook

        if path.name not in self._done:
            try:
                with pytest.MonkeyPatch.context() as patch:
                    patch.chdir(self.folder.parent)  # a relative folder, as `make course` passes
                    patch.delenv("OMP_NUM_THREADS", raising=False)
                    self._done[path.name] = run_notebook(path, Path(self.folder.name))
            except Exception as err:
                self._done[path.name] = err
        outcome = self._done[path.name]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def all(self, paths) -> Path:
        """Run every lecture of ``paths`` not run yet; return the folder of their runs."""
        for path in paths:
            self.run(path)
        return self.folder


@pytest.fixture(scope="session")
def lecture_runs(tmp_path_factory):
    return LectureRuns(tmp_path_factory.mktemp("lectures") / "executed")


@pytest.fixture
def notebook_times(request):
    """Record how long a lecture took, for the summary below: on the test's report, which
    reaches the summary from whichever worker ran the test (``make test`` runs two)."""
    def record(name: str, seconds: float) -> None:
        request.node.user_properties.append(("fast_seconds", (name, seconds)))

    return record


def pytest_terminal_summary(terminalreporter):
    times = dict(value for reports in terminalreporter.stats.values() for report in reports
                 for key, value in getattr(report, "user_properties", ())
                 if key == "fast_seconds")
    if times:
        terminalreporter.section("notebook FAST times (goal: 00_setup < 30 s, lectures < 90 s)")
        for name, seconds in sorted(times.items()):
            terminalreporter.write_line(f"{name:48s} {seconds:6.1f} s")


# `make test` runs the tests in two processes (pytest-xdist): each module's tests stay in one
# of them, so its module fixtures (a graded class, a started server) are made once, and the
# notebook and book tests, which share the lecture runs, stay together. (xdist's own
# `--dist loadgroup` no longer groups on pytest 9.2: pytest-dev/pytest-xdist#1386.)
SHARED_SCOPES = {"test_notebooks": "lectures", "test_book": "lectures"}


def pytest_collection_modifyitems(items):
    """The lectures first: their runs take longest, so the other process has the rest."""
    items.sort(key=lambda item: Path(str(item.fspath)).stem not in SHARED_SCOPES)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED_SCOPES.get(Path(module).stem, module)

    config.option.loadscopereorder = False  # in the order above, not by count of tests
    return ByModule(config, log)


@pytest.fixture(scope="module")
def private_course(tmp_path_factory):
    """A copy of the course only root may read, as the uid fallback requires before grading,
    which also requires the packages no answer may use closed to other users, and every copy
    of them elsewhere on the host (a package mirror's wheels, say): they are, while the module
    runs (as ``python -m autograder hide-withheld`` leaves them, and as an image that grades
    holds none), then as before."""
    from autograder.course import COURSE
    from autograder.isolation.exposure import hide_withheld, package_folders, readable_copies
    from autograder.isolation.limits import WITHHELD

    # the host's packages are shared by every test process: one such module at a time, or one
    # would open them while another grades (and close another's temporary copies)
    lock = (tmp_path_factory.getbasetemp().parent / "withheld-packages.lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    copy = tmp_path_factory.mktemp("course") / "assignments"
    shutil.copytree(COURSE, copy)
    copy.chmod(0o700)
    modes = {folder: folder.stat().st_mode for folder in package_folders(WITHHELD)}
    hide_withheld()
    if os.geteuid() == 0:
        readable_copies.cache_clear()
        for found in map(Path, readable_copies(WITHHELD)):
            modes[found] = found.stat().st_mode
            found.chmod(found.stat().st_mode & ~0o077)
        readable_copies.cache_clear()
    yield copy
    for folder, mode in modes.items():
        if folder.exists():  # a copy a test made may be gone
            folder.chmod(mode)
    readable_copies.cache_clear()
    lock.close()
