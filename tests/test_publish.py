"""The student edition: complete, free of every solution and hidden test, installable the way
the Colab setup cell installs it, and its assignments' visible tests run there."""

import ast
import glob
import json
import os
import re
import shutil
import subprocess
import textwrap
import tokenize
from pathlib import Path

import nbformat
import pytest
import tomllib
from helpers import fresh_venv, sandbox_program

from autograder.authoring.publish import (
    ROOT,
    EditionLeak,
    course_secrets,
    edition_leaks,
    publish,
    trivial,
)
from autograder.authoring.release import ReleaseLeak, leaks, regions
from autograder.course import COURSE, assignments, source_notebook
from autograder.intake.normalize import plan, read_notebook
from seqlab.course import colab_header, colab_url

REPO, BRANCH = "https://github.com/acme/nlp-students", "fall26"
NAMES = assignments()
# Anything of the instructor's: the nbgrader course, grader internals, tests, tooling.
FORBIDDEN = ("assignments/source", "gradebook", "nbgrader_config", "late_policy", "tests/",
             "benchmarks/", ".ci/", "Makefile", "environment.yml")


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    book = _fake_book(tmp_path_factory.mktemp("book") / "site", REPO, BRANCH)
    return publish(tmp_path_factory.mktemp("published") / "edition", REPO, BRANCH, book=book)


def _fake_book(folder: Path, repo: str, branch: str) -> Path:
    """What publish needs of a book (tests/test_book.py builds and checks the real one)."""
    (folder / "_static").mkdir(parents=True)
    (folder / ".buildinfo").write_text("# Sphinx build info\n")
    (folder / "_static" / "book.css").write_text("body { margin: 0; }\n")
    (folder / "index.html").write_text(
        f'<a href="{colab_url(repo, branch, "notebooks/01_language_models.ipynb")}">Colab</a>\n')
    return folder


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_the_edition_holds_what_students_need_and_nothing_else(edition):
    files = _files(edition)
    lectures = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    library = sorted(p.relative_to(ROOT / "lib").as_posix() for p in
                     (ROOT / "lib" / "seqlab").rglob("*") if p.is_file()
                     and "__pycache__" not in p.parts and p.suffix != ".pyc")
    assert "seqlab/data/bundled/tinyshakespeare.txt.gz" in library  # the shipped corpora
    assert files == sorted(
        ["README.md", "pyproject.toml", "autograder/__init__.py", "autograder/checks.py",
         "autograder/guard.py", ".github/workflows/pages.yml", "book/.buildinfo",
         "book/index.html", "book/_static/book.css"]
        + [f"notebooks/{name}" for name in lectures] + [f"lib/{path}" for path in library]
        + [f"assignments/{name}/{name}.ipynb" for name in NAMES])
    assert not [f for f in files if any(bad in f for bad in FORBIDDEN)]
    assert [f for f in files if f.startswith("autograder/")] == [
        "autograder/__init__.py", "autograder/checks.py", "autograder/guard.py"]
    for name in ("checks.py", "guard.py"):
        assert (edition / "autograder" / name).read_text() == \
            (ROOT / "autograder" / name).read_text()
    shipped = tomllib.loads((edition / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert shipped["package-data"]["seqlab.data"] == [
        "bundled/*.gz", "bundled/README.md", "measured/*.json"]


def test_no_line_of_any_solution_or_hidden_test_anywhere(edition):
    """Every file, notebooks cell by cell, against every line of every assignment's solution
    and hidden-test regions. Not counted: one-word lines (``pass``, ``else:``, ``)``), lines the
    library or the shipped checks hold (public: answers calling the library earn nothing), and
    lines some assignment shows in its public cells (the edition holds those anyway)."""
    shipped = [*(ROOT / "lib" / "seqlab").rglob("*.py"), ROOT / "autograder" / "checks.py",
               ROOT / "autograder" / "guard.py"]  # public by design: the edition holds them
    public = {line.strip() for p in shipped for line in p.read_text().splitlines()}
    hidden = {}
    for name in NAMES:
        inside, outside = regions(nbformat.read(source_notebook(name), as_version=4))
        public |= outside
        for line in inside:
            hidden.setdefault(line, set()).add(name)
    secret = {line: names for line, names in hidden.items()
              if line not in public and not trivial(line)}
    assert len(secret) > 500  # the scan has something to find
    found = []
    for relative in _files(edition):
        path = edition / relative
        if path.suffix == ".gz":  # the shipped corpora: compressed text, no course code
            continue
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
        found += [(relative, line.strip(), secret[line.strip()]) for line in text.splitlines()
                  if line.strip() in secret]
    assert not found, found[:5]
    assert edition_leaks(edition) == []
    for name in NAMES:  # each release, against its own source with no exemption at all
        released = edition / "assignments" / name / f"{name}.ipynb"
        assert leaks(source_notebook(name), released) == [], name
        assert "BEGIN SOLUTION" not in released.read_text()
        assert "HIDDEN TESTS" not in released.read_text()


# A path a reader could try to open: folders, a name and an extension (URLs and ~/ excluded),
# or one of the instructor's folders on its own.
CITED = re.compile(r"(?<![\w./:~$-])((?:[\w.*-]+/)+[\w.*-]+\.(?:py|ipynb|json|md|txt|gz|csv|"
                   r"toml|ya?ml|sh|html)\b|(?:benchmarks|tests|\.ci)/)")


def _student_text(path: Path) -> str:
    """What a student reads in ``path``: a notebook's cells; a module's docstrings and comments
    (``show_source`` shows them, and the library is theirs to read)."""
    if path.suffix == ".ipynb":
        return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    tree = ast.parse(path.read_text())
    docs = [ast.get_docstring(node) or "" for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef))]
    with path.open() as handle:
        comments = [tok.string for tok in tokenize.generate_tokens(handle.readline)
                    if tok.type == tokenize.COMMENT]
    return "\n".join(docs + comments)


def test_what_students_read_cites_only_files_of_the_edition(edition):
    """A lecture, or a docstring or comment of the library, that names a file sends the student
    to it: it must be in the edition (the instructors' benchmarks/ and tests/ are not)."""
    readable = [*sorted(edition.glob("notebooks/*.ipynb")),
                *sorted((edition / "lib" / "seqlab").rglob("*.py"))]
    bases = [edition, edition / "lib", edition / "lib" / "seqlab"]
    missing, cited = [], 0
    for path in readable:
        for match in CITED.finditer(_student_text(path)):
            name, cited = match.group(1), cited + 1
            if not any(glob.glob(str(base / name)) for base in [*bases, path.parent]):
                missing.append(f"{path.relative_to(edition)} cites {name}")
    assert cited > 8  # the lectures point at their assignments, at least
    assert not missing, "\n".join(missing)


def test_every_notebook_opens_on_colab_from_the_edition(edition):
    for path in sorted(edition.glob("notebooks/*.ipynb")) + \
            sorted(edition.glob("assignments/*/*.ipynb")):
        nb = json.loads(path.read_text())
        badge, setup = colab_header(path, REPO, BRANCH, edition)
        cells = ["".join(c["source"]) for c in nb["cells"][:2]]
        assert badge in cells[0] and cells[1] == setup, path
        assert "github/acme/nlp-students/blob/fall26/" in badge
        assert "git+https://github.com/acme/nlp-students@fall26" in setup
        assert all(c.get("outputs", []) == [] for c in nb["cells"])
        assert "assignments/source" not in path.read_text()
    pyproject = (edition / "pyproject.toml").read_text()
    assert 'repository = "https://github.com/acme/nlp-students"' in pyproject
    assert '"autograder"' in pyproject and '"seqlab"' in pyproject
    readme = (edition / "README.md").read_text()
    assert "File → Download" in readme and "colab.research.google.com/github/acme" in readme


def test_the_book_is_published_with_github_pages(edition, tmp_path):
    assert "as a book: https://acme.github.io/nlp-students/" in (edition / "README.md").read_text()
    workflow = (edition / ".github" / "workflows" / "pages.yml").read_text()
    assert 'branches: ["fall26"]' in workflow and "path: book" in workflow
    assert "actions/deploy-pages" in workflow
    other = _fake_book(tmp_path / "other", REPO, "main")
    with pytest.raises(ValueError, match="Colab links open acme/nlp-students @ main, not this"):
        publish(tmp_path / "out", REPO, BRANCH, book=other)
    (tmp_path / "notes").mkdir()
    with pytest.raises(ValueError, match="not a built book"):
        publish(tmp_path / "out", REPO, BRANCH, book=tmp_path / "notes")
    assert not (tmp_path / "out").exists()


def test_a_secret_line_is_found_in_a_web_page_however_it_is_highlighted(tmp_path):
    """The book's pages show code highlighted: each token of a line in a tag of its own."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    line = next(line for line in course_secrets() if "(" in line and "=" in line)
    page = highlight(f"x = 1\n{line}\n", PythonLexer(), HtmlFormatter())
    assert line not in page  # only the page's text holds it
    (tmp_path / "page.html").write_text(f"<html><body>{page}</body></html>")
    assert [found[:2] for found in edition_leaks(tmp_path)] == [("page.html", line)]


def test_the_colab_cells_cost_nothing_when_graded(edition):
    for name in NAMES:
        edition_nb = read_notebook(edition / "assignments" / name / f"{name}.ipynb")
        steps = plan(read_notebook(source_notebook(name)), edition_nb)
        added = [s for s in steps if s.kind == "code" and not s.grade_id]
        assert len(added) == 1 and "google.colab" in added[0].source
        compile(sandbox_program("runner").skip_shell(added[0].source), "<setup>",
                "exec")  # the %pip line is skipped


RUNNER = textwrap.dedent('''
    """Run each notebook's code cells in order, as a student would before answering."""
    import json, re, sys, traceback
    report = {}
    for path in sys.argv[1:]:
        nb = json.load(open(path))
        ns, cells = {"__name__": "__main__"}, []
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            source = "\\n".join(re.sub(r"^(\\s*)[%!].*", r"\\1pass", line)
                               for line in source.splitlines())
            info = cell["metadata"].get("nbgrader", {})
            kind = ("test" if info.get("grade") else "measurement" if cell["metadata"].get(
                "autograder", {}).get("measurement_for") else "answer" if info.get("solution")
                else "given")
            error = None
            try:
                exec(compile(source, path, "exec"), ns)
            except BaseException as exc:
                error = [type(exc).__name__, str(exc)[:300]]
            cells.append({"id": info.get("grade_id", cell.get("id")), "kind": kind,
                          "error": error})
        report[path] = cells
    import autograder.checks, seqlab
    report["modules"] = [autograder.checks.__file__, seqlab.__file__]
    print(json.dumps(report))
''')


def test_installed_like_colab_the_visible_tests_fail_only_on_the_stubs(edition, tmp_path):
    """A fresh venv that sees this environment's packages (torch is not downloaded again), the
    edition installed into it as the Colab cell does, then every released assignment run top
    to bottom outside the repository: only NotImplementedError from the unanswered stubs (in
    the tests that call them, and in the measurement for the written question, once its given
    part ran)."""
    venv = fresh_venv(tmp_path)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps",
                              "--no-build-isolation", "--no-index", str(edition)],
                             cwd=tmp_path, env=env, capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    (tmp_path / "run.py").write_text(RUNNER)
    copies = []
    for name in NAMES:
        copies.append(tmp_path / "work" / f"{name}.ipynb")
        copies[-1].parent.mkdir(exist_ok=True)
        shutil.copy(edition / "assignments" / name / f"{name}.ipynb", copies[-1])
    run = subprocess.run([python, "-I", "run.py", *map(str, copies)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    assert all(Path(f).resolve().is_relative_to(venv.resolve()) for f in report.pop("modules"))
    for path, cells in report.items():
        errors = [(c["id"], c["kind"], *c["error"]) for c in cells if c["error"]]
        assert all(kind in ("test", "measurement") and ename == "NotImplementedError"
                   for _, kind, ename, _ in errors), (path, errors)
        assert errors, f"{path}: no visible test reached a stub"


@pytest.mark.parametrize("lecture", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")),
                         ids=lambda p: p.stem)
def test_lectures_point_at_the_released_assignment_never_at_its_source(lecture):
    """Students have the student edition, where assignments/source does not exist."""
    text = "\n".join("".join(c["source"]) for c in json.loads(lecture.read_text())["cells"])
    assert "assignments/source" not in text, (
        f"{lecture.name} sends students to assignments/source; name "
        f"assignments/{lecture.stem}/{lecture.stem}.ipynb of the student edition instead")
    if lecture.stem in NAMES:
        assert f"assignments/{lecture.stem}/{lecture.stem}.ipynb" in text, lecture.name


def test_a_leaking_lecture_is_refused_and_nothing_is_written(tmp_path):
    root, course = _small_course(tmp_path)
    lecture = root / "notebooks" / "07_bleu.ipynb"
    nb = json.loads(lecture.read_text())
    nb["cells"][-1]["source"].append("\n    return 100 * penalty(c, r) * math.exp(log_mean)\n")
    lecture.write_text(json.dumps(nb, indent=1))
    with pytest.raises(EditionLeak, match=r"notebooks/07_bleu\.ipynb holds .*07_bleu"):
        publish(tmp_path / "out" / "edition", REPO, BRANCH, course, root)
    assert list((tmp_path / "out").iterdir()) == []  # no edition, no half-built folder


def test_a_misspelled_marker_is_refused_and_a_clone_keeps_its_history(tmp_path):
    root, course = _small_course(tmp_path)
    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    (clone / ".git" / "HEAD").write_text("ref: refs/heads/fall26\n")
    (clone / "old-file.txt").write_text("from last term\n")
    path = source_notebook("07_bleu", course)
    path.write_text(path.read_text().replace("### BEGIN HIDDEN TESTS", "### BEGIN HIDEN TESTS",
                                             1))
    with pytest.raises(ReleaseLeak, match="secret line"):
        publish(clone, REPO, BRANCH, course, root)
    assert sorted(p.name for p in clone.iterdir()) == [".git", "old-file.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    path.write_text(source_notebook("07_bleu").read_text())  # fixed: publish into the clone
    publish(clone, REPO, BRANCH, course, root)
    assert (clone / ".git" / "HEAD").read_text() == "ref: refs/heads/fall26\n"
    assert not (clone / "old-file.txt").exists()
    assert (clone / "assignments" / "07_bleu" / "07_bleu.ipynb").exists()


def test_refuses_to_overwrite_what_is_not_an_edition(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine\n")
    with pytest.raises(ValueError, match="not empty"):
        publish(tmp_path / "notes", REPO, BRANCH)
    with pytest.raises(ValueError, match="instructor's repository"):
        publish(ROOT, REPO, BRANCH)
    with pytest.raises(ValueError, match="GitHub address"):
        publish(tmp_path / "new", "ftp://example.org/x", BRANCH)
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine\n"


def _small_course(tmp_path: Path) -> tuple[Path, Path]:
    """A repository with one lecture and one assignment (07), to keep publishing quick."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "07_bleu.ipynb", root / "notebooks")
    shutil.copytree(ROOT / "lib" / "seqlab", root / "lib" / "seqlab",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root)
    course = root / "assignments"
    (course / "source").mkdir(parents=True)
    shutil.copy(COURSE / "nbgrader_config.py", course)
    shutil.copytree(COURSE / "source" / "07_bleu", course / "source" / "07_bleu")
    return root, course


def test_only_the_assignments_released_so_far_and_never_the_placeholder_address(tmp_path):
    """An instructor publishes week by week: the edition holds the assignments named (or the
    course's released list), says what it writes, and will not point every Colab badge at
    the address the course ships with."""
    root, course = _small_course(tmp_path)
    shutil.copytree(COURSE / "source" / "01_language_models",
                    course / "source" / "01_language_models")
    said = []
    out = publish(tmp_path / "week1", REPO, BRANCH, course, root, names=["07_bleu"],
                  log=said.append)
    assert sorted(p.name for p in (out / "assignments").iterdir()) == ["07_bleu"]
    assert any("assignment 07_bleu: released" in line for line in said), said
    assert any("scanning every file" in line for line in said), said
    (course / "course.toml").write_text('released = ["01_language_models"]\n')
    out = publish(tmp_path / "week2", REPO, BRANCH, course, root, log=lambda *a: None)
    assert sorted(p.name for p in (out / "assignments").iterdir()) == ["01_language_models"]
    with pytest.raises(ValueError, match="unknown assignment"):
        publish(tmp_path / "x", REPO, BRANCH, course, root, names=["99_nothing"])
    with pytest.raises(ValueError, match="placeholder address"):
        publish(tmp_path / "y", None, BRANCH, course, root)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
