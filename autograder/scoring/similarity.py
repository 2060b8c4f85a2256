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
    ``ADDED``. Exactly the code that ran when graded."""
    out: dict[str, str] = {}
    for step in steps:
        source = _python_lines(step.source)
        if step.kind == "code" and source.strip():
            key = step.grade_id or ADDED
            out[key] = out.get(key, "") + source + "\n"
    return out


def _python_lines(source: str) -> str:
    """``source`` without shell and magic lines (``!pip install``, ``%cd``, a ``%%bash`` cell):
    notebook plumbing that many students add alike (from Colab's snippets), never evidence;
    grading skips most of it too."""
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith(("!", "%")))


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
            class_pairs: bool = True) -> list[Match]:
    """Every reported pair for ``students`` (default: all of ``answers_by_student``): each answer
    against every ``library`` module (name -> source) and, with ``class_pairs``, against every
    other student's answer to the same cell. ``given``: the release's code, subtracted from
    every answer. ``solutions``: the source solution of each cell (cell -> code); its
    statements that the library has too are what the cell's formula forces (see ``distinct``).
    ``class_pairs=False`` compares with the library only. Ordered by student (as given), cell,
    then similarity (highest first)."""
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
    for i, a in enumerate(others):  # each pair of students once, both directions
        for b in others[i + 1:]:
            if a not in mine and b not in mine:
                continue
            for cell in codes[a].keys() & codes[b].keys():
                for m in _pair(a, cell, b, codes[a][cell], codes[b][cell], rules[cell], True,
                               seen):
                    if m.student_id in mine:
                        found.append(m)
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
                          students=chosen, solutions=solutions(master))
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
