"""A determined student against the grader, by attack class; honest unusual work beside it.

Each class is one grading run of a small class, every row asserted with its exact points and
message. Other classes live beside this file: torch's attention reached by any route in
``test_attention_guard.py`` (04), sandbox escapes and run-stoppers of one notebook in
``test_hostile.py`` and ``test_workers.py``, pasted code in ``test_similarity.py``, gradients
not computed by backpropagation (02) in ``test_assignment_02.py``. Needs
bubblewrap (``.ci/run`` installs it).
"""

import csv
import json
import subprocess
import sys

import pytest
from helpers import coded_solution
from test_hostile import cell_of, with_cell

from autograder.course import source_notebook
from autograder.intake.normalize import plan
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring.grade import grade

pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap")
LIMITS = Limits(timeout_cell=30, timeout_notebook=200, memory_mb=2048, max_procs=64)


def notebook(assignment: str, **answers) -> dict:
    nb = coded_solution(assignment)
    for gid, source in answers.items():
        cell_of(nb, gid)["source"] = source
    return nb


def feedback(out, student) -> dict[str, dict]:
    tests = json.loads((out / "feedback" / student / "feedback.json").read_text())["tests"]
    return {t["test"]: t for t in tests}


def graded(tmp, assignment, students: dict[str, dict]) -> tuple[dict, object]:
    for student, nb in students.items():
        (tmp / "subs" / student).mkdir(parents=True)
        (tmp / "subs" / student / f"{assignment}.ipynb").write_text(json.dumps(nb))
    rows = grade(assignment, tmp / "subs", tmp / "out", limits=LIMITS, workers=2,
                 log=lambda *a: None)
    assert sorted(r["student_id"] for r in rows) == sorted(students)  # every row is there
    return {r["student_id"]: r for r in rows}, tmp / "out"


# ------------------------------------ values that name modules, files beside the notebook
A01 = "01_language_models"
PLANTED = '''import pathlib, sys
pathlib.Path(__file__).with_name("IMPORTED").write_text("the grader ran the student's file")
sys.exit(2)
'''
MODULE_ANSWER = '''import types


def perplexity(log_probs):
    """Returns a module named after the .py file the student put beside the notebook."""
    return types.ModuleType("subs.mallory.planted")
'''


def test_a_module_value_never_makes_the_grader_import_the_students_file(tmp_path):
    """The attack that once ran a student's file as root: a .py beside the notebook, in a
    submissions folder importable from where the instructor starts the grader, and an answer
    whose value names it. Graded through the command line from that folder."""
    subs = tmp_path / "subs"
    for student, nb in (("mallory", notebook(A01, perplexity=MODULE_ANSWER)),
                        ("alice", notebook(A01))):
        (subs / student).mkdir(parents=True)
        (subs / student / f"{A01}.ipynb").write_text(json.dumps(nb))
    (subs / "mallory" / "planted.py").write_text(PLANTED)  # subs.mallory.planted: importable
    result = subprocess.run([sys.executable, "-m", "autograder", "grade", A01, "--submissions",
                             "subs", "--out", "out", "--workers", "2"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (subs / "mallory" / "IMPORTED").exists()
    with open(tmp_path / "out" / "grades.csv") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert sorted(rows) == ["alice", "mallory"]
    assert (rows["alice"]["status"], float(rows["alice"]["score"])) == ("graded", 18)
    assert (rows["mallory"]["status"], float(rows["mallory"]["score"])) == ("graded", 15)
    assert "test_perplexity" in rows["mallory"]["message"]
    assert "should be a float, got module" in rows["mallory"]["message"]


MALFORMED = '''import gc

for _runner in [o for o in gc.get_objects() if type(o).__name__ == "Runner"]:
    def _encode(x, depth=0, _real=_runner.encode):  # every function crosses as a set of lists
        return {"__set__": [[1], [2]]} if depth == 0 and callable(x) else _real(x, depth)
    _runner.encode = _encode
'''


def test_a_malformed_value_is_the_students_row_not_a_grader_failure(tmp_path):
    """The runner is the student's process: patched, it sends what no encoder would (a set of
    lists, unhashable here). That is the student's connection broken (``crashed``), not a
    grading worker that raised (``error``, "please report") and had to be replaced."""
    rows, _ = graded(tmp_path, A01, {"mallory": with_cell(notebook(A01), "imports", MALFORMED),
                                     "alice": notebook(A01)})
    assert (rows["alice"]["status"], rows["alice"]["score"]) == ("graded", 18)
    assert (rows["mallory"]["status"], rows["mallory"]["score"]) == ("crashed", 0), rows
    assert "broke the grader's connection to it (the sandbox sent a malformed value " \
           "(TypeError))" in rows["mallory"]["message"]


def test_a_lone_surrogate_neither_costs_the_row_nor_hides_a_copy_from_the_report(tmp_path):
    """JSON can escape half a UTF-16 pair ("\\ud800"), which UTF-8 cannot write: in a copied
    answer's comment it made the similarity report fail for the whole class ("not checked"
    for everyone, the copy included), and the student's own row an error."""
    copied = notebook(A01)
    cell_of(copied, "perplexity")["source"] += "\n# caf\ud800\n"
    rows, out = graded(tmp_path, A01, {"mallory": copied, "alice": notebook(A01)})
    for student, other in (("mallory", "alice"), ("alice", "mallory")):
        row = rows[student]
        assert (row["status"], row["score"]) == ("graded", 18), row
        assert f"perplexity: {other} 1.00" in row["flags"], row["flags"]
    assert "mallory,perplexity,alice" in (out / "similarity.csv").read_text()


COLAB_PLUMBING = ("from google.colab import drive\ndrive.mount('/content/drive')\nimport sys\n"
                  "sys.path.append('/content/drive/MyDrive/{0}')\n%cd /content/drive/MyDrive/{0}\n"
                  "!pip install -q seqlab\n")


def test_colab_plumbing_two_students_both_added_is_not_a_shared_answer(tmp_path):
    """Cells Colab's snippets add (mount Drive, cd there, pip install) are alike in every
    notebook saved there; their shell and magic lines made two honest students a pair at
    1.00. Only Python counts."""
    from autograder.intake.normalize import read_notebook
    from autograder.scoring import similarity

    master, answers = read_notebook(source_notebook(A01)), {}
    for student in ("ana", "ben"):
        saved = tmp_path / f"{student}.ipynb"
        saved.write_text(json.dumps(with_cell(notebook(A01), "imports",
                                              COLAB_PLUMBING.format(student))))
        answers[student] = similarity.answers(plan(master, read_notebook(saved)))
    matches = similarity.compare(answers, library={}, given=similarity.release_code(master))
    assert [(m.student_id, m.cell) for m in matches if m.cell == similarity.ADDED] == []


# ------------------------------------ the grader's functions, called back with sizes chosen
A07 = "07_bleu"
SIZED_BY_THE_STUDENT = '''from collections import Counter


def max_ref_counts(refs_tokens, n, *, parts=None):
    """Right, but first asks the grader's ngrams for 10**7 empty n-grams (n = -10**7)."""
    (get_ngrams,) = parts or (ngrams,)
    if parts:
        get_ngrams([], -10**7)
    best = Counter()
    for ref in refs_tokens:
        for gram, count in Counter(get_ngrams(ref, n)).items():
            best[gram] = max(best[gram], count)
    return best
'''


def test_a_reference_part_refuses_work_sized_by_the_student(tmp_path):
    """A reference part runs in the grader, outside every sandbox limit: called back with
    n = -10**10 the grader's ngrams would build 10**10 empty tuples (80 GB). Parts check
    the sizes they are given, and a call back gets only its test's time in any case."""
    rows, out = graded(tmp_path, A07, {"mallory": notebook(A07, max_ref_counts=
                                                           SIZED_BY_THE_STUDENT)})
    assert (rows["mallory"]["status"], rows["mallory"]["score"]) == ("graded", 11), rows
    failed = {t: r["message"] for t, r in feedback(out, "mallory").items() if not r["passed"]}
    assert list(failed) == ["test_max_ref_counts"]
    assert "ValueError: n should be at least 1, got -10000000" in failed["test_max_ref_counts"]


# ------------------------------------------------- 06: beam search must not list every output
A06 = "06_decoding"
BEAM_HEAD = '''import math

import torch


def beam_search(model, inputs, beam_size, max_len, length_penalty=0.0):
'''
LISTS_BEAM = BEAM_HEAD + '''\
    """Honest beam search with Python lists: each hypothesis stepped on its own (one row at a
    time), log-probabilities summed as Python floats."""
    start, results = model.start(inputs), []
    for row in range(len(inputs)):
        live = [([], 0.0, model.select(start, torch.tensor([row])), model.bos_id)]
        finished = []  # (tokens, logprob, length)
        for t in range(1, max_len + 1):
            cands = []
            for i, (_, logprob, state, last) in enumerate(live):
                log_probs, state = model.step(state, torch.tensor([last]))
                for w, lp in enumerate(log_probs[0].tolist()):
                    if logprob + lp > -math.inf:
                        cands.append((logprob + lp, i, w, state))
            cands.sort(key=lambda c: -c[0])
            for score, i, w, _ in cands[:beam_size]:
                if w == model.eos_id or t == max_len:
                    finished.append((live[i][0] + ([] if w == model.eos_id else [w]), score, t))
            live = [(live[i][0] + [w], score, state, w)
                    for score, i, w, state in cands if w != model.eos_id][:beam_size]
            if len(finished) >= beam_size:
                break
        tokens, logprob, _ = max(finished, key=lambda f: f[1] / f[2] ** length_penalty)
        results.append((tokens, logprob))
    return results
'''
ENUMERATING_BEAM = BEAM_HEAD + '''\
    """Steps every prefix of every length first (the whole tree of outputs, a batch per
    length), then applies the rules of beam search to that table: right outputs, at the cost
    of V ** max_len model rows."""
    start, results = model.start(inputs), []
    for row in range(len(inputs)):
        table, level = {}, [()]
        state, last = model.select(start, torch.tensor([row])), torch.tensor([model.bos_id])
        for t in range(max_len):
            log_probs, state = model.step(state, last)
            table.update(zip(level, log_probs.tolist()))
            grow = [(i, w) for i in range(len(level)) for w in range(log_probs.shape[1])
                    if w != model.eos_id]
            state = model.select(state, torch.tensor([i for i, _ in grow]))
            last = torch.tensor([w for _, w in grow])
            level = [level[i] + (w,) for i, w in grow]
        live, finished = [((), 0.0)], []
        for t in range(1, max_len + 1):
            cands = sorted(((lp + s, p, w) for p, lp in live for w, s in enumerate(table[p])
                            if lp + s > -math.inf), key=lambda c: -c[0])
            finished += [(list(p) + ([] if w == model.eos_id else [w]), lp, t)
                         for lp, p, w in cands[:beam_size] if w == model.eos_id or t == max_len]
            live = [(p + (w,), lp) for lp, p, w in cands if w != model.eos_id][:beam_size]
            if len(finished) >= beam_size:
                break
        tokens, logprob, _ = max(finished, key=lambda f: f[1] / f[2] ** length_penalty)
        results.append((tokens, logprob))
    return results
'''
CLASS_06 = {  # student -> (beam_search answer, status, score, the message of what it lost)
    "honest": (None, "graded", 15, {}),
    "lists_one_row_at_a_time": (LISTS_BEAM, "graded", 15, {}),
    # its own measurement (part 5: 50 inputs, 20 steps) runs out of memory; the tests above
    # keep their points
    "enumerates_every_output": (ENUMERATING_BEAM, "crashed", 14, {
        "test_beam_search_cost": "asked model.step for 91 rows in 3 calls (the rows of "
                                 "last_tokens, summed); beam search needs at most k * "
                                 "(max_len + 1) * B = 78"}),
}


@pytest.fixture(scope="module")
def class_06(tmp_path_factory):
    students = {s: notebook(A06, **({"beam_search": a} if a else {}))
                for s, (a, _, _, _) in CLASS_06.items()}
    return graded(tmp_path_factory.mktemp("redteam06"), A06, students)


@pytest.mark.parametrize("student", sorted(CLASS_06))
def test_beam_search_is_graded_on_what_it_costs(class_06, student):
    rows, out = class_06
    _, status, score, lost = CLASS_06[student]
    row = rows[student]
    assert (row["status"], row["score"], row["max_score"]) == (status, score, 18), row
    assert ("measure_length" in row["message"]) == (status == "crashed"), row["message"]
    failed = {t: r["message"] for t, r in feedback(out, student).items() if not r["passed"]}
    assert sorted(failed) == sorted(lost), failed
    for test, message in lost.items():
        assert message in failed[test], failed[test]


# ----------------------------------------------------- 04: attention computed in float64
A04 = "04_attention"
FLOAT64_SCORES = '''def dot_score(s, h):
    """[B, S] scores s . h_i, computed in float64 and returned in the input's dtype."""
    return (h.double() @ s.double()[:, :, None])[:, :, 0].to(s.dtype)


def bilinear_score(s, h, W):
    """[B, S] scores s^T W h_i, in float64."""
    return ((h.double() @ W.double().T) @ s.double()[:, :, None])[:, :, 0].to(s.dtype)


def additive_score(s, h, W, U, v):
    """[B, S] scores v^T tanh(W s + U h_i), in float64."""
    hidden = (s.double() @ W.double().T)[:, None, :] + h.double() @ U.double().T
    return (torch.tanh(hidden) @ v.double()).to(s.dtype)
'''
FLOAT64_SDPA = '''def scaled_dot_product_attention(query, key, value, mask=None):
    """Computed in float64 throughout, cast back to the input's dtype at the end."""
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return (weights @ v).to(query.dtype), weights.to(query.dtype)
'''
CLASS_04 = {"honest": {}, "float64_inside": {"scores": FLOAT64_SCORES, "sdpa": FLOAT64_SDPA}}


@pytest.fixture(scope="module")
def class_04(tmp_path_factory):
    students = {s: notebook(A04, **answers) for s, answers in CLASS_04.items()}
    return graded(tmp_path_factory.mktemp("redteam04"), A04, students)


@pytest.mark.parametrize("student", sorted(CLASS_04))
def test_attention_in_float64_keeps_full_marks(class_04, student):
    rows, out = class_04
    row = rows[student]
    assert (row["status"], row["score"], row["max_score"], row["message"]) == (
        "graded", 11, 13, ""), row  # the written question's 2 points are a grader's
    assert all(t["passed"] for t in feedback(out, student).values())


# ------------------------------------------------- 08: masking drawn with torch.bernoulli
A08 = "08_bert_mlm"
BERNOULLI_MASKING = '''def mask_tokens(ids, special_ids, mask_id, vocab_size, generator, p=0.15,
                mask_rate=0.8, random_rate=0.1):
    """Each position chosen by a Bernoulli draw of its own, then masked by another; of the
    rest, a share random_rate / (1 - mask_rate) replaced: the text's rates, other draws."""
    special = torch.isin(ids, torch.tensor(special_ids, dtype=torch.long))
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in set(special_ids)])

    def coin(rate):
        return torch.bernoulli(torch.full(ids.shape, float(rate)), generator=generator).bool()

    chosen = coin(p) & ~special
    to_mask = chosen & coin(mask_rate)
    to_random = chosen & ~to_mask & coin(min(1.0, random_rate / (1 - mask_rate))
                                         if mask_rate < 1 else 0.0)
    drawn = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]
    inputs = torch.where(to_random, drawn, ids.masked_fill(to_mask, mask_id))
    return inputs, ids.masked_fill(~chosen, -100)
'''
CLASS_08 = {"honest": {}, "bernoulli_draws": {"mask_tokens": BERNOULLI_MASKING}}


@pytest.fixture(scope="module")
def class_08(tmp_path_factory):
    students = {s: notebook(A08, **answers) for s, answers in CLASS_08.items()}
    return graded(tmp_path_factory.mktemp("redteam08"), A08, students)


@pytest.mark.parametrize("student", sorted(CLASS_08))
def test_masking_drawn_another_way_keeps_full_marks(class_08, student):
    """The text asks for the rates, not the stream: "any correct way of drawing from
    generator passes"."""
    rows, out = class_08
    row = rows[student]
    assert (row["status"], row["score"], row["max_score"], row["message"]) == (
        "graded", 12, 14, ""), row  # the written question's 2 points are a grader's
    assert all(t["passed"] for t in feedback(out, student).values())
