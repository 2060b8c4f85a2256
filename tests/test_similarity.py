"""The similarity report: measured on a class of honest, pasted and shared answers (see
``similarity_class``), once through a real grading run of assignment 01 (2 workers), and on the
other assignments by calling the module on the same notebooks grading would read; then the
disguises that once hid a paste, and code that does not parse. Recall and false positives per
disguise on a generated corpus: benchmarks/similarity_disguises.py (the README's table)."""

import ast
import csv
import json
import os
import subprocess
import sys

import pytest
from similarity_class import CLASS, light_disguise

from autograder.authoring.release import release
from autograder.course import source_notebook
from autograder.intake.normalize import plan, read_notebook
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring import similarity
from autograder.scoring.grade import grade

LIMITS = Limits(timeout_cell=20, timeout_notebook=120, memory_mb=2048, max_procs=64)


def notebook(assignment: str, answers: dict, released: dict) -> dict:
    """The release with the given answer cells (by grade_id) filled in, as a student submits."""
    nb = json.loads(json.dumps(released))
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell["source"] = answers[gid]
    return nb


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("releases")
    return {a: read_notebook(release(a, tmp) / f"{a}.ipynb") for a in CLASS}


def expected_flags(assignment: str) -> set:
    """(student, cell, match) of every pair that must be reported: each of ``paste``'s answers
    against the library, and the answers ``share_a`` and ``share_b`` have in common."""
    students = CLASS[assignment]
    found = {("paste", cell, "library") for cell in students.get("paste", {})}
    for a, b in (("share_a", "share_b"), ("share_b", "share_a")):
        found |= {(a, cell, b) for cell in students.get(a, {}).keys() & students.get(b, {})}
    return found


def reported(matches) -> set:
    return {(m.student_id, m.cell, "library" if m.match.startswith("seqlab.") else m.match)
            for m in matches}


@pytest.mark.parametrize("assignment", sorted(CLASS))
def test_pastes_and_shared_answers_are_flagged_and_honest_ones_never(assignment, releases):
    """Among the honest: a five-line scaled dot-product attention written from the formula
    (05), and two independent BLEU solutions (07), which the library's code contains almost
    statement for statement: what the formula forces is no evidence."""
    master = read_notebook(source_notebook(assignment))
    answers = {s: similarity.answers(plan(master, notebook(assignment, cells,
                                                          releases[assignment])))
               for s, cells in CLASS[assignment].items()}
    matches = similarity.compare(answers, library=similarity.library_sources(),
                                 given=similarity.release_code(releases[assignment]),
                                 solutions=similarity.solutions(master))
    assert reported(matches) == expected_flags(assignment)
    for m in matches:
        assert m.similarity >= similarity.THRESHOLD and m.shared >= similarity.MIN_MATCH
        assert m.distinct >= similarity.MIN_DISTINCT
        assert "<mark>" in m.answer_html and "<mark>" in m.match_html


def test_the_untouched_release_and_the_given_code_never_count(releases):
    a = "07_bleu"
    master = read_notebook(source_notebook(a))
    untouched = similarity.answers(plan(master, releases[a]))
    assert untouched  # the stubs are there, and are all given code
    matches = similarity.compare({"s1": untouched, "s2": untouched},
                                 library=similarity.library_sources(),
                                 given=similarity.release_code(releases[a]), threshold=1e-9,
                                 min_match=0)
    assert matches == []


def test_gradescope_compares_with_the_library_only(releases):
    a = "05_transformer"
    master = read_notebook(source_notebook(a))
    paste = similarity.answers(plan(master, notebook(a, CLASS[a]["paste"], releases[a])))
    found = similarity.library_only(answers_of_student=paste, release=releases[a],
                                    solutions=similarity.solutions(master))
    assert [(m["cell"], m["match"]) for m in found] == [("sdpa", "seqlab.attention")]


def test_a_failing_report_never_costs_the_grades(tmp_path, monkeypatch, releases):
    def broken(package="seqlab"):
        raise RuntimeError("no library here")

    monkeypatch.setattr(similarity, "library_sources", broken)
    said = []
    master = read_notebook(source_notebook("07_bleu"))
    flags = similarity.report_class(master=master, notebooks={"s1": None},
                                    release=releases["07_bleu"], out=tmp_path, log=said.append)
    assert flags == {"s1": "not checked: the similarity report failed (RuntimeError)"}
    assert "grades are unaffected" in said[0]


def test_bad_thresholds_are_refused():
    with pytest.raises(ValueError, match="threshold"):
        similarity.compare({}, library={}, threshold=0)
    with pytest.raises(ValueError, match="min_match"):
        similarity.compare({}, library={}, min_match=-1)
    with pytest.raises(ValueError, match="min_distinct"):
        similarity.compare({}, library={}, min_distinct=1.5)
    with pytest.raises(ValueError, match="no answers"):
        similarity.compare({}, library={}, students=["nobody"])


@pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap")
def test_a_graded_class(tmp_path, releases):
    """One run: flags in grades.csv and the report agree, and a flag changes no score."""
    a = "01_language_models"
    points = {"count_ngrams": 4, "bigram_probs": 5, "sentence_logprob": 3, "perplexity": 3,
              "ffn_forward": 3}
    for student, cells in CLASS[a].items():
        (tmp_path / "subs" / student).mkdir(parents=True)
        (tmp_path / "subs" / student / f"{a}.ipynb").write_text(
            json.dumps(notebook(a, cells, releases[a])))
    rows = {r["student_id"]: r for r in grade(a, tmp_path / "subs", tmp_path / "out",
                                              limits=LIMITS, workers=2, log=lambda *x: None)}
    for student, cells in CLASS[a].items():  # every answer of the class is right
        assert float(rows[student]["score"]) == sum(points[c] for c in cells), rows[student]
    with open(tmp_path / "out" / "similarity.csv") as handle:
        table = list(csv.DictReader(handle))
    assert list(table[0]) == ["student_id", "cell", "match", "similarity"]
    assert {(r["student_id"], r["cell"], "library" if r["match"].startswith("seqlab.") else
             r["match"]) for r in table} == expected_flags(a)
    for student, row in rows.items():
        cells = {r["cell"] for r in table if r["student_id"] == student}
        assert {part.split(":")[0] for part in row["flags"].split("; ") if part} == cells
    with open(tmp_path / "out" / "grades.csv") as handle:
        assert {r["student_id"]: r["flags"] for r in csv.DictReader(handle)} == \
            {s: r["flags"] for s, r in rows.items()}
    assert rows["paste"]["flags"].startswith("perplexity: seqlab.lm 0.9")
    page = (tmp_path / "out" / "similarity.html").read_text()
    assert page.count("<h2>") == len(table) and "<mark>" in page
    feedback = (tmp_path / "out" / "feedback" / "paste" / "feedback.json").read_text()
    assert "seqlab.lm" not in feedback  # flags are for the instructor, not in the feedback


def paste_class(assignment: str, releases, disguise) -> dict:
    """The class's pastes of ``assignment`` under ``disguise``, as the report reads them."""
    master = read_notebook(source_notebook(assignment))
    cells = {cell: disguise(code) for cell, code in CLASS[assignment]["paste"].items()}
    return similarity.answers(plan(master, notebook(assignment, cells, releases[assignment])))


@pytest.mark.parametrize("assignment", sorted(CLASS))
def test_the_index_finds_every_pair_that_comparing_all_pairs_reports(assignment, releases):
    """The candidate index (prefix filtering) is exact: the report is the one all pairs give,
    at the threshold in use and at a lower one (where more pairs count), for the whole class
    and for a shard of it."""
    master = read_notebook(source_notebook(assignment))
    answers = {s: similarity.answers(plan(master, notebook(assignment, cells,
                                                          releases[assignment])))
               for s, cells in CLASS[assignment].items()}
    first, cell = next((s, c) for s, cells in answers.items() for c in cells)
    answers["copier"] = {similarity.ADDED: answers[first][cell]}  # compared across cells
    common = dict(library={}, given=similarity.release_code(releases[assignment]),
                  solutions=similarity.solutions(master), min_match=0, min_distinct=0)
    for threshold in (similarity.THRESHOLD, 0.5):
        for students in (None, list(answers)[::2]):
            kw = dict(common, threshold=threshold, students=students)
            indexed = similarity.compare(answers, **kw)
            assert indexed == similarity.compare(answers, all_pairs=True, **kw)
            if threshold == 0.5 and students is None:
                assert indexed, "at 0.5 some pairs of this class should count"


def test_measurement_cells_are_compared_with_the_library_only(releases):
    """The written question says what to measure, so students write its few lines alike: two
    identical measurements are no evidence (compared, they would be reported), while the
    library pasted into a measurement cell still is."""
    a = "07_bleu"
    master = read_notebook(source_notebook(a))
    cells = similarity.measurement_cells(master)
    assert cells == {"measure_sentences"}
    measured = similarity.answers(plan(master, master))["measure_sentences"]
    module = similarity.library_sources()["seqlab.bleu"]
    paste = "\n\n".join(ast.get_source_segment(module, node) for node in ast.parse(module).body
                        if getattr(node, "name", "") in ("corpus_bleu", "modified_precision"))
    answers = {"s1": {"measure_sentences": measured}, "s2": {"measure_sentences": measured},
               "s3": {"measure_sentences": "import math\nfrom collections import Counter\n\n\n"
                                           + paste + "\n" + measured}}
    kw = dict(library=similarity.library_sources(), given=similarity.release_code(releases[a]),
              solutions=similarity.solutions(master))
    assert {("s1", "s2"), ("s2", "s1")} <= {(m.student_id, m.match)
                                            for m in similarity.compare(answers, **kw)}
    found = similarity.compare(answers, measurements=cells, **kw)
    assert {(m.student_id, m.match) for m in found} == {("s3", "seqlab.bleu")}

    # a classmate's answer hidden in a measurement cell (moved above the tests, it is the one
    # they call), even under an ``if True:``, is added code, compared with every answer cell
    shared = CLASS[a]["share_a"]["corpus_bleu"]
    wrapped = "if True:\n" + "".join(f"    {line}\n" for line in shared.splitlines())
    owner = notebook(a, {"corpus_bleu": shared}, releases[a])
    planned = {"owner": similarity.answers(plan(master, owner))}
    for who, code in (("hides", shared), ("wraps", wrapped)):
        hidden = notebook(a, {"measure_sentences": code + "\n\n" + measured}, releases[a])
        planned[who] = similarity.answers(plan(master, hidden))
        assert "def corpus_bleu" in planned[who][similarity.ADDED]
        assert "def corpus_bleu" not in planned[who]["measure_sentences"]
    for all_pairs in (False, True):
        found = {(m.student_id, m.cell, m.match) for m in similarity.compare(
            planned, measurements=cells, all_pairs=all_pairs, **kw)}
        for who in ("hides", "wraps"):
            assert {(who, similarity.ADDED, "owner"), ("owner", "corpus_bleu", who)} <= found


DISGUISES = {
    "a 100,000-character comment line first": lambda code: "# " + "x" * 100_000 + "\n" + code,
    "docstrings dropped, x += y written out, a no-op after each statement": light_disguise,
}


@pytest.mark.parametrize("assignment", sorted(CLASS))
def test_disguised_pastes_are_still_flagged(assignment, releases):
    """Each disguise that once left every pasted cell unflagged, on every paste of the class."""
    answers = {name: paste_class(assignment, releases, disguise)
               for name, disguise in DISGUISES.items()}
    master = read_notebook(source_notebook(assignment))
    matches = similarity.compare(answers, library=similarity.library_sources(),
                                 given=similarity.release_code(releases[assignment]),
                                 solutions=similarity.solutions(master), class_pairs=False)
    for name in DISGUISES:
        assert {m.cell for m in matches if m.student_id == name} == \
            set(CLASS[assignment]["paste"]), name


def test_a_verbatim_paste_with_its_docstring_is_flagged(releases):
    """Given code is taken out by AST node: taking out the release's lines also took out a bare
    closing quote, and the paste of seqlab.lm's perplexity became one string (0.000)."""
    a = "01_language_models"
    module = similarity.library_sources()["seqlab.lm"]
    perplexity = next(node for node in ast.parse(module).body
                      if getattr(node, "name", "") == "perplexity")
    source = "import numpy as np\n\n\n" + ast.get_source_segment(module, perplexity)
    assert '\n    """\n' in source  # its docstring ends on a line of its own
    master = read_notebook(source_notebook(a))
    answers = similarity.answers(plan(master, notebook(a, {"perplexity": source}, releases[a])))
    found = similarity.library_only(answers_of_student=answers, release=releases[a],
                                    solutions=similarity.solutions(master))
    assert [(m["cell"], m["match"]) for m in found] == [("perplexity", "seqlab.lm")]
    assert found[0]["similarity"] >= 0.95


def test_code_that_does_not_parse_still_gets_a_report(releases):
    """A syntax error elsewhere in the cell costs only its own statement; code nothing can
    parse (unbalanced, nested past any limit, NUL bytes) is compared as tokens, never raises."""
    a = "07_bleu"
    master = read_notebook(source_notebook(a))
    broken = CLASS[a]["paste"]["brevity_penalty"] + "\nprint(brevity_penalty(1, 2)\n"
    cells = {"brevity_penalty": broken, "ngrams": "(" * 1_000,
             "corpus_bleu": "x = [" * 1_000 + "\0" + "]" * 1_000}
    answers = similarity.answers(plan(master, notebook(a, cells, releases[a])))
    found = similarity.library_only(answers_of_student=answers, release=releases[a],
                                    solutions=similarity.solutions(master))
    assert [(m["cell"], m["match"]) for m in found] == [("brevity_penalty", "seqlab.bleu")]


def test_the_canonical_form_ignores_what_a_student_changes_without_thinking():
    from autograder.scoring.canonical import canonical

    def statements(code):
        form = canonical(code)
        return sorted(f for b in form.blocks for f, n in b.forms.items() for _ in range(n))

    original = statements('''def f(xs, n):
    """The positive xs, scaled; and their sum."""
    out = [x * n for x in xs if x > 0]  # a comprehension
    total = 0
    for y in out:
        total += y
    return out, total
''')
    disguised = '''def g(values, k):
    kept = []
    _ = len(values)
    for v in values:
        if v > 0:
            kept.append(v * k)
    s = 0
    pass
    for item in kept:
        s = s + item
    return kept, s
'''
    assert statements(disguised) == original
    assert canonical("# " + "x" * 100_000 + "\n" + disguised).text == canonical(disguised).text


def test_the_report_is_the_same_in_every_process():
    """copydetect hashes k-grams with Python's salted hash: a run and its rerun (another
    salt) report the same pairs, with the same numbers."""
    code = ("import sys, json\nsys.path.insert(0, 'tests')\n"
            "from similarity_class import CLASS\n"
            "from autograder.scoring import similarity\n"
            "lib = similarity.library_sources()\n"
            "found = similarity.compare(CLASS['07_bleu'], library={'seqlab.bleu': "
            "lib['seqlab.bleu']}, threshold=0.5, min_match=0, min_distinct=0)\n"
            "print(json.dumps([m.__dict__ for m in found]))\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")]
    assert runs[0] == runs[1] and json.loads(runs[0])


def test_the_librarys_canonical_forms_are_kept_between_runs_as_data(tmp_path, monkeypatch):
    """Read back, a kept form is the one computed; a damaged or foreign file in the cache is
    computed around (and replaced), never trusted."""
    from autograder.scoring import canonical
    from autograder.scoring.similarity import cache_folder, library_form, library_sources

    monkeypatch.setenv("SEQLAB_GRADER_CACHE", str(tmp_path / "cache"))
    code = library_sources()["seqlab.attention"]
    computed = library_form(code)
    kept = list(cache_folder().glob("canonical-*.json"))
    assert len(kept) == 1 and computed == canonical.canonical(code, limit=None)
    assert library_form(code) == computed
    for damage in ("{not json", '{"text": 1}', '{"blocks": [{"name": [1]}]}'):
        kept[0].write_text(damage)
        assert library_form(code) == computed
