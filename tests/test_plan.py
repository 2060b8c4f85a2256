"""The graded order is the student's order (``normalize.plan``), with the instructor's cells from
the master and in the master's order among themselves.

Cheap checks of the plan for every assignment (added cells before, between and after given
cells; moved, duplicated, split, relabelled, deleted and stripped cells; random edits), then real
graded runs for a few assignments (need bubblewrap, which ``.ci/run`` installs).
"""

import ast
import json
import random

import pytest

from autograder.course import assignments, source_notebook
from autograder.intake.normalize import TEXT_STUB, Step, master_step, plan, read_notebook
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring.grade import grade

LIMITS = Limits(timeout_cell=20, timeout_notebook=120, memory_mb=2048, max_procs=64)
needs_sandbox = pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap: "
                                   + (sandbox_problem() or ""))


def master_of(assignment: str) -> dict:
    return read_notebook(source_notebook(assignment))


def gid(cell: dict) -> str:
    return cell["metadata"].get("nbgrader", {}).get("grade_id", "")


def code(source: str, **nbgrader) -> dict:
    return {"cell_type": "code", "source": source,
            "metadata": {"nbgrader": nbgrader} if nbgrader else {}}


def copy(nb: dict) -> dict:
    return json.loads(json.dumps(nb))


def find(nb: dict, grade_id: str) -> dict:
    return next(c for c in nb["cells"] if gid(c) == grade_id)


def move(nb: dict, grade_id: str, *, before: str = "", to: int | None = None) -> dict:
    """The notebook with the cell ``grade_id`` moved above the cell ``before`` (or to ``to``)."""
    nb = copy(nb)
    cell = find(nb, grade_id)
    nb["cells"].remove(cell)
    nb["cells"].insert(nb["cells"].index(find(nb, before)) if before else to, cell)
    return nb


def bound_names(source: str) -> list[str]:
    """The public names a cell binds at top level (imports, assignments, defs)."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return [n for n in dict.fromkeys(names) if not n.startswith("_")]


def added_everywhere(master: dict) -> dict:
    """The master solution with the cells students add: an install and a magic at the very
    top, after every given cell one that uses what it defined (and the next answer uses that
    cell), a check after every test, notes between, a last cell at the end. It runs top to
    bottom: nothing in it needs a later cell."""
    nb = copy(master)
    cells, pending = [code("%matplotlib inline\n!pip install -q tqdm\nimport sys")], []
    for cell in nb["cells"]:
        step = master_step(cell)
        if step.kind == "missing" and pending:
            cell["source"] = "".join(f"assert SEEN_{g}\n" for g in pending) + cell["source"]
            pending = []
        cells.append(cell)
        if step.kind == "given":
            cells.append(code(f"SEEN_{step.grade_id} = [{', '.join(bound_names(step.source))}]"))
            pending.append(step.grade_id)
        elif step.kind == "test":
            cells.append(code(f"print('checked {step.grade_id}')"))
        elif step.kind == "markdown":
            cells.append({"cell_type": "markdown", "source": "my notes", "metadata": {}})
    nb["cells"] = cells + [code("print('all done')")]
    return nb


def expected(master: dict, student: dict) -> list[tuple]:
    """What grading in the student's order means for a notebook that keeps every master cell,
    in the master's order: each cell where the student has it, the instructor's from the
    master."""
    masters = {gid(c): master_step(c) for c in master["cells"]}
    out = []
    for cell in student["cells"]:
        step = masters.get(gid(cell))
        if step is None or step.kind == "missing":
            out.append((cell["cell_type"], cell["source"], gid(cell)))
        elif step.kind == "written":  # the student's words, in the master's place
            out.append(("written", cell["source"], step.grade_id))
        else:
            out.append((step.kind, step.source, step.grade_id))
    return out


def summary(steps) -> list[tuple]:
    return [(s.kind, s.source, s.grade_id) for s in steps]


@pytest.mark.parametrize("assignment", assignments())
def test_added_cells_run_where_the_student_put_them(assignment):
    master = master_of(assignment)
    student = added_everywhere(master)
    steps = plan(master, student)
    assert summary(steps) == expected(master, student)
    assert not [s.note for s in steps if s.note]
    for given in (s for s in steps if s.kind == "given"):  # what uses a given cell follows it
        use = next(i for i, s in enumerate(steps) if s.source.startswith(
            f"SEEN_{given.grade_id} ="))
        assert steps[use - 1] == given


@pytest.mark.parametrize("assignment", ["01_language_models", "03_seq2seq"])
def test_a_device_cell_after_the_imports_runs_after_them(assignment):
    """The report that started this: a Colab student adds ``device = torch.device(...)`` under
    the given imports and uses it in an answer; it used to run before the imports."""
    master = master_of(assignment)
    student = copy(master)
    at = student["cells"].index(find(student, "imports")) + 1
    student["cells"].insert(at, code("device = torch.device('cuda' if torch.cuda.is_available()"
                                     " else 'cpu')"))
    order = [s.grade_id or s.source[:6] for s in plan(master, student)]
    assert order.index("device") == order.index("imports") + 1


def test_instructor_cells_keep_the_master_order():
    """Tests read names from the given and test cells run before them in the grader, so a test
    moved up (to the very top, or above the test before it) runs only after those cells, and a
    given cell moved down holds the tests back until it ran."""
    master = master_of("01_language_models")
    instructor = [s.grade_id for s in map(master_step, master["cells"])
                  if s.kind in ("given", "test")]
    for student in (move(master, "test_perplexity", to=0),
                    move(master, "test_count_ngrams_random", before="test_count_ngrams_examples"),
                    move(master, "imports", to=len(master["cells"])),
                    move(move(master, "test_ffn_forward", to=0), "imports", to=99)):
        steps = plan(master, student)
        assert [s.grade_id for s in steps if s.kind in ("given", "test")] == instructor
    steps = plan(master, move(master, "imports", to=len(master["cells"])))
    tests = [g for g in instructor if g.startswith("test_")]
    assert [s.grade_id for s in steps][-len(tests) - 2:] == ["footer", "imports", *tests]


def test_a_test_moved_above_its_answer_runs_there_and_says_why_it_failed():
    master = master_of("01_language_models")
    steps = plan(master, move(master, "test_perplexity", before="perplexity"))
    order = [s.grade_id for s in steps]
    assert order.index("test_perplexity") < order.index("perplexity")
    note = next(s.note for s in steps if s.grade_id == "test_perplexity")
    assert "above your answer cell perplexity" in note and "move it below" in note
    steps = plan(master, move(master, "test_perplexity", to=0))  # held back to its place
    assert [s.grade_id for s in steps].index("test_perplexity") == \
        [s.grade_id for s in steps].index("test_sentence_logprob") + 1
    assert "above your answer cell perplexity" in steps[
        [s.grade_id for s in steps].index("test_perplexity")].note
    steps = plan(master, move(master, "test_count_ngrams_random",
                              before="test_count_ngrams_examples"))
    held = next(s for s in steps if s.grade_id == "test_count_ngrams_random")
    assert "above test_count_ngrams_examples" in held.note and "ran right after" in held.note
    assert not [s.note for s in plan(master, master) if s.note]


def test_copies_splits_relabels_and_deletions():
    master = master_of("01_language_models")
    student = copy(master)
    cells = student["cells"]
    imports = find(student, "imports")
    cells.insert(cells.index(imports) + 2, copy(imports))  # a second copy further down
    test = find(student, "test_mle_bigram")  # split in two, an added cell between the halves
    head, tail = copy(test), copy(test)
    head["source"], tail["source"] = test["source"][:40], test["source"][40:]
    cells[cells.index(test):cells.index(test) + 1] = [head, code("x = 1"), tail]
    find(student, "test_perplexity")["source"] = "pass  # all good"  # relabelled / edited
    find(student, "test_perplexity")["metadata"]["nbgrader"]["points"] = 100
    cells.remove(find(student, "test_ffn_forward"))  # deleted; the student's check after it
    cells.insert(cells.index(find(student, "ffn_forward")) + 1, code("print('mine')"))
    steps = plan(master, student)
    masters = {gid(c): master_step(c) for c in master["cells"]}
    tests = [s for s in steps if s.kind == "test"]
    assert [(s.grade_id, s.source, s.points) for s in tests] == [
        (g, m.source, m.points) for g, m in masters.items() if m.kind == "test"]
    assert [s.grade_id for s in steps].count("imports") == 1
    order = [s.grade_id or s.source for s in steps]
    assert order.index("test_mle_bigram") == order.index("x = 1") - 1  # at its first half
    assert order[order.index("ffn_forward"):order.index("ffn_forward") + 3] == [
        "ffn_forward", "print('mine')", "test_ffn_forward"]  # after the student's cells there
    assert "not in your notebook" in steps[order.index("test_ffn_forward")].note


def test_given_cells_are_matched_by_grade_id_only():
    """A given cell whose metadata the student stripped is the student's code (it runs where
    they have it, so what follows it works as it did for them); the master's copy is placed
    as if deleted, before the tests that need it."""
    master = master_of("03_seq2seq")
    student = copy(master)
    imports = find(student, "imports")
    imports["metadata"] = {}
    at = student["cells"].index(imports) + 1
    student["cells"].insert(at, code("device = torch.device('cpu')"))
    steps = plan(master, student)
    order = [s.grade_id or s.source for s in steps]
    assert steps[1].kind == "code" and steps[1].source == imports["source"]
    assert order[2] == "device = torch.device('cpu')"
    assert order.index("imports") < min(i for i, s in enumerate(steps) if s.kind == "test")


def random_edit(master: dict, rng: random.Random) -> dict:
    """The master solution after a few of the edits students make, at random."""
    nb = copy(master)
    cells = nb["cells"]
    for _ in range(rng.randrange(7)):
        i, j = rng.randrange(len(cells)), rng.randrange(len(cells) + 1)
        edit = rng.choice(["add", "move", "delete", "copy", "split", "strip", "relabel"])
        if edit == "add":
            cells.insert(j, code(f"added_{rng.random()}", **rng.choice([{}, {"grade_id": "x"}])))
        elif edit == "move":
            cells.insert(j, cells.pop(i))
        elif edit == "delete" and len(cells) > 1:
            del cells[i]
        elif edit in ("copy", "split"):
            twin = copy(cells[i])
            if edit == "split":
                cut = len(cells[i]["source"]) // 2
                cells[i]["source"], twin["source"] = cells[i]["source"][:cut], \
                    cells[i]["source"][cut:]
                j = i + 1
            cells.insert(j, twin)
        elif edit == "strip":
            cells[i]["metadata"] = {}
        elif edit == "relabel":
            cells.insert(j, code(f"mine_{rng.random()}", grade_id=gid(rng.choice(master["cells"])),
                                 grade=True, points=50))
    return nb


@pytest.mark.parametrize("assignment", assignments())
def test_random_edits_keep_every_promise(assignment):
    master = master_of(assignment)
    masters = [master_step(c) for c in master["cells"]]
    by_id = {s.grade_id: s for s in masters}
    instructor = [s.grade_id for s in masters if s.kind in ("given", "test")]
    rng = random.Random(assignment)
    for _ in range(300):
        student = random_edit(master, rng)
        cells = student["cells"]
        theirs = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
                  and by_id.get(gid(c), Step("code", "")).kind in ("code", "missing")]
        steps = plan(master, student)
        runs = [s for s in steps if s.kind in ("given", "test")]
        # every instructor cell exactly once, from the master, in the master's order
        assert [s.grade_id for s in runs] == instructor
        assert all((s.source, s.points, s.metadata) == (by_id[s.grade_id].source,
                                                        by_id[s.grade_id].points,
                                                        by_id[s.grade_id].metadata)
                   for s in runs)
        # the student's code, all of it, in the student's order; nothing else is student code
        assert [s.source for s in steps if s.kind == "code"] == [cells[i]["source"]
                                                                 for i in theirs]
        # an answer is missing exactly when no code cell carries its grade_id
        kept = {gid(c) for c in cells if c["cell_type"] == "code"}
        assert {s.grade_id for s in steps if s.kind == "missing"} == {
            s.grade_id for s in masters if s.kind == "missing" and s.grade_id not in kept}
        # an instructor cell the student kept never runs before student code that precedes
        # its first copy in their notebook
        firsts = {}
        for i, c in enumerate(cells):
            if gid(c) in by_id and by_id[gid(c)].kind in ("given", "test"):
                firsts.setdefault(gid(c), sum(1 for k in theirs if k < i))
        for i, s in enumerate(steps):
            if s.grade_id in firsts and s.kind in ("given", "test"):
                assert sum(1 for t in steps[:i] if t.kind == "code") >= firsts[s.grade_id]
        # every master cell kept, first copies in the master's order: the student's order
        order = list(dict.fromkeys(gid(c) for c in cells if gid(c) in by_id))
        if order == [s.grade_id for s in masters]:
            seen, want = set(), []
            for c in cells:
                step = by_id.get(gid(c))
                if step is None or step.kind == "missing":
                    want.append(c["source"])
                elif step.grade_id not in seen:  # a written answer: all its copies' words
                    seen.add(step.grade_id)
                    want.append("\n\n".join(x["source"] for x in cells if gid(x) == gid(c))
                                if step.kind == "written" else step.source)
            assert [s.source for s in steps] == want


# --- graded for real -----------------------------------------------------------------------------

A = "01_language_models"
FULL = 18.0
WRONG_PP = "def perplexity(log_probs):\n    return 4.0\n"
FORGED = ("import math, torch\nfrom collections import Counter\n"
          "expect_float = expect_counts = expect_tensor = expect_prob = lambda *a, **k: None\n"
          "def own_work(f, *a, **k):\n    return f(*a, **k)\n"
          "count_ngrams = mle_bigram_prob = addk_bigram_prob = sentence_logprob = perplexity = "
          "ffn_forward = lambda *a, **k: 0\n")
REDEFINES = ("import math, builtins\nimport autograder.checks as c\n"
             "math.isclose = lambda *a, **k: True\nc.expect_float = lambda *a, **k: None\n"
             "expect_float = lambda *a, **k: None\n")


def coded(master: dict) -> dict:
    """The master as a student submits it who wrote every answer of code and left the written
    question blank: all its autograded points, nothing for a grader's hand."""
    nb = copy(master)
    for cell in nb["cells"]:
        if master_step(cell).kind == "written":
            cell["source"] = TEXT_STUB
    return nb


def answered(nb: dict, **answers) -> dict:
    nb = copy(nb)
    for grade_id, source in answers.items():
        find(nb, grade_id)["source"] = source
    return nb


def device_cell(master: dict, answer: str) -> dict:
    """A Colab habit: a device cell under the given imports, used at the top of an answer."""
    nb = copy(master)
    nb["cells"].insert(nb["cells"].index(find(nb, "imports")) + 1, code(
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nprint(device)"))
    find(nb, answer)["source"] = "probe = torch.zeros(2, device=device)\n" + \
        find(nb, answer)["source"]
    return nb


def forged_tests_first(master: dict) -> dict:
    """Every test cell moved to the very top, under a cell that forges the helpers the tests
    call and answers every question wrongly; the real answer cells emptied."""
    nb = copy(master)
    tests = [c for c in nb["cells"] if master_step(c).kind == "test"]
    rest = [c for c in nb["cells"] if master_step(c).kind != "test"]
    for c in rest:
        if master_step(c).kind == "missing":
            c["source"] = "pass\n"
    nb["cells"] = [code(FORGED), *tests, *rest]
    return nb


def redefines_then_test(master: dict) -> dict:
    """A wrong answer; a cell at the very end redefines the helpers, and the test is moved
    under it."""
    nb = answered(master, perplexity=WRONG_PP)
    nb["cells"].append(code(REDEFINES))
    return move(nb, "test_perplexity", to=len(nb["cells"]))


def graded_class(assignment: str, students: dict, tmp_path) -> tuple[dict, dict]:
    """Grade one folder per student; (rows, the per-test results) by student."""
    for student, nb in students.items():
        folder = tmp_path / "subs" / student
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_text(json.dumps(nb))
    rows = grade(assignment, tmp_path / "subs", tmp_path / "out", limits=LIMITS, workers=2,
                 log=lambda *a: None)
    tests = {r["student_id"]: json.loads((tmp_path / "out" / "feedback" / r["student_id"] /
                                          "feedback.json").read_text())["tests"] for r in rows}
    return {r["student_id"]: r for r in rows}, tests


def failed(tests: list[dict]) -> list[str]:
    return [t["test"] for t in tests if not t["passed"]]


@needs_sandbox
def test_graded_in_the_students_order(tmp_path):
    master = coded(master_of(A))
    students = {
        "colab_device": (device_cell(master, "ffn_forward"), FULL, []),
        "added_everywhere": (added_everywhere(master), FULL, []),
        "added_everywhere_wrong": (answered(added_everywhere(master), perplexity=WRONG_PP),
                                   15.0, ["test_perplexity"]),
        "imports_at_the_end": (move(master, "imports", to=len(master["cells"])), FULL, []),
        "test_above_answer": (move(master, "test_perplexity", before="perplexity"), 15.0,
                              ["test_perplexity"]),
        "tests_on_top_forged": (forged_tests_first(master), 0.0, [
            s.grade_id for s in map(master_step, master["cells"]) if s.kind == "test"]),
        "redefines_then_test": (redefines_then_test(master), 15.0, ["test_perplexity"]),
    }
    rows, tests = graded_class(A, {s: nb for s, (nb, _, _) in students.items()}, tmp_path)
    for student, (_, score, lost) in students.items():
        assert (rows[student]["status"], rows[student]["score"]) == ("graded", score), \
            (student, rows[student])
        assert failed(tests[student]) == lost, (student, rows[student])
    for student in ("colab_device", "added_everywhere"):
        assert rows[student]["message"] == "", (student, rows[student])
    # answers call the imports only when tested; the measurement, at the top level, needs them
    assert rows["imports_at_the_end"]["message"] == ("cell 13 (measure_perplexity) raised "
                                                     "NameError: name 'random' is not defined.")
    above = next(t for t in tests["test_above_answer"] if t["test"] == "test_perplexity")
    assert "NameError" in above["message"], above


@needs_sandbox
@pytest.mark.parametrize("assignment", ["02_rnn_backprop", "03_seq2seq", "06_decoding"])
def test_added_cells_grade_at_full_marks(assignment, tmp_path):
    master = coded(master_of(assignment))
    full = sum(s.points for s in map(master_step, master["cells"]) if s.kind == "test")
    students = {"added_everywhere": added_everywhere(master)}
    if assignment == "03_seq2seq":
        students["colab_device"] = device_cell(master, "encoder_forward")
    rows, _ = graded_class(assignment, students, tmp_path)
    for row in rows.values():
        assert (row["status"], row["score"], row["message"]) == ("graded", full, ""), row
