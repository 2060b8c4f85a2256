"""The student edition: everything students get, and nothing else, as a folder to push as its
own repository.

This repository is the instructor's. ``assignments/source`` holds every solution and hidden test,
so it stays private, and students get the edition that ``python -m autograder publish --out DIR``
builds (nbgrader's practice: a private source, a published release):

- ``notebooks/``: the lectures, without outputs;
- ``lib/seqlab/``: the course library;
- ``assignments/NN_topic/NN_topic.ipynb``: the release of every assignment (``release``);
- ``autograder/checks.py`` (with ``guard.py``, which it uses) and a small ``__init__``: all the
  visible tests import;
- ``pyproject.toml`` (package ``seqlab`` and that small ``autograder``, the course's runtime
  dependencies) and a README for students;
- with ``--book SITE``: ``book/``, the course's book (``python -m autograder book``, ``make
  site``), and ``.github/workflows/pages.yml``, which publishes it with GitHub Pages.

Every notebook gets a Colab badge and a Colab-only setup cell pointing at the edition's own
repository (``--repo``, default: ``[tool.seqlab.colab]`` of pyproject.toml, the course's public
address), which installs the library and the checks. The edition is built in a temporary folder
beside ``--out`` and scanned before it replaces anything: if any file would hold a line of a
solution or hidden-test region of any assignment (misspelled markers included), ``publish``
raises ``EditionLeak`` naming the file and writes nothing. Lines that the library itself holds
are not secrets (the library is the public reference implementation; answers that call it earn
nothing), and neither are trivial lines such as ``pass``, ``else:`` or ``)``.

``--out`` may be a clone of the edition's repository: its ``.git`` is kept and everything else
replaced, so a new term's edition is ``publish``, ``git commit``, ``git push``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import nbformat

from ..course import COURSE, assignments, source_notebook
from ..intake.markers import BEGIN, END
from .release import regions, release

ROOT = Path(__file__).resolve().parents[2]
CHECKS = tuple(Path(__file__).resolve().parents[1] / name for name in ("checks.py", "guard.py"))
_POINTER = re.compile(r"assignments/source/(\d\d_\w+)(?:/\1\.ipynb)?")
# A region marker, misspelled or not, anywhere in the edition (the release check is stricter).
_MARKER = re.compile(r"^#+\s*(BEGIN|END)\s+(SOL|HID)", re.IGNORECASE)
_WORD = re.compile(r"\w+")

AUTOGRADER_INIT = '''"""The checks the assignments' visible tests use (``autograder.checks``, and
``autograder.guard``, which applies the rule on torch's attention as the grader does).

This is the student edition of the course: the grader itself is not part of it.
"""
'''


class EditionLeak(RuntimeError):
    """The student edition would contain solution or hidden-test text."""


def trivial(line: str) -> bool:
    """A line too plain to give anything away: at most one word (``pass``, ``else:``, ``)``)."""
    return len(_WORD.findall(line)) <= 1


class _HTMLText(HTMLParser):
    """The text of a page, its lines as a reader sees them (code highlighting wraps every
    token of a line in its own tag, so a line of code is found only in the text)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)


def _text_lines(path: Path) -> list[str]:
    """The lines a reader of ``path`` sees: cell sources and outputs of a notebook, the text of
    a web page, else the file's text."""
    raw = path.read_bytes().decode("utf-8", errors="replace")
    if path.suffix in (".html", ".htm"):
        page = _HTMLText()
        page.feed(raw)
        page.close()
        return "".join(page.parts).splitlines() + raw.splitlines()
    if path.suffix == ".ipynb":
        try:
            nb = json.loads(raw)
            parts = []
            for cell in nb.get("cells", []):
                parts.append(_join(cell.get("source", "")))
                for output in cell.get("outputs", []) or []:
                    parts.append(_join(output.get("text", "")))
                    parts.extend(_join(v) for v in (output.get("data") or {}).values())
            raw = "\n".join(parts)
        except (ValueError, AttributeError, TypeError):
            pass  # scanned as plain text
    return raw.splitlines()


def _join(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def library_lines(root: Path = ROOT) -> set[str]:
    """Every stripped line of the course library's source and of the checks the edition
    ships: public by design."""
    paths = [*sorted((root / "lib" / "seqlab").rglob("*.py")), *CHECKS]
    return {line.strip() for path in paths
            for line in path.read_text(errors="replace").splitlines()}


def course_secrets(course: Path = COURSE, root: Path = ROOT) -> dict[str, list[str]]:
    """Line -> the assignments whose solution or hidden-test regions hold it. Lines that the
    course publishes anyway are left out: those of the library and those outside the regions
    of any assignment (the release keeps them), and trivial ones."""
    public = library_lines(root)
    hidden = {}
    for name in assignments(course):
        secret, visible = regions(nbformat.read(source_notebook(name, course), as_version=4))
        hidden[name] = secret
        public |= visible
    secrets: dict[str, list[str]] = {}
    for name, lines in hidden.items():
        for line in sorted(lines - public):
            if not trivial(line):
                secrets.setdefault(line, []).append(name)
    return secrets


def refuse_leaks(folder: Path, course: Path, root: Path, what: str) -> None:
    """``EditionLeak`` naming the first secret line ``folder`` holds (see ``edition_leaks``);
    ``what`` names the folder for the message ("the student edition", "the book")."""
    found = edition_leaks(folder, course, root)
    if found:
        where, line, why = found[0]
        raise EditionLeak(f"{what} would contain {len(found)} secret line(s): {where} holds "
                          f"{line!r}, {why}; nothing was written")


def edition_leaks(folder: Path, course: Path = COURSE, root: Path = ROOT
                  ) -> list[tuple[str, str, str]]:
    """(file, line, what it is) for every secret line or region marker found in ``folder``."""
    secrets = course_secrets(course, root)
    found = []
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if relative.startswith(".git/"):
            continue
        for line in _text_lines(path):
            text = line.strip()
            if text in secrets:
                found.append((relative, text, "a line of the solutions or hidden tests of "
                              + ", ".join(secrets[text])))
            elif _MARKER.match(text) or (relative.startswith("assignments/") and
                                         (BEGIN.match(text) or END.match(text))):
                found.append((relative, text, "a solution or hidden-test region marker"))
    return found


def allowed(relative: str, names: list[str]) -> bool:
    """Whether a file may be part of the edition at all (anything else is refused)."""
    parts = relative.split("/")
    if relative in ("README.md", "pyproject.toml", "autograder/__init__.py",
                    *(f"autograder/{path.name}" for path in CHECKS)):
        return True
    if parts[0] == "notebooks":
        return len(parts) == 2 and re.fullmatch(r"\d\d_\w+\.ipynb", parts[1]) is not None
    if parts[:2] == ["lib", "seqlab"]:
        return "__pycache__" not in parts and not relative.endswith(".pyc")
    if parts[0] == "book" or relative == PAGES_WORKFLOW_PATH:
        return True  # scanned like the rest
    return parts[0] == "assignments" and len(parts) >= 3 and parts[1] in names


# ---------------------------------------------------------------------------- building
def _write_json(path: Path, nb: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _clean(nb: dict) -> dict:
    """No outputs, and lectures point at the released assignments, never at their source."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        text = _join(cell["source"])
        if _POINTER.search(text):
            cell["source"] = _lines(_POINTER.sub(r"assignments/\1/\1.ipynb", text))
    return nb


def _lectures(build: Path, root: Path, repo: str, branch: str) -> None:
    from seqlab.course import apply_colab

    paths = []
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        target = build / "notebooks" / path.name
        _write_json(target, _clean(json.loads(path.read_text())))
        paths.append(target)
    apply_colab(paths, repo, branch, root=build)


def _assignment(name: str, build: Path, course: Path, repo: str, branch: str) -> None:
    from seqlab.course import colab_header

    with tempfile.TemporaryDirectory() as tmp:
        released = release(name, Path(tmp), course)  # refuses a release that leaks
        target = build / "assignments" / name
        shutil.copytree(released, target)
    path = target / f"{name}.ipynb"
    nb = _clean(json.loads(path.read_text()))
    badge, setup = colab_header(path, repo, branch, build)
    nb["cells"][:0] = [
        {"cell_type": "markdown", "id": "colab-badge", "metadata": {}, "source": _lines(badge)},
        {"cell_type": "code", "execution_count": None, "id": "colab-setup", "metadata": {},
         "outputs": [], "source": _lines(setup)},
    ]
    _write_json(path, nb)


def _packages(root: Path) -> list[str]:
    library = root / "lib" / "seqlab"
    return sorted(".".join(("seqlab",) + p.parent.relative_to(library).parts)
                  for p in library.rglob("__init__.py") if "__pycache__" not in p.parts)


def _toml_list(values: list[str]) -> str:
    return "[\n" + "".join(f"    {json.dumps(v)},\n" for v in values) + "]"


def pyproject(root: Path, repo: str, branch: str) -> str:
    """The edition's pyproject.toml: the library and the checks, the course's runtime deps."""
    import tomllib

    main = tomllib.loads((root / "pyproject.toml").read_text())
    project, build = main["project"], main["build-system"]
    packages = _packages(root) + ["autograder"]
    license_ = project.get("license")
    license_line = f"license = {json.dumps(license_)}\n" if isinstance(license_, str) else ""
    shipped = main["tool"]["setuptools"].get("package-data", {})  # the corpora FAST mode reads
    package_data = "".join(
        ["\n[tool.setuptools.package-data]\n"]
        + [f"{json.dumps(package)} = {_toml_list(globs)}\n" for package, globs in shipped.items()]
    ) if shipped else ""
    return f"""[build-system]
requires = {json.dumps(build["requires"])}
build-backend = {json.dumps(build["build-backend"])}

[project]
name = {json.dumps(project["name"])}
version = {json.dumps(project["version"])}
description = "Neural sequence models course, student edition: lectures, library, assignments"
readme = "README.md"
requires-python = {json.dumps(project.get("requires-python", ">=3.10"))}
{license_line}dependencies = {_toml_list(project["dependencies"])}

[project.optional-dependencies]
# On your laptop: pip install -e ".[lab]" brings JupyterLab too.
lab = ["jupyterlab>=4.0", "ipywidgets>=8.0"]

[tool.setuptools]
package-dir = {{ "seqlab" = "lib/seqlab", "autograder" = "autograder" }}
packages = {json.dumps(packages)}
{package_data}
# The address every Colab badge and setup cell of this edition points at.
[tool.seqlab.colab]
repository = {json.dumps(repo)}
branch = {json.dumps(branch)}
"""


def how_to_run(repo: str) -> str:
    """The students' guide to running the course, on Colab and on a laptop (markdown, level-2
    headings): the edition's README and the book's home page both show it."""
    from seqlab.course import github_repository

    folder = github_repository(repo).split("/")[1]
    return f"""## On Google Colab

Open a notebook from its "Open in Colab" badge. Its first code cell installs the course library
from the course's repository, only on Colab and without touching Colab's torch.
For the lectures' full mode choose *Runtime → Change runtime type → GPU*; without a GPU they
run in FAST mode (small data, a minute or so). Colab does not keep your changes: use
*File → Save a copy in Drive* before you start an assignment.

## On your laptop

With Python 3.10 or newer:

```bash
git clone {repo}.git
cd {folder}
python -m venv .venv
source .venv/bin/activate          # Windows: .venv\\Scripts\\activate
pip install -e ".[lab]"            # the library, the assignments' checks, JupyterLab
jupyter lab
```

If you want a particular torch (a CPU-only wheel, a CUDA build), install it before the last
two commands; the course asks only for `torch>=2.2`.
"""


# The students' guide to the assignments, from their side: the README and the book show it.
HOW_ASSIGNMENTS_WORK = """## Assignments

Each assignment notebook says what to implement, its points and its rules. Write your code in
place of `raise NotImplementedError()` in the answer cells, and do not rename the functions or
change their signatures. Each test cell holds visible tests: run them as you go. When the
notebook is graded, the same cells also run hidden tests (random inputs against a reference,
edge cases, strict types), and each test cell scores on its own. Calling the course library's
own implementation (`seqlab`) inside an answer earns nothing for that answer.

## Submitting

1. *Kernel → Restart Kernel and Run All Cells* (Colab: *Runtime → Restart and run all*), and
   check that every visible test prints "visible tests passed".
2. *File → Download* the notebook (Colab: *File → Download → Download .ipynb*).
3. Upload that `.ipynb` file where your course collects assignments. Its name does not matter;
   a PDF, HTML or `.py` export cannot be graded.
"""


def readme(build: Path, repo: str, branch: str) -> str:
    """The students' README: run locally or on Colab, solve, submit."""
    from seqlab.course import colab_url

    def colab(relative: str) -> str:
        return f"[open in Colab]({colab_url(repo, branch, relative)})"

    lectures = "\n".join(f"| `{p.name}` | {colab(f'notebooks/{p.name}')} |"
                         for p in sorted((build / "notebooks").glob("*.ipynb")))
    tasks = "\n".join(f"| `assignments/{p.name}/{p.name}.ipynb` | "
                      f"{colab(f'assignments/{p.name}/{p.name}.ipynb')} |"
                      for p in sorted((build / "assignments").iterdir()))
    book = (f"\nRead the lectures with their outputs and plots, and the library's reference, as a "
            f"book: {pages_address(repo)}\n" if (build / "book").is_dir() else "")
    return f"""# Neural sequence models: from n-grams to BERT

Lecture notebooks, the small library they all import (`seqlab`), and the assignments. Run a
lecture top to bottom and read its plots; then solve the matching assignment and submit it.
{book}
| lecture | |
|---|---|
{lectures}

| assignment | |
|---|---|
{tasks}

{how_to_run(repo)}
{HOW_ASSIGNMENTS_WORK}
## Updates

The course may publish fixes during the term: `git pull` in your clone (keep your answers in a
copy of the assignment notebook so that a pull never conflicts with them), or open the notebook
again from its badge on Colab.
"""


# ---------------------------------------------------------------------------- the book
PAGES_WORKFLOW_PATH = ".github/workflows/pages.yml"


def pages_workflow(branch: str) -> str:
    """GitHub Actions: publish ``book/`` with GitHub Pages on every push to ``branch``."""
    return f"""# Publishes the course's book (book/, built by the instructors) with GitHub Pages.
# Once per repository: Settings -> Pages -> Build and deployment -> Source: GitHub Actions.
name: book
on:
  push:
    branches: [{json.dumps(branch)}]
    paths: ["book/**", "{PAGES_WORKFLOW_PATH}"]
  workflow_dispatch:
permissions:
  contents: read
  pages: write
  id-token: write
concurrency:
  group: pages
  cancel-in-progress: false
jobs:
  deploy:
    runs-on: ubuntu-latest
    environment:
      name: github-pages
      url: ${{{{ steps.deployment.outputs.page_url }}}}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/configure-pages@v5
      - uses: actions/upload-pages-artifact@v3
        with:
          path: book
      - id: deployment
        uses: actions/deploy-pages@v4
"""


def pages_address(repo: str) -> str:
    """Where GitHub Pages serves the repository ``repo``."""
    from seqlab.course import github_repository

    owner, name = github_repository(repo).split("/")
    site = f"{owner.lower()}.github.io"
    return f"https://{site}/" if name.lower() == site else f"https://{site}/{name}/"


def is_built_book(folder: Path) -> bool:
    """Whether ``folder`` holds a book as ``python -m autograder book`` writes it."""
    return all((Path(folder) / name).exists() for name in (".buildinfo", "index.html", "_static"))


_COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/"
                         r"([\w./-]+?)/(?:notebooks|assignments)/")


def check_book(book: Path, repo: str, branch: str) -> None:
    """``ValueError`` unless ``book`` is a built book whose Colab links open ``repo`` at
    ``branch``, the edition it is published with."""
    from seqlab.course import github_repository

    if not is_built_book(book):
        raise ValueError(f"--book {book} is not a built book (no index.html, .buildinfo and "
                         "_static): build it with make site")
    found = {match for page in book.rglob("*.html")
             for match in _COLAB_LINK.findall(page.read_text(errors="replace"))}
    want = (github_repository(repo), branch)
    if not found or found != {want}:
        got = ", ".join(f"{name} @ {ref}" for name, ref in sorted(found)) or "none"
        raise ValueError(f"--book {book}: its Colab links open {got}, not this edition "
                         f"({want[0]} @ {want[1]}); build it again after python -m seqlab.course "
                         f"colab --repo {repo} --branch {branch}")


def _add_book(build: Path, book: Path, branch: str) -> None:
    """Copy the book into the edition, with the workflow that publishes it."""
    shutil.copytree(book, build / "book")
    (build / PAGES_WORKFLOW_PATH).parent.mkdir(parents=True)
    (build / PAGES_WORKFLOW_PATH).write_text(pages_workflow(branch))


def _build(build: Path, course: Path, root: Path, repo: str, branch: str, names: list[str],
           book: Path | None = None, log=print) -> None:
    with ThreadPoolExecutor(max_workers=min(4, len(names) or 1)) as pool:
        jobs = [pool.submit(_assignment, name, build, course, repo, branch) for name in names]
        _lectures(build, root, repo, branch)
        log(f"  lectures: {len(list((build / 'notebooks').glob('*.ipynb')))} notebooks, their "
            f"Colab badges pointing at {repo} ({branch})")
        shutil.copytree(root / "lib" / "seqlab", build / "lib" / "seqlab",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        log("  the library: lib/seqlab")
        for name, job in zip(names, jobs):
            job.result()
            log(f"  assignment {name}: released (no solution, no hidden test)")
    (build / "autograder").mkdir()
    (build / "autograder" / "__init__.py").write_text(AUTOGRADER_INIT)
    for path in CHECKS:
        shutil.copy(path, build / "autograder" / path.name)
    (build / "pyproject.toml").write_text(pyproject(root, repo, branch))
    if book is not None:
        _add_book(build, book, branch)
    (build / "README.md").write_text(readme(build, repo, branch))


# ---------------------------------------------------------------------------- placing
def _check_target(out: Path, root: Path, course: Path) -> None:
    """Refuse to replace anything that is not an empty folder, an earlier edition or a clone
    of the edition's repository, and never the instructor's repository."""
    for precious in (root, course):
        if precious.resolve() == out or precious.resolve().is_relative_to(out):
            raise ValueError(f"--out {out} holds the instructor's repository; write the student "
                             "edition somewhere else")
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    entries = {p.name for p in out.iterdir()}
    if (out / "assignments" / "source").exists():
        raise ValueError(f"--out {out} holds assignments/source: it looks like the instructor's "
                         "repository, which publish never overwrites")
    edition = {"README.md", "pyproject.toml", "assignments", "lib"} <= entries
    if entries and ".git" not in entries and not edition:
        raise ValueError(f"--out {out} is not empty and is neither a clone of the edition's "
                         "repository (no .git) nor an earlier edition; choose an empty or new "
                         "folder")


def place(build: Path, out: Path) -> None:
    """Put the finished folder (an edition, a book) at ``out``, keeping a clone's ``.git``."""
    if not out.exists():
        os.replace(build, out)
        return
    git = out / ".git"
    if git.exists():
        os.replace(git, build / ".git")
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
    try:
        os.replace(out, old / out.name)
        os.replace(build, out)
    except OSError:
        if (old / out.name).exists() and not out.exists():
            os.replace(old / out.name, out)
        if (build / ".git").exists() and not git.exists():
            os.replace(build / ".git", git)
        raise
    shutil.rmtree(old, ignore_errors=True)


def released(course: Path = COURSE, chosen: list[str] | None = None) -> list[str]:
    """The assignments the edition holds: ``chosen``, else the ``released`` list of
    ``course/course.toml``, else every assignment; ValueError naming an unknown one."""
    known = assignments(course)
    if chosen is None and (course / "course.toml").exists():
        import tomllib

        chosen = tomllib.loads((course / "course.toml").read_text()).get("released")
        if not isinstance(chosen, list) or not all(isinstance(n, str) for n in chosen):
            raise ValueError(f"{course / 'course.toml'}: released must be a list of assignment "
                             f"names, got {chosen!r}")
    if chosen is None:
        return known
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise ValueError(f"unknown assignment(s) {', '.join(unknown)}; known: "
                         f"{', '.join(known)}")
    return [n for n in known if n in chosen]


def publish(out: Path, repo: str | None = None, branch: str | None = None,
            course: Path = COURSE, root: Path = ROOT, names: list[str] | None = None,
            book: Path | None = None, log=print) -> Path:
    """Build the student edition into ``out`` (see the module docstring) with the assignments
    ``names`` (default: ``released``) and, when given, the course's ``book`` (``python -m
    autograder book``) and its GitHub Pages workflow; return ``out``.

    Raises ``EditionLeak`` (and writes nothing) if any file would hold solution or hidden-test
    text, ``ValueError`` for a bad address (the course's placeholder one included: the
    edition's badges must lead students somewhere), or an ``out`` it must not replace.
    """
    from seqlab.course import PLACEHOLDER_REPOSITORY, colab_address, github_repository

    saved_repo, saved_branch = colab_address(root / "pyproject.toml")
    repo, branch = (repo or saved_repo).rstrip("/"), branch or saved_branch
    if repo == PLACEHOLDER_REPOSITORY:
        raise ValueError(f"the edition's Colab badges and setup cells would point at the "
                         f"placeholder address {repo}; pass --repo with the edition's GitHub "
                         "address, or set it once for the course: python -m seqlab.course "
                         "colab --repo URL")
    github_repository(repo)
    names = released(Path(course), names)
    if not re.fullmatch(r"[\w./-]+", branch):
        raise ValueError(f"branch must be a plain branch name, got {branch!r}")
    if book is not None:
        check_book(Path(book), repo, branch)
    out = Path(out).resolve()
    _check_target(out, Path(root), Path(course))
    out.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{out.name}-new-", dir=out.parent))
    log(f"building the student edition for {out}: {len(names)} assignment(s)")
    try:
        _build(build, Path(course), Path(root), repo, branch, names, book, log)
        stray = sorted(p.relative_to(build).as_posix() for p in build.rglob("*")
                       if p.is_file() and not allowed(p.relative_to(build).as_posix(), names))
        if stray:
            raise EditionLeak(f"the student edition would contain {len(stray)} file(s) that do "
                              f"not belong in it, e.g. {stray[0]}; nothing was written")
        log("  scanning every file for solution or hidden-test lines")
        refuse_leaks(build, course, root, "the student edition")
        place(build, out)
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)
    return out
