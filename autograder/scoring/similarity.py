"""Similarity of answers to the course library and to each other: a report for a person to read.

No rule can forbid text in a cell, and the student edition ships ``seqlab``, whose code answers
much of every assignment. So a grading run does what instructors do with MOSS: it fingerprints
every answer cell and reports those whose code is largely found in a library module or in another
student's answer to the same cell. A flag asks for a review; it never changes a score.

What is compared is code, not text: each answer's canonical form (``canonical``: parsed, with
comments, docstrings, statements that do nothing and the release's given code taken out, names
a student chooses numbered, ``x += y`` and ``x = x + y`` alike, a loop that builds a list as
the comprehension), cut after ``canonical.MAX_TOKENS`` tokens of it. Two measures, each the
share of the answer's own code found in the match: copydetect's k-grams of the canonical code
(winnowing with a window of 1, all k-grams kept: answers are short, and Python salts its string
hash per process, so a winnowed selection, and with it a similarity, would change from one run
to the next), and its statements as a multiset (each of the answer's functions against the
library function, with the functions it calls, that holds most of it), which no reordering or
padding changes. ``similarity`` is the larger.

A pair is reported when that share is at least ``threshold``, the shared code is at least
``min_match`` characters of tokenized code (a one-line answer is the same whoever writes it),
and at least ``min_distinct`` tokens of it are beyond what the cell's formula forces (see
``distinct``: a short answer written from the formula is the library's code too). The defaults
are chosen from the table of benchmarks/similarity_disguises.py (recall on disguised pastes of
every library function, false positives on honest answers; in the README) and checked in
``tests/test_similarity.py``.
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.util
import io
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from . import canonical
from .spreadsheet import write_csv

NOISE = 25          # k: the shortest shared run of canonical code that counts, in characters
THRESHOLD = 0.85    # share of an answer found in one match, by either measure
MIN_MATCH = 60      # shared tokenized characters (about three lines) to judge an answer at all
MIN_DISTINCT = 16   # shared tokens beyond what the cell's formula forces (see ``distinct``)
ADDED = "(added cells)"  # code cells a student added: compared as one more answer
COLUMNS = ("student_id", "cell", "match", "similarity")
SHOWN = 3           # matches of one answer shown side by side in the HTML (all are in the csv)


@dataclass(frozen=True)
class Match:
    """One reported pair: ``similarity`` of ``student_id``'s answer ``cell`` to ``match``, the
    larger of its two measures (``winnowing``: copydetect's k-grams of canonical code;
    ``structure``: its statements, in any order)."""

    student_id: str
    cell: str
    match: str           # a library module (``seqlab.decoding``) or another student's id
    similarity: float    # share of the answer's own code found in the match, 0..1
    shared: int          # characters of tokenized canonical code they share
    answer_html: str     # the answer's canonical code, shared regions marked (HTML-escaped)
    match_html: str      # the matching code, shared regions marked (HTML-escaped)
    winnowing: float = 0.0
    structure: float = 0.0
    distinct: int = 0    # shared tokens beyond what the formula forces


def _fingerprint(code: str, given=(), noise: int = NOISE):
    """copydetect's fingerprint of ``code`` (canonical code) without the k-grams of ``given``.

    copydetect's own boilerplate filter (``np.intersect1d(assume_unique=True)`` on a hash list
    that repeats a k-gram as often as the code does) would also drop repeated code, so the given
    k-grams are taken out of the fingerprint's hash index here instead."""
    from copydetect import CodeFingerprint
    from copydetect.utils import get_token_coverage

    fp = CodeFingerprint("answer.py", noise, 1, language="python", fp=io.StringIO(code))
    if given:
        fp.hash_idx = {h: i for h, i in fp.hash_idx.items() if h not in given}
        fp.hashes = set(fp.hash_idx)
        fp.token_coverage = get_token_coverage(fp.hash_idx, noise, len(fp.filtered_code))
    return fp


class Given:
    """Code the release gives (signatures, docstrings, given cells, visible tests), which is
    never evidence of copying: its statements are taken out of an answer by AST node (see
    ``canonical.Context``), and its k-grams out of what is left (the seam of a given signature
    and the answer's first line)."""

    def __init__(self, code: Iterable[str] = (), noise: int = NOISE):
        code = list(code)
        self.context = canonical.Context(code)
        self.hashes = frozenset().union(
            *(_fingerprint(canonical.canonical(c).text, noise=noise).hashes for c in code))


@dataclass
class _Code:
    """One answer or one library module, ready to compare: its canonical form, fingerprint,
    and the units an answer's functions are compared with (see ``canonical.units``)."""

    form: canonical.Form
    fp: object
    units: dict


def _answer(code: str, given: Given, context: canonical.Context, noise: int) -> _Code:
    form = canonical.canonical(code, context)
    return _Code(form, _fingerprint(form.text, given.hashes, noise),
                 {canonical.MODULE: sum((b.forms for b in form.blocks), Counter())})


@functools.lru_cache(maxsize=256)
def _module(code: str, noise: int) -> _Code:
    """A library module, compared as a whole (k-grams) and function by function with the
    functions each calls (statements): the same modules in every comparison of a run."""
    form = library_form(code)
    return _Code(form, _fingerprint(form.text, noise=noise), canonical.units(form))


def cache_folder() -> Path:
    """Where the grader keeps the library's canonical forms between runs: its own cache
    (``SEQLAB_GRADER_CACHE``, else ``$XDG_CACHE_HOME`` or ``~/.cache``), never a sandbox's."""
    home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(os.environ.get("SEQLAB_GRADER_CACHE") or Path(home) / "seqlab-grader")


def library_form(code: str) -> canonical.Form:
    """The canonical form of a library module, kept as JSON between runs: it depends only on
    the module's code and on ``canonical.py``, and putting the library's modules in canonical
    form again cost every grading run about half a CPU-second. A cache that cannot be read or
    written is computed around; what it holds is data, checked as it is read."""
    version = Path(canonical.__file__).read_bytes()
    key = hashlib.sha256(version + b"\0" + code.encode()).hexdigest()
    path = cache_folder() / f"canonical-{key}.json"
    try:
        data = json.loads(path.read_text())
        blocks = [canonical.Block(str(b["name"]), Counter({str(f): int(n) for f, n in
                                                           b["forms"]}),
                                  {str(c) for c in b["calls"]}) for b in data["blocks"]]
        return canonical.Form(str(data["text"]), blocks,
                              {str(f): int(n) for f, n in data["weight"]}, bool(data["parsed"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    form = canonical.canonical(code, limit=None)
    data = {"text": form.text, "parsed": form.parsed, "weight": sorted(form.weight.items()),
            "blocks": [{"name": b.name, "forms": sorted(b.forms.items()),
                        "calls": sorted(b.calls)} for b in form.blocks]}
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".canonical-", suffix=".json")
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
    except OSError:
        pass
    return form


def release_code(release: dict) -> list[str]:
    """Every code cell of a released notebook (a dict as ``normalize.read_notebook`` gives)."""
    return [c["source"] for c in release["cells"] if c["cell_type"] == "code"]


def answers(steps) -> dict[str, str]:
    """A student's code by answer cell, from the graded plan (``normalize.plan``): each answer
    cell under its grade_id, every cell the student added (or split off an answer) under
    ``ADDED``. Exactly the code that ran when graded. A measurement cell keeps only its
    measuring statements: the functions and classes it defines (an answer hidden there, where
    classmates are not compared) count as added cells."""
    from ..intake.normalize import measurement_for

    out: dict[str, str] = {}

    def add(key: str, code: str) -> None:
        if code.strip():
            out[key] = out.get(key, "") + code + "\n"

    for step in steps:
        if step.kind != "code":
            continue
        source = _python_lines(step.source)
        if step.grade_id and measurement_for(step.metadata):
            source, defined = _definitions_apart(source)
            add(ADDED, defined)
        add(step.grade_id or ADDED, source)
    return out


def _definitions_apart(source: str) -> tuple[str, str]:
    """(the rest, the top-level statements that define a function, class or lambda at any
    depth: under an ``if True:`` too) of ``source``; code that does not parse is all
    definitions, so it is compared with everyone."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return "", source
    rest, defined = [], []
    for node in tree.body:
        code = ast.get_source_segment(source, node) or ""
        is_definition = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                           ast.Lambda)) for n in ast.walk(node))
        (defined if is_definition else rest).append(code)
    return "\n".join(rest), "\n".join(defined)


def _python_lines(source: str) -> str:
    """``source`` without shell and magic lines (``!pip install``, ``%cd``, a ``%%bash`` cell):
    notebook plumbing that many students add alike (from Colab's snippets), never evidence;
    grading skips most of it too."""
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith(("!", "%")))


def measurement_cells(master: dict) -> set[str]:
    """The grade_ids of a master's measurement cells (``normalize.measurement_for``)."""
    from ..intake.normalize import measurement_for

    return {c["metadata"].get("nbgrader", {}).get("grade_id", "") for c in master["cells"]
            if measurement_for(c["metadata"])}


def solutions(master: dict) -> dict[str, str]:
    """The source solution of every answer cell of a master notebook, by grade_id: what the
    cell's formula forces is measured on it (see ``distinct``)."""
    from ..intake.normalize import plan

    return {cell: code for cell, code in answers(plan(master, master)).items() if cell != ADDED}


def answers_of(master: dict, notebook: Path | None) -> dict[str, str]:
    """``answers`` of a submitted notebook file; {} when it is missing or unreadable (it is
    ungradable then, and has nothing to compare)."""
    from ..intake.normalize import plan, read_notebook

    if notebook is None:
        return {}
    try:
        return answers(plan(master, read_notebook(notebook)))
    except Exception:  # whatever is wrong with the file, it has no answers to compare
        return {}


def library_sources(package: str = "seqlab") -> dict[str, str]:
    """Module name -> source of every module of the installed ``package`` (found, not imported),
    e.g. ``{"seqlab.lm": "...", "seqlab.data.vocab": "..."}``."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot find the package {package!r} to compare answers with")
    root = Path(next(iter(spec.submodule_search_locations)))
    sources = {}
    for path in sorted(root.rglob("*.py")):
        parts = (package, *path.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        sources[name] = path.read_text(encoding="utf-8", errors="replace")
    return sources


def _marked(code: str, slices) -> str:
    """``code`` HTML-escaped, the k-grams it shares marked (none: statements shared in another
    order only)."""
    from copydetect.utils import highlight_overlap

    if not getattr(slices, "size", 0):
        return html.escape(code)
    text, _ = highlight_overlap(code, slices, "<mark>", "</mark>", truncate=8, escape_html=True)
    return text


def _structure(a: _Code, b: _Code) -> tuple[float, Counter]:
    """Share of ``a``'s statements (by tokens) also in ``b``, and those statements: each
    function of ``a`` against the unit of ``b`` that holds most of it (a library function with
    what it calls; another answer as a whole), the rest of ``a`` against the whole of ``b``."""
    total, common = 0, Counter()
    whole = b.units.get(canonical.MODULE, Counter())
    functions = [u for name, u in b.units.items() if name != canonical.MODULE] or [whole]
    weight = a.form.weight
    for block in a.form.blocks:
        total += sum(weight[f] * n for f, n in block.forms.items())
        best = Counter()
        for unit in ([whole] if block.name == canonical.MODULE else functions):
            if unit.keys() & block.forms.keys():
                found = block.forms & unit
                if sum(weight[f] * n for f, n in found.items()) > \
                        sum(weight[f] * n for f, n in best.items()):
                    best = found
        common += best
    shared = sum(weight[f] * n for f, n in common.items())
    return (shared / total if total else 0.0), common


def distinct(common: Counter, form: canonical.Form, forced: Counter) -> int:
    """Tokens of the shared statements ``common`` beyond those the cell's formula forces:
    ``forced``, the statements that two honest implementations written from the formula, the
    cell's source solution and the library, have in common. A short answer written from the
    formula shares with the library what the solution has too; a paste brings the library's
    own choices (its checks and messages, its small functions, its way of writing a step)."""
    return sum(form.weight[f] * n for f, n in (common - forced).items())


def _forced(solution: str, given: Given, library: list[_Code]) -> Counter:
    """The statements of a cell's source solution that are also in the library."""
    form = canonical.canonical(solution, given.context)
    mine = sum((b.forms for b in form.blocks), Counter())
    return Counter({f: n for f, n in mine.items()
                    if any(f in m.units[canonical.MODULE] for m in library)})


class _Seen(dict):
    """Results of compared pairs of texts, kept where a text repeats: resubmitted, untouched or
    shared answers come again, and are compared once. Every other pair comes once, and keeping
    it would grow with the square of the class (hundreds of bytes a pair: tens of GB at
    10,000 students)."""

    def __init__(self, repeated: set[int]):
        super().__init__()
        self.repeated = repeated  # ids of the canonical forms of texts more than one answer has

    def keep(self, a, b, key, result) -> None:
        if id(a) in self.repeated or id(b) in self.repeated:
            self[key] = result


_UNSEEN = object()


def _pair(student, cell, other, a: _Code, b: _Code, rule, both, seen: _Seen) -> list[Match]:
    """The reported directions of one comparison: the student's, and with ``both`` (``other``
    is a student too) the other's."""
    from copydetect import compare_files

    threshold, min_match, min_distinct, forced = rule
    key = (id(a), id(b), id(forced))
    result = seen.get(key, _UNSEEN)
    if result is _UNSEEN:
        if a.fp.hashes.isdisjoint(b.fp.hashes) and not a.units[canonical.MODULE].keys() & \
                b.units[canonical.MODULE].keys():
            result = None
        else:
            sides = (a, b), (b, a)
            result = (compare_files(a.fp, b.fp)[1:],
                      [_structure(x, y) for x, y in sides[:1 + both]], {})
        seen.keep(a, b, key, result)
    if result is None:
        return []
    ((share, share_other), (slices, slices_other)), structures, marked = result
    found = []
    for side, who, what, sim, x, y, sx, sy in (
            (0, student, other, share, a, b, slices, slices_other),
            (1, other, student, share_other, b, a, slices_other, slices))[:1 + both]:
        winnowing = float(sim)
        structure, common = structures[side]
        shared = int(round(winnowing * x.fp.token_coverage))  # tokenized characters of x in y
        tokens = distinct(common, x.form, forced) if x.form.parsed or common else min_distinct
        best = max(winnowing, structure)
        if best >= threshold and shared >= min_match and tokens >= min_distinct:
            if side not in marked:
                marked[side] = _marked(x.fp.raw_code, sx), _marked(y.fp.raw_code, sy)
            found.append(Match(who, cell, what, round(best, 3), shared, *marked[side],
                               winnowing=round(winnowing, 3), structure=round(structure, 3),
                               distinct=tokens))
    return found


def compare(answers_by_student: Mapping[str, Mapping[str, str]], *,
            library: Mapping[str, str], given: Iterable[str] = (),
            students: Iterable[str] | None = None, threshold: float = THRESHOLD,
            min_match: int = MIN_MATCH, min_distinct: int = MIN_DISTINCT,
            solutions: Mapping[str, str] | None = None, noise: int = NOISE,
            class_pairs: bool = True, all_pairs: bool = False,
            measurements: Iterable[str] = ()) -> list[Match]:
    """Every reported pair for ``students`` (default: all of ``answers_by_student``): each answer
    against every ``library`` module (name -> source) and, with ``class_pairs``, against every
    other student's answer to the same cell (and code in added cells against every other
    student's answers, ``_crossed``). ``given``: the release's code, subtracted from
    every answer. ``solutions``: the source solution of each cell (cell -> code); its
    statements that the library has too are what the cell's formula forces (see ``distinct``).
    ``class_pairs=False`` compares with the library only, and so does every cell named in
    ``measurements`` (measurement cells, ``measurement_cells``: short code that students write
    alike from the question, where likeness is no evidence). Two students' answers
    are compared
    only where an index says they could be reported (``_candidate_pairs``); ``all_pairs``
    compares every pair instead, with the same result, in time that grows with the square of
    the class. Ordered by student (as given), cell, then similarity (highest first)."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    for name, value in (("min_match", min_match), ("min_distinct", min_distinct)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    chosen = list(answers_by_student if students is None else students)
    unknown = [s for s in chosen if s not in answers_by_student]
    if unknown:
        raise ValueError(f"students {unknown} have no answers to compare")
    given, texts, uses, codes = Given(given, noise), {}, Counter(), {}
    for student, cells in answers_by_student.items():
        # a name one cell imports (``import numpy as np`` in a cell of its own) is the same in all
        own = {k: v for code in cells.values() for k, v in canonical.imports(code).items()}
        context = given.context.including(own)
        codes[student] = {}
        for cell, code in cells.items():
            key = code, tuple(sorted(own.items()))
            if key not in texts:  # one canonical form per distinct text and imports
                texts[key] = _answer(code, given, context, noise)
            codes[student][cell] = texts[key]
            uses[key] += 1
    seen = _Seen({id(texts[key]) for key, n in uses.items() if n > 1})
    modules = {name: _module(code, noise) for name, code in library.items()}
    forced = {cell: _forced(code, given, list(modules.values()))
              for cell, code in (solutions or {}).items()}
    rules = {cell: (threshold, min_match, min_distinct, forced.get(cell, Counter()))
             for cells in codes.values() for cell in cells}
    mine, found = set(chosen), []
    for student in chosen:
        for cell, code in codes[student].items():
            for name, module in modules.items():
                found += _pair(student, cell, name, code, module, rules[cell], False, seen)
    others = list(answers_by_student) if class_pairs else []
    measurements = set(measurements)
    paired = {s: {c: code for c, code in cells.items() if c not in measurements}
              for s, cells in codes.items()}
    pairs = (_all_pairs if all_pairs else _candidate_pairs)(paired, others, mine, threshold)
    for cell, i, j in pairs:  # each pair of students once, both directions
        a, b = others[i], others[j]
        for m in _pair(a, cell, b, codes[a][cell], codes[b][cell], rules[cell], True, seen):
            if m.student_id in mine:
                found.append(m)
    once = _Seen(set())  # one direction each: kept apart from ``seen``'s results of two
    for i, cell_i, j, cell_j in _crossed(paired, others, mine, threshold, all_pairs):
        a, b = others[i], others[j]
        found += _pair(a, cell_i, b, paired[a][cell_i], paired[b][cell_j], rules[cell_i],
                       False, once)
    rank = {s: i for i, s in enumerate(chosen)}
    # cells in the order of the whole class, whoever is chosen: a shard's report and flags
    # then read as the unsharded run's
    cells = {c: i for i, c in enumerate(dict.fromkeys(
        c for answers in answers_by_student.values() for c in answers))}
    found.sort(key=lambda m: (rank[m.student_id], cells.get(m.cell, len(cells)),
                              -m.similarity, m.match))
    shown: dict[tuple, int] = {}  # the HTML shows the closest SHOWN matches of each answer
    for i, m in enumerate(found):
        shown[m.student_id, m.cell] = shown.get((m.student_id, m.cell), 0) + 1
        if shown[m.student_id, m.cell] > SHOWN:
            found[i] = replace(m, answer_html="", match_html="")
    return found


def _all_pairs(codes: dict, others: list[str], mine: set[str], threshold: float):
    """Every pair of students (indices into ``others``, i < j) with answers to the same cell,
    one of them in ``mine``: (cell, i, j)."""
    for i, a in enumerate(others):
        for j in range(i + 1, len(others)):
            b = others[j]
            if a in mine or b in mine:
                for cell in codes[a].keys() & codes[b].keys():
                    yield cell, i, j


def _candidate_pairs(codes: dict, others: list[str], mine: set[str], threshold: float):
    """The pairs of ``_all_pairs`` that can be reported, found through an index (prefix
    filtering, as in set-similarity joins), so that a class of 10,000 is not 50 million pairs
    per cell. An answer ``a`` is reported against ``b`` only when ``b`` holds ``threshold``
    of it by one measure, and then ``b`` must hold one of ``a``'s *rare* k-grams or
    statements (``_rare``): those left when the most common ones in the cell, as many as cover
    less than ``threshold`` of ``a``, are set aside. Each of ``mine``'s answers looks up, in an
    index of the rare keys only, the answers that hold one: its candidates. A pair comes once,
    as (cell, i, j) with i < j, as in ``_all_pairs``, so the report is the same."""
    cells: dict[str, list[tuple[int, _Code]]] = {}
    for i, student in enumerate(others):
        for cell, code in codes[student].items():
            cells.setdefault(cell, []).append((i, code))
    for cell, holders in sorted(cells.items()):
        texts = {id(c): c for _, c in holders}  # repeated texts count once
        df_hashes = Counter(h for c in texts.values() for h in c.fp.hashes)
        df_forms = Counter(f for c in texts.values() for f in c.units[canonical.MODULE])
        rare = {key: _rare(c, df_hashes, df_forms, threshold) for key, c in texts.items()}
        asked = [(i, c) for i, c in holders if others[i] in mine]
        wanted_h = set().union(*(rare[id(c)][0] for _, c in asked))
        wanted_f = set().union(*(rare[id(c)][1] for _, c in asked))
        index: dict[object, list[int]] = {}
        for i, c in holders:
            for key in (c.fp.hashes & wanted_h) | (c.units[canonical.MODULE].keys() & wanted_f):
                index.setdefault(key, []).append(i)
        pairs = set()
        for i, c in asked:
            hashes, forms = rare[id(c)]
            for key in (*hashes, *forms):
                pairs.update((min(i, j), max(i, j)) for j in index.get(key, ()) if j != i)
        for i, j in sorted(pairs):
            yield cell, i, j


def _crossed(codes: dict, others: list[str], mine: set[str], threshold: float,
             all_pairs: bool):
    """(i, cell_i, j, cell_j): what to compare across cells, one direction each (student i,
    one of ``mine``, against student j): code in an added cell against a classmate's answer to
    any cell, and an answer against a classmate's added code, so that an answer copied into an
    added cell (or a measurement cell's definitions, see ``answers``) meets the one it was
    copied from. Through the index of ``_candidate_pairs`` unless ``all_pairs``."""
    if not any(ADDED in codes[s] for s in others):
        return
    entries = [(i, cell, code) for i, s in enumerate(others) for cell, code in codes[s].items()]
    asked = [(i, cell, code) for i, cell, code in entries if others[i] in mine]

    def crossing(i, cell_i, j, cell_j):
        return i != j and (cell_i == ADDED) != (cell_j == ADDED)

    if all_pairs:
        yield from ((i, ci, j, cj) for i, ci, _ in asked for j, cj, _ in entries
                    if crossing(i, ci, j, cj))
        return
    texts = {id(c): c for _, _, c in entries}
    df_hashes = Counter(h for c in texts.values() for h in c.fp.hashes)
    df_forms = Counter(f for c in texts.values() for f in c.units[canonical.MODULE])
    rare = {id(c): _rare(c, df_hashes, df_forms, threshold) for _, _, c in asked}
    wanted_h = set().union(*(h for h, _ in rare.values()))
    wanted_f = set().union(*(f for _, f in rare.values()))
    index: dict[object, list[tuple[int, str]]] = {}
    for j, cell, c in entries:
        for key in (c.fp.hashes & wanted_h) | (c.units[canonical.MODULE].keys() & wanted_f):
            index.setdefault(key, []).append((j, cell))
    found = set()
    for i, cell_i, c in asked:
        hashes, forms = rare[id(c)]
        for key in (*hashes, *forms):
            found.update((i, cell_i, j, cj) for j, cj in index.get(key, ())
                         if crossing(i, cell_i, j, cj))
    yield from sorted(found)


def _rare(code: _Code, df_hashes: Counter, df_forms: Counter, threshold: float):
    """(k-gram hashes, statements) of an answer, at least one of which any answer holding
    ``threshold`` of it must share: all but its most common ones (by ``df_*``, the number of
    texts of the cell that hold them) that together make less than ``threshold`` of its
    k-gram coverage (``_coverage``), respectively of its statements' tokens."""
    fp = code.fp
    order = sorted(fp.hash_idx, key=lambda h: (-df_hashes[h], h))
    low, high = 0, len(order)  # the most common ``low`` hashes cover less than threshold
    while low < high:
        middle = (low + high + 1) // 2
        if _coverage(fp, order[:middle]) / fp.token_coverage < threshold:  # as _pair divides
            low = middle
        else:
            high = middle - 1
    counts = code.units[canonical.MODULE]
    weight = code.form.weight
    total = sum(weight[f] * n for f, n in counts.items())
    kept, forms = 0, sorted(counts, key=lambda f: (-df_forms[f], f))
    common = 0
    for form in forms:
        if total and (kept + weight[form] * counts[form]) / total >= threshold:  # as _structure
            break
        kept += weight[form] * counts[form]
        common += 1
    return frozenset(order[low:]), frozenset(forms[common:])


def _coverage(fp, hashes) -> int:
    """Characters of ``fp``'s tokenized code that the k-grams ``hashes`` cover (copydetect's
    token coverage, for a subset of the hashes)."""
    import numpy as np

    if not hashes:
        return 0
    starts = np.concatenate([np.asarray(fp.hash_idx[h]) for h in hashes])
    covered = np.zeros(len(fp.filtered_code) + fp.k, dtype=bool)
    for offset in range(fp.k):
        covered[starts + offset] = True
    return int(covered.sum())


def flags(matches: Iterable[Match]) -> dict[str, str]:
    """student_id -> the cells to review, each with its closest match, e.g.
    ``"perplexity: seqlab.lm 0.94; count_ngrams: s017 1.00 (+2 more)"``."""
    by: dict[str, dict[str, list[Match]]] = {}
    for m in matches:
        by.setdefault(m.student_id, {}).setdefault(m.cell, []).append(m)
    out = {}
    for student, cells in by.items():
        parts = []
        for cell, ms in cells.items():
            best = max(ms, key=lambda m: m.similarity)
            more = f" (+{len(ms) - 1} more)" if len(ms) > 1 else ""
            parts.append(f"{cell}: {best.match} {best.similarity:.2f}{more}")
        out[student] = "; ".join(parts)
    return out


def _atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}")
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_report(matches: list[Match], *, out: Path, title: str = "Similarity report") -> None:
    """``out/similarity.csv`` (one row per reported pair), ``similarity.html`` (each pair side by
    side, shared code marked) and ``similarity.json`` (the same, for ``merge``)."""
    out = Path(out)
    write_csv(out / "similarity.csv", COLUMNS,
              ([m.student_id, m.cell, m.match, f"{m.similarity:.3f}"] for m in matches))
    _atomic(out / "similarity.json", json.dumps([asdict(m) for m in matches], indent=1))
    _atomic(out / "similarity.html", _html(matches, title))


def read_report(folder: Path) -> list[Match]:
    """The pairs a grading output reported ([] when it has no report)."""
    path = Path(folder) / "similarity.json"
    return [Match(**m) for m in json.loads(path.read_text())] if path.exists() else []


def _html(matches: list[Match], title: str) -> str:
    shown = [m for m in matches if m.answer_html]
    rows = "\n".join(
        f"<h2>{html.escape(m.student_id)} · {html.escape(m.cell)} · {html.escape(m.match)}: "
        f"{m.similarity:.0%} of the answer (k-grams {m.winnowing:.0%}, statements "
        f"{m.structure:.0%}; {m.shared} shared characters of tokenized code, {m.distinct} "
        "tokens beyond the formula)</h2>"
        f"<table><tr><th>{html.escape(m.student_id)}</th><th>{html.escape(m.match)}</th></tr>"
        f"<tr><td><pre>{m.answer_html}</pre></td><td><pre>{m.match_html}</pre></td></tr>"
        "</table>" for m in shown)
    return ("<!doctype html><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>"
            "table{width:100%;table-layout:fixed}td{vertical-align:top;width:50%}"
            "pre{white-space:pre-wrap;font-size:12px}mark{background:#fd8}</style>"
            f"<h1>{html.escape(title)}</h1><p>{len(matches)} pair(s) to review, all in "
            f"similarity.csv; here the closest {SHOWN} of each answer ({len(shown)}), as "
            "compared: comments, docstrings, statements that do nothing and the code the "
            "release gives left out. Marked: code the two share (names and layout ignored). A "
            "pair is a reason to look, not a verdict: a flag never changes a score."
            f"</p>\n{rows}\n")


def report_class(*, master: dict, notebooks: Mapping[str, Path | None], release: dict,
                 out: Path, students: Iterable[str] | None = None, log=print) -> dict[str, str]:
    """Compare the submitted ``notebooks`` (student_id -> file, None when there is none) with
    the installed ``seqlab`` and with each other (see ``compare``), write the report into
    ``out`` and return the flags of ``students`` (default: all). A failure here is logged and
    leaves the grades alone: every student then reads "not checked"."""
    chosen = list(notebooks if students is None else students)
    try:
        matches = compare({s: answers_of(master, path) for s, path in notebooks.items()},
                          library=library_sources(), given=release_code(release),
                          students=chosen, solutions=solutions(master),
                          measurements=measurement_cells(master))
        write_report(matches, out=out)
    except Exception as err:  # the report must never cost the grades
        log(f"similarity report failed ({type(err).__name__}: {err}); grades are unaffected")
        return {s: f"not checked: the similarity report failed ({type(err).__name__})"
                for s in chosen}
    found = flags(matches)
    log(f"similarity: {len(found)} of {len(chosen)} student(s) flagged for review "
        f"({out / 'similarity.html'})")
    return found


def library_only(*, answers_of_student: Mapping[str, str], release: dict | None,
                 solutions: Mapping[str, str] | None = None, threshold: float = THRESHOLD,
                 min_match: int = MIN_MATCH) -> list[dict]:
    """One submission against the library alone (Gradescope grades one at a time, so it has
    no class to compare with): [{cell, match, similarity}] of the reported pairs."""
    matches = compare({"submission": answers_of_student}, library=library_sources(),
                      given=release_code(release) if release else (), solutions=solutions,
                      threshold=threshold, min_match=min_match)
    return [{"cell": m.cell, "match": m.match, "similarity": m.similarity} for m in matches]
