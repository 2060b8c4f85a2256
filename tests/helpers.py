"""Test helpers: a scripted HTTP server for download tests (good, missing, truncated and slow
files), a fresh virtual environment like a Colab runtime, headless Chromium for the tests
that look at pages as a person does, and the solution a student submits without a written
answer."""

import os
import subprocess
import sys
import sysconfig
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

BODY = b"To be, or not to be, that is the question.\n" * 200


class Handler(BaseHTTPRequestHandler):
    hits: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.hits.append(self.path)
        if self.path == "/ok.txt":
            self._send(BODY)
        elif self.path == "/other.txt":
            self._send(b"a different file\n")
        elif self.path == "/truncated.txt":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[:100])
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/slow.txt":
            time.sleep(3)
            self._send(BODY)
        else:
            self.send_error(404)

    def _send(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def fresh_venv(folder: Path) -> Path:
    """A fresh venv that sees this environment's packages (torch is not downloaded again), as a
    Colab runtime has them preinstalled, but not the course library."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([python, "-I", "-c", "import seqlab"], capture_output=True, text=True)
    assert probe.returncode != 0, "the fresh environment already sees the course library"
    return venv


def docker_capabilities(command: list[str]) -> list[str]:
    """``command`` run as root with only Docker's default capabilities, as in ``docker run``
    and Gradescope (no CAP_SYS_ADMIN, so no namespaces for bubblewrap). Needs capsh
    (libcap2-bin), which ``.ci/run`` installs."""
    import re
    import shlex

    from autograder.isolation.kinds import DOCKER_CAPABILITIES

    shown = subprocess.run(["capsh", "--print"], capture_output=True, text=True,
                           check=True).stdout
    bounding = re.search(r"^Bounding set =(.*)$", shown, re.MULTILINE).group(1).split(",")
    drop = [c for c in bounding if c and c.removeprefix("cap_") not in DOCKER_CAPABILITIES]
    return ["capsh", f"--drop={','.join(drop)}", "--", "-c", shlex.join(command)]


def python_others_can_read(folder: Path) -> str | None:
    """A Python every user may read (its standard library and packages), with this one's
    packages: this interpreter if it is one; else, as on an image where Python lives in /usr,
    a virtual environment of the system's Python of the same version in ``folder`` that reads
    this one's site-packages (and runs its tools: nbgrader calls alembic); else None."""
    from autograder.isolation.exposure import python_readable_by_others

    if python_readable_by_others():
        return sys.executable
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system = Path(f"/usr/bin/python{version}")
    if not system.exists():
        return None
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(folder)], check=True)
    site = folder / "lib" / f"python{version}" / "site-packages"
    ours = sysconfig.get_paths()["purelib"]
    (site / "ours.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    for tool in Path(sys.executable).parent.iterdir():
        if not (folder / "bin" / tool.name).exists():
            (folder / "bin" / tool.name).symlink_to(tool)
    folder.chmod(0o755)
    return str(folder / "bin" / "python")


def sandbox_program(name: str):
    """A program of the sandbox's own (``runner``, ``rules``, ``template``, ``become``,
    ``ending``, ``protocol``), imported as a sandbox imports it: from a folder where those
    programs lie beside each other, as plain modules. The grader never imports them; tests
    may, to look at them."""
    import importlib
    import tempfile

    from autograder.isolation.sandbox import PROGRAMS

    global _PROGRAMS
    if _PROGRAMS is None:
        import shutil

        _PROGRAMS = tempfile.mkdtemp(prefix="sandbox-programs-")
        for file, source in PROGRAMS.items():
            shutil.copy(source, Path(_PROGRAMS) / file)
        sys.path.insert(0, _PROGRAMS)
    return importlib.import_module(name)


_PROGRAMS = None


CHROMIUM = os.environ.get("SEQLAB_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync"]


def chromium():
    """Debian's Chromium through Playwright, for a fixture to ``yield from`` (Playwright's own
    browser download is not used). Skipped where it is absent, failed in CI, which installs it."""
    import pytest

    if not Path(CHROMIUM).exists():
        message = f"no Chromium at {CHROMIUM}: apt-get install chromium (or set SEQLAB_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs it (.ci/run): its absence there is a failure
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def screenshot_folder(name: str, tmp_path_factory) -> Path:
    """An empty ``$SEQLAB_ARTIFACTS/name`` (CI keeps that folder), else one in pytest's
    temporary folder."""
    import shutil

    where = os.environ.get("SEQLAB_ARTIFACTS")
    folder = (Path(where) if where else tmp_path_factory.mktemp("artifacts")) / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def coded_solution(assignment: str, course: Path | None = None) -> dict:
    """An assignment's source solution as JSON with its written answers as the release leaves
    them: a student who wrote every answer of code and no written answer. It earns every
    autograded point and its grade is final (a blank written answer scores 0 with no grader's
    hand), which is what a test of autograding needs."""
    import json

    from autograder.course import COURSE, source_notebook
    from autograder.intake.normalize import TEXT_STUB

    nb = json.loads(source_notebook(assignment, course or COURSE).read_text())
    for cell in nb["cells"]:
        info = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] == "markdown" and info.get("grade") and info.get("solution"):
            cell["source"] = TEXT_STUB
    return nb
