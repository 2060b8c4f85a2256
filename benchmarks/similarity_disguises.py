"""The similarity report against scripted disguises: recall on pasted library code, false
positives on honest answers, per disguise; the table in the README's similarity paragraph.

Pastes: every function and method of every ``seqlab`` module with 4 statements or more
(``--min-statements``: a shorter one is the same whoever writes it), with the imports it needs,
put into the answer cell of its topic's assignment whose source solution shares most of its
statements (where what the formula forces is discounted most; modules of no topic go to each
assignment in turn), under each disguise below. A paste counts under a disguise where the
disguise changed it. Honest answers: the source solution of every answer cell and the honest
students of ``tests/similarity_class.py`` (written independently; the formula-like cases among
them), each under the same disguises (an honest student may write ``x = x + 1`` too), against
the library and against each other (two honest authors of one cell). Each cell of the table:
pastes flagged / pastes, honest answers flagged / honest answers, at that threshold with the
report's other defaults; then the same without the rule for formula-like answers.

    python benchmarks/similarity_disguises.py [--thresholds 0.75,0.8,...] [--markdown]
"""

from __future__ import annotations

import argparse
import ast
import copy
import functools
import random
import sys
import tempfile
import textwrap
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

TOPIC = {"lm": "01_language_models", "rnn": "02_rnn_backprop", "seq2seq": "03_seq2seq",
         "attention": "04_attention", "transformer": "05_transformer",
         "decoding": "06_decoding", "bleu": "07_bleu", "mlm": "08_bert_mlm"}
COMMENT = "# " + "x" * 100_000


# ------------------------------------------------------------------------------ disguises
class _Renamer(ast.NodeTransformer):
    """Every name the code binds (and its function's name) renamed."""

    def __init__(self, names):
        self.names = names

    def visit_Name(self, node):
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node):
        node.arg = self.names.get(node.arg, node.arg)
        return node

    def visit_FunctionDef(self, node):
        node.name = self.names.get(node.name, node.name)
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


def rename(fn: ast.FunctionDef) -> ast.FunctionDef:
    """Every name the function binds, and its own, renamed (keyword arguments keep theirs)."""
    bound = sorted({n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                    and isinstance(n.ctx, ast.Store)} | {a.arg for a in ast.walk(fn)
                                                         if isinstance(a, ast.arg)}
                   | {fn.name})
    names = {name: f"{'q' if name[:1] != '_' else '_q'}{i}_{name[::-1].strip('_')}"
             for i, name in enumerate(bound) if name not in ("self", "cls")}
    return _Renamer(names).visit(fn)


def _reads(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def _writes(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)}


_FLOW = (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.If, ast.For, ast.While, ast.Try,
         ast.With)


def reorder(fn: ast.FunctionDef, rng: random.Random) -> ast.FunctionDef:
    """Statements that do not depend on each other (neither reads or writes what the other
    writes, no control flow) in a random order that keeps every dependency."""
    for node in ast.walk(fn):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                setattr(node, name, _shuffled(body, rng))
    return fn


def _shuffled(body, rng):
    n = len(body)
    after = {i: set() for i in range(n)}  # i must come after each of after[i]
    for j in range(n):
        for i in range(j):
            a, b = body[i], body[j]
            if isinstance(a, _FLOW) or isinstance(b, _FLOW) or _writes(a) & (
                    _reads(b) | _writes(b)) or _writes(b) & _reads(a) or isinstance(
                    a, ast.Expr) or isinstance(b, ast.Expr):
                after[j].add(i)
    out, done = [], set()
    while len(out) < n:
        ready = [i for i in range(n) if i not in done and after[i] <= done]
        pick = rng.choice(ready)
        out.append(body[pick])
        done.add(pick)
    return out


PADS = ["pass", "_unused = 0", "None", "if False:\n    pass", "...", "_tmp = len('pad')"]


def pad(fn: ast.FunctionDef) -> ast.FunctionDef:
    """A statement that does nothing between every two statements."""
    count = 0
    for node in ast.walk(fn):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                out = []
                for stmt in body:
                    out.append(stmt)
                    out += ast.parse(PADS[count % len(PADS)]).body
                    count += 1
                setattr(node, name, out)
    return fn


def no_docstrings(fn: ast.FunctionDef) -> ast.FunctionDef:
    for node in ast.walk(fn):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return fn


class _Augmented(ast.NodeTransformer):
    """``x op= y`` written out, ``x = x op y`` written in."""

    def visit_AugAssign(self, node):
        load = copy.deepcopy(node.target)
        for n in ast.walk(load):
            if hasattr(n, "ctx"):
                n.ctx = ast.Load()
        return ast.Assign([node.target], ast.BinOp(load, node.op, node.value))

    def visit_Assign(self, node):
        if len(node.targets) == 1 and isinstance(node.value, ast.BinOp) and ast.dump(
                node.value.left).replace("Load", "Store") == ast.dump(node.targets[0]):
            return ast.AugAssign(node.targets[0], node.value.op, node.value.right)
        return node


def augmented(fn):
    return _Augmented().visit(fn)


def light(fn):
    """The light mechanical disguise that once hid every paste: docstrings dropped, ``x += y``
    written out, a no-op assignment after each statement."""
    fn = augmented(no_docstrings(fn))
    for node in ast.walk(fn):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                out = []
                for i, stmt in enumerate(body):
                    out += [stmt, *ast.parse(f"_n{i} = {i}").body]
                setattr(node, name, out)
    return fn


def inline_calls(fn, callees):
    """Calls of the module's one-expression functions replaced by that expression; a statement
    calling a function of the module without a return value replaced by its statements."""
    class Inline(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            h = _callee(node, callees)
            if h is None or not _is_one_return(h):
                return node
            return _substitute(_body(h)[0].value, h, node)

        def visit_Expr(self, node):
            self.generic_visit(node)
            h = _callee(node.value, callees) if isinstance(node.value, ast.Call) else None
            if h is not None and not any(isinstance(n, ast.Return) for n in ast.walk(h)):
                return [_substitute(s, h, node.value) for s in _body(h)]
            return node

    return Inline().visit(fn)


def _callee(call, callees):
    return callees.get(call.func.id) if isinstance(call.func, ast.Name) else None


def _body(h):
    body = h.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body


def _is_one_return(h):
    body = _body(h)
    return len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None


def _substitute(node, h, call):
    params = [a.arg for a in h.args.posonlyargs + h.args.args]
    values = dict(zip(params, call.args))
    values.update({k.arg: k.value for k in call.keywords if k.arg})
    for a, d in zip(reversed(h.args.args), reversed(h.args.defaults)):
        values.setdefault(a.arg, d)

    class Sub(ast.NodeTransformer):
        def visit_Name(self, n):
            return copy.deepcopy(values[n.id]) if n.id in values and isinstance(
                n.ctx, ast.Load) else n
    return Sub().visit(copy.deepcopy(node))


class _Loops(ast.NodeTransformer):
    """A comprehension assigned to a name as a loop that builds it, and back."""

    def __init__(self):
        self.count = 0

    def _stmts(self, body):
        out = []
        for stmt in body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                    stmt.targets[0], ast.Name) and isinstance(stmt.value, (ast.ListComp,
                                                                           ast.SetComp)):
                name, comp = stmt.targets[0].id, stmt.value
                init = "[]" if isinstance(comp, ast.ListComp) else "set()"
                add = "append" if isinstance(comp, ast.ListComp) else "add"
                inner = ast.parse(f"{name}.{add}(x)").body[0]
                inner.value.args = [comp.elt]
                for gen in reversed(comp.generators):
                    for cond in reversed(gen.ifs):
                        inner = ast.If(cond, [inner], [])
                    inner = ast.For(gen.target, gen.iter, [inner], [])
                out += [ast.parse(f"{name} = {init}").body[0], inner]
            elif isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.ListComp):
                self.count += 1
                name = f"built_{self.count}"
                comp = stmt.value
                out += self._stmts([ast.Assign([ast.Name(name, ast.Store())], comp)])
                out.append(ast.Return(ast.Name(name, ast.Load())))
            else:
                out.append(stmt)
        return out

    def generic_visit(self, node):
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                setattr(node, name, self._stmts(body))
        return node


def loops(fn):
    return _Loops().visit(fn)


def disguises(source: str, fn: ast.FunctionDef, callees, rng) -> dict[str, str]:
    """Each disguise of one pasted function (``source``: its text as in the module)."""
    def made(f):
        return ast.unparse(ast.fix_missing_locations(f(copy.deepcopy(fn))))

    out = {"verbatim": source,
           "rename": made(rename),
           "reorder": made(lambda f: reorder(f, rng)),
           "pad": made(pad),
           "no docstrings": made(no_docstrings),
           "augmented": made(augmented),
           "inlined calls": made(lambda f: inline_calls(f, callees)),
           "loops/comprehensions": made(loops),
           "100,000-char comment": source,  # the comment goes before the imports
           "light mechanical": made(light),
           "all at once": made(lambda f: light(loops(rename(reorder(
               inline_calls(f, callees), rng)))))}
    return out


# ------------------------------------------------------------------------------ the corpus
def library_functions(sources):
    """(module, name, imports, source, node, callees) of every function and method of the
    library; ``imports``: the module's (absolute) imports that the function uses, which a
    student adds to run the paste."""
    for module, code in sorted(sources.items()):
        tree = ast.parse(code)
        callees = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        imported = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                    and not getattr(n, "level", 0)]
        for node in tree.body:
            found = [node] if isinstance(node, ast.FunctionDef) else [
                n for n in getattr(node, "body", []) if isinstance(node, ast.ClassDef)
                and isinstance(n, ast.FunctionDef)]
            for fn in found:
                text = textwrap.dedent(ast.get_source_segment(code, fn, padded=True))
                used = _reads(fn)
                imports = "\n".join(ast.unparse(i) for i in imported if any(
                    (a.asname or a.name.split(".")[0]) in used for a in i.names))
                yield module, fn.name, imports, text, ast.parse(text).body[0], callees


def answered(fn, solutions: dict) -> str:
    """The answer cell whose source solution has most statements of ``fn``: the cell a
    student would paste it into (what its formula forces is discounted there)."""
    mine = _statements(ast.unparse(fn))
    weight = _weights(ast.unparse(fn))

    def overlap(cell):
        common = mine & _statements(solutions[cell])
        return sum(weight[f] * n for f, n in common.items()), cell

    return max(map(overlap, sorted(solutions)))[1]


@functools.cache
def _statements(code: str) -> Counter:
    from autograder.scoring.canonical import canonical

    return sum((b.forms for b in canonical(code).blocks), Counter())


def _weights(code: str) -> dict:
    from autograder.scoring.canonical import canonical

    return canonical(code).weight


def statements(fn) -> int:
    from autograder.scoring.canonical import canonical

    form = canonical(ast.unparse(fn))
    return sum(sum(b.forms.values()) for b in form.blocks)


def corpus(min_statements: int = 4):
    """(released notebooks, pastes, honest answers, source solutions): pastes and honest
    answers as {assignment: {id: {cell: code}}}, ids ``module.function|disguise`` and
    ``author|disguise|cell``."""
    from similarity_class import CLASS, MORE_HONEST

    from autograder.authoring.release import release
    from autograder.course import source_notebook
    from autograder.intake.normalize import plan, read_notebook
    from autograder.scoring import similarity

    library = similarity.library_sources()
    rng = random.Random(0)
    assignments = sorted(TOPIC.values())
    masters = {a: read_notebook(source_notebook(a)) for a in assignments}
    with tempfile.TemporaryDirectory() as tmp:
        released = {a: read_notebook(release(a, Path(tmp)) / f"{a}.ipynb") for a in assignments}
    solutions = {a: {c: code for c, code in similarity.answers(plan(m, m)).items()
                     if c != similarity.ADDED} for a, m in masters.items()}
    pastes: dict[str, dict[str, dict[str, str]]] = defaultdict(dict)
    turn = 0
    for module, name, imports, text, fn, callees in library_functions(library):
        if statements(fn) < min_statements:
            continue
        a = TOPIC.get(module.split(".")[1]) if module.count(".") else None
        if a is None:  # a module of no topic: each assignment in turn
            a, turn = assignments[turn % len(assignments)], turn + 1
        cell = answered(fn, solutions[a])
        base = ast.unparse(fn)
        for disguise, code in disguises(text, fn, callees, rng).items():
            if disguise in ("verbatim", "100,000-char comment") or code != base:
                if disguise == "100,000-char comment":
                    code = COMMENT + "\n" + imports + "\n\n" + text
                elif imports:
                    code = imports + "\n\n\n" + code
                pastes[a][f"{module}.{name}|{disguise}"] = {cell: code}
    honest: dict[str, dict[str, dict[str, str]]] = defaultdict(dict)
    for a in assignments:
        authors = {"solution": solutions[a]}
        authors.update({s: cs for s, cs in {**CLASS.get(a, {}), **MORE_HONEST.get(a, {})}.items()
                        if s in HONEST})
        for author, answers in authors.items():
            for cell, code in answers.items():
                tree = ast.parse(code)
                variants = {"verbatim": code}
                for disguise in HONEST_DISGUISES:
                    variants[disguise] = "\n\n".join(
                        disguises(code, f, {}, rng)[disguise]
                        for f in tree.body if isinstance(f, ast.FunctionDef)) or code
                for disguise, v in variants.items():
                    honest[a][f"{author}|{disguise}|{cell}"] = {cell: v}
    return released, pastes, honest, solutions


HONEST = {"loops", "numpy", "einsum", "sets", "textbook", "formula", "independent_a",
          "independent_b", "honest_a"}
HONEST_DISGUISES = ("rename", "reorder", "pad", "no docstrings", "augmented",
                    "loops/comprehensions", "light mechanical")


def measure(released, pastes, honest, solutions):
    """answer id -> [(similarity, shared, distinct)] of every pair it is in, whatever the
    thresholds: pastes and honest answers against the library, honest authors of one cell
    against each other (each disguise with the same disguise)."""
    from autograder.scoring import similarity

    library = similarity.library_sources()
    found = defaultdict(list)
    loose = {"threshold": 1e-9, "min_match": 0, "min_distinct": 0}
    for a in sorted(set(pastes) | set(honest)):
        given = similarity.release_code(released[a])
        both = {**pastes.get(a, {}), **honest.get(a, {})}
        for m in similarity.compare(both, library=library, given=given, class_pairs=False,
                                    solutions=solutions[a], **loose):
            found[m.student_id].append((m.similarity, m.shared, m.distinct))
        by_cell = defaultdict(dict)
        for hid, answers in honest.get(a, {}).items():
            author, disguise, cell = hid.split("|")
            by_cell[cell, disguise][author] = answers
        for (cell, disguise), authors in by_cell.items():
            for m in similarity.compare(authors, library=library, given=given,
                                        solutions=solutions[a], **loose):
                if m.match in authors:
                    found[f"{m.student_id}|{disguise}|{cell}"].append(
                        (m.similarity, m.shared, m.distinct))
    for a in set(pastes) | set(honest):
        for key in [*pastes.get(a, {}), *honest.get(a, {})]:
            found.setdefault(key, [])
    return found


def table(found, thresholds, min_match, min_distinct):
    """disguise -> threshold -> [pastes flagged, pastes, honest flagged, honest]."""
    rows = defaultdict(lambda: defaultdict(lambda: [0, 0, 0, 0]))
    for key, pairs in found.items():
        parts = key.split("|")
        paste = len(parts) == 2
        disguise = parts[1]
        for t in thresholds:
            hit = any(s >= t and sh >= min_match and d >= min_distinct for s, sh, d in pairs)
            row = rows[disguise][t]
            row[0 if paste else 2] += hit
            row[1 if paste else 3] += 1
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--thresholds", default="0.75,0.8,0.85,0.9")
    parser.add_argument("--min-statements", type=int, default=4)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    from autograder.scoring import similarity

    start = time.perf_counter()
    released, pastes, honest, solutions = corpus(args.min_statements)
    found = measure(released, pastes, honest, solutions)
    print(f"{sum(map(len, pastes.values()))} pastes, {sum(map(len, honest.values()))} honest "
          f"answers, measured in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    show(table(found, thresholds, similarity.MIN_MATCH, similarity.MIN_DISTINCT), args.markdown)
    print("\nwithout the rule for formula-like answers (min_distinct 0):")
    show(table(found, thresholds, similarity.MIN_MATCH, 0), args.markdown)


def show(rows, markdown):
    thresholds = sorted({t for r in rows.values() for t in r})
    head = ["disguise"] + [f"{t:g}: pastes, honest" for t in thresholds]
    lines = [head]
    order = ["verbatim", "rename", "reorder", "pad", "no docstrings", "augmented",
             "inlined calls", "loops/comprehensions", "100,000-char comment",
             "light mechanical", "all at once"]
    for disguise in [d for d in order if d in rows]:
        cells = [disguise]
        for t in thresholds:
            hit, n, fp, m = rows[disguise][t]
            cells.append(f"{hit}/{n}, {fp}/{m}" if m else f"{hit}/{n}, (none)")
        lines.append(cells)
    if markdown:
        print("| " + " | ".join(lines[0]) + " |")
        print("|" + "---|" * len(lines[0]))
        for line in lines[1:]:
            print("| " + " | ".join(line) + " |")
    else:
        width = [max(len(line[i]) for line in lines) for i in range(len(head))]
        for line in lines:
            print("  ".join(c.ljust(w) for c, w in zip(line, width)))


if __name__ == "__main__":
    main()
