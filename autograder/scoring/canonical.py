"""The canonical form of Python code that the similarity report compares: code, not text.

A student can change a pasted answer without understanding it: rename, reformat, drop comments
and docstrings, write ``x += y`` out, build a list with a loop instead of a comprehension, add
statements that do nothing, reorder statements that do not depend on each other, or pad the
cell with a long comment. None of that changes the canonical form of its statements. What is
compared is ``Form``: the code with all of that undone (its text for copydetect's k-grams), and
the bag of its statements (for the structural measure, which no reordering changes).

A statement's form keeps what a student cannot rename (builtins, imported modules resolved to
their full name, attributes, constants) and numbers every other name by its first occurrence in
that statement (``v0 = v1 @ v2.transpose(-2, -1)``), so renaming is invisible while the data
flow inside the statement is kept. Code that does not parse (a syntax error in one cell) is
normalised per top-level chunk: the chunks that parse as above, the rest token by token.
Nothing here executes or imports what it reads, and nothing raises on any input.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import io
import re
import tokenize
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_TOKENS = 20_000   # tokens of canonical code compared per answer; a longer one is cut there
BUILTINS = frozenset(dir(builtins)) - {"_"}
MODULE = "<module>"   # the block of an answer's statements outside any function
_TOKEN = re.compile(r"\d[\w.]*|\w+|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\S")
# calls that a padding statement may make without doing anything (``_ = len(x)``)
_PURE_CALLS = frozenset({"len", "int", "float", "str", "bool", "abs", "min", "max", "tuple",
                         "range", "isinstance", "type", "id", "repr", "round", "hash"})


@dataclass
class Block:
    """The statement forms of one function of the code (or of its top level, ``MODULE``), as a
    multiset, and the names it calls (a library function is compared with what it calls)."""

    name: str
    forms: Counter = field(default_factory=Counter)
    calls: set = field(default_factory=set)


@dataclass
class Form:
    """Canonical code: ``text`` for k-grams (cut at ``MAX_TOKENS``), ``blocks`` of statement
    forms, and each form's ``weight`` (its tokens). ``parsed``: False when some of the code did
    not parse and was compared as tokens only (it has a text, and no forms)."""

    text: str
    blocks: list[Block]
    weight: dict[str, int]
    parsed: bool = True


class Context:
    """What the code around an answer tells: the imports of the release's given cells (so that
    ``np`` in an answer is ``numpy``, as in a library module that imports it itself) and the
    release's statements, which are given and never count: matched by AST node, never by their
    text (a given function or block as it is, a given statement also renamed)."""

    def __init__(self, given: Iterable[str] = ()):
        trees = [_parse(code)[0] for code in given]
        self.imports: dict[str, str] = {}
        for tree in trees:
            self.imports.update(_imports(tree))
        self.statements: set[str] = set()   # ast.dump of every given statement
        self.forms: set[str] = set()        # canonical form of every given simple statement
        for tree in trees:
            with contextlib.suppress(Exception):  # given code nothing can walk: none to take out
                tree, imported = _normalise(tree, self.imports)
                local = _local(tree, imported)
                for node in ast.walk(tree):
                    if isinstance(node, ast.stmt):
                        self.statements.add(ast.dump(node))
                        if _simple(node):
                            self.forms.add(_key(node, local))

    def including(self, imports: dict[str, str]) -> Context:
        """This context with ``imports`` too (a student's own, from their other cells)."""
        if not imports:
            return self
        other = copy.copy(self)
        other.imports = {**self.imports, **imports}
        return other


def imports(code: str) -> dict[str, str]:
    """What ``code`` imports, name -> full dotted name (``np`` -> ``numpy``)."""
    return _imports(_parse(code)[0])


def canonical(code: str, context: Context | None = None, limit: int | None = MAX_TOKENS
              ) -> Form:
    """The canonical ``Form`` of ``code``; the release's statements (``context``) left out,
    cut after ``limit`` tokens of canonical code (syntax nodes where it parsed)."""
    context = context or Context()
    tree, rest = _parse(code)
    try:
        tree, imported = _normalise(tree, context.imports)
        local = _local(tree, imported)
        tree.body = _without(tree.body, context, local)
        if limit is not None:
            tree.body = _cut(tree.body, limit)
        text = "\n".join(map(_unparse, tree.body))
        form = _forms(tree, local)
    except Exception:  # nested beyond what ast can walk, or what it cannot print: tokens only
        form, text, rest = Form("", [], {}, False), "", [code]
    if rest:
        text = (text + "\n" + "\n".join(_token_text(c, limit or MAX_TOKENS) for c in rest)
                ).strip()
        form.parsed = False
    form.text = text if limit is None else _cut_text(text, limit)
    return form


def units(form: Form) -> dict[str, Counter]:
    """Each function of a library module with every function of the module it calls, directly
    or not (pasted with them, or with them inlined), as one multiset of forms; and the whole
    module as ``MODULE``."""
    by_name = {b.name: b for b in form.blocks}
    out = {}
    for block in form.blocks:
        seen, todo, forms = {block.name}, list(block.calls), Counter(block.forms)
        while todo:
            name = todo.pop()
            if name in by_name and name not in seen:
                seen.add(name)
                forms.update(by_name[name].forms)
                todo.extend(by_name[name].calls)
        out[block.name] = forms
    out[MODULE] = sum((b.forms for b in form.blocks), Counter())
    return out


# ------------------------------------------------------------------------------------ parsing
def _parse(code: str) -> tuple[ast.Module, list[str]]:
    """The module, and the chunks of ``code`` that do not parse (compared as tokens)."""
    try:
        return ast.parse(code), []
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        pass
    module, rest = ast.Module(body=[], type_ignores=[]), []
    for chunk in _chunks(code):
        try:
            module.body += ast.parse(chunk).body
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            rest.append(chunk)
    return module, rest


def _chunks(code: str) -> list[str]:
    """``code`` cut before each line that starts at column 0 and does not continue a statement:
    one syntax error then costs only its own top-level statement."""
    chunks: list[list[str]] = [[]]
    for line in code.splitlines():
        starts = line[:1] not in ("", " ", "\t", ")", "]", "}", "#") and not re.match(
            r"(else|elif|except|finally|case)\b", line)
        if starts and chunks[-1] and not chunks[-1][-1].rstrip().endswith(("\\", ",", "(")) \
                and not chunks[-1][-1].lstrip().startswith("@"):
            chunks.append([])
        chunks[-1].append(line)
    return ["\n".join(c) for c in chunks if any(x.strip() for x in c)]


def _token_text(code: str, limit: int) -> str:
    """Token-level normalisation of code that does not parse: comments, layout and lone
    strings (docstrings) dropped, ``x op= y`` written out; its first ``limit`` tokens."""
    lines, line, count = [], [], 0
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    done = 0  # lines the tokenizer read before it gave up (an unclosed bracket or string)
    with contextlib.suppress(Exception):  # tokenize gives up: the rest is split by a regex
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            done = t.end[0]
            if t.type == tokenize.NEWLINE:
                lines.append(line)
                line = []
            elif t.type not in skip:
                line.append(t.string)
                count += 1
                if count >= limit:
                    break
    lines.append(line)
    for rest in code.splitlines()[done:]:
        if count >= limit:
            break
        lines.append(_TOKEN.findall(re.sub(r"#.*", "", rest)))
        count += len(lines[-1])
    out = []
    for words in lines:
        if len(words) == 1 and words[0][-1:] in "'\"":
            continue  # a string alone: a docstring, or nothing
        if len(words) > 2 and words[1].endswith("=") and words[1][:-1] in _AUG:
            words = [words[0], "=", words[0], words[1][:-1], "(", *words[2:], ")"]
        if words:
            out.append(" ".join(words))
    return "\n".join(out)


_AUG = {"+", "-", "*", "/", "//", "%", "**", "@", "&", "|", "^", ">>", "<<"}


def _unparse(stmt: ast.stmt) -> str:
    try:
        return ast.unparse(stmt)
    except ValueError:  # what this Python cannot print (an f-string part): its forms still count
        return ""


def _cut_text(text: str, limit: int) -> str:
    ends = [m.end() for _, m in zip(range(limit + 1), _TOKEN.finditer(text))]
    return text[:ends[limit - 1]] if len(ends) > limit else text


def _cut(body: list[ast.stmt], limit: int) -> list[ast.stmt]:
    """The statements of ``body`` up to ``limit`` tokens (nodes), the last one cut inside."""
    out, left = [], limit
    for stmt in body:
        size = _size(stmt)
        if size <= left:
            out.append(stmt)
            left -= size
            continue
        for name in ("body", "orelse", "finalbody"):
            if isinstance(getattr(stmt, name, None), list) and getattr(stmt, name):
                # half of what is left: room for the header and the other bodies
                setattr(stmt, name, _cut(getattr(stmt, name), left // 2) or [ast.Pass()])
        if _size(stmt) <= left:
            out.append(stmt)
        break
    return out


def _size(node: ast.AST) -> int:
    """Syntax nodes of ``node``: about as many as its tokens."""
    return sum(1 for n in ast.walk(node) if not isinstance(n, ast.expr_context))


# ------------------------------------------------------------------------------ normalising
def _imports(tree: ast.AST) -> dict[str, str]:
    """Name -> full dotted name of what it was imported as (``np`` -> ``numpy``). A relative
    import is a package's own code (the library's own functions, which a paste defines itself): its
    names are the code's own."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                found[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                    a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for a in node.names:
                if a.name != "*":
                    found[a.asname or a.name] = f"{node.module}.{a.name}"
    return found


def _normalise(tree: ast.Module, imports: dict[str, str]) -> tuple[ast.Module, set[str]]:
    """``tree`` simplified, and the full names of what it reads from imports (``imports``:
    those of the code around it)."""
    imports = {**imports, **_imports(tree)}
    bound = _bound(tree)
    imports = {k: v for k, v in imports.items() if k not in bound}
    tree = _Rewrite(imports).visit(tree)
    for _ in range(3):  # one pass can enable another (a dead store read only by a dead store)
        if not _bodies(tree):
            break
    return ast.fix_missing_locations(tree), set(imports.values())


def _bound(tree: ast.AST) -> set[str]:
    """Every name the code binds itself (assigned, a parameter, a def, a loop target)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


class _Rewrite(ast.NodeTransformer):
    """Imports dropped (their names resolved), ``x op= y`` as ``x = x op y``, annotations
    dropped, generator expressions as list comprehensions. (Docstrings go with the other
    statements that do nothing, in ``_bodies``.)"""

    def __init__(self, imports: dict[str, str]):
        self.imports = imports

    def visit_Import(self, node):
        return None

    visit_ImportFrom = visit_Import

    def visit_Name(self, node):
        if node.id in self.imports and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Name(self.imports[node.id], ast.Load()), node)
        return node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        target = copy.deepcopy(node.target)
        for n in ast.walk(target):
            if hasattr(n, "ctx"):
                n.ctx = ast.Load()
        return ast.copy_location(ast.Assign([node.target], ast.BinOp(target, node.op,
                                                                     node.value)), node)

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        if node.value is None:
            return None  # a declaration: nothing runs
        return ast.copy_location(ast.Assign([node.target], node.value), node)

    def visit_GeneratorExp(self, node):
        self.generic_visit(node)
        return ast.copy_location(ast.ListComp(node.elt, node.generators), node)

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "list" and len(node.args) == 1 \
                and not node.keywords and isinstance(node.args[0], ast.ListComp):
            return node.args[0]
        return node


def _bodies(tree: ast.AST) -> bool:
    """Every statement list of ``tree`` simplified: statements that do nothing dropped, loops
    that only build a list, set or dict written as comprehensions, and a name assigned once and
    read once, by the very next statement, replaced by its value. True if anything changed."""
    changed = False
    for lists, reads, writes, kept in _scopes(tree):
        for node, name in lists:
            body = getattr(node, name)
            new = _simplified(body, reads, writes, kept)
            if not new and not isinstance(node, ast.Module) and (
                    name == "body" or name == "finalbody" and not node.handlers):
                # a body may not be empty (an import dropped, or all of it did nothing)
                new = body if len(body) == 1 and isinstance(body[0], ast.Pass) else [ast.Pass()]
            if len(new) != len(body) or any(x is not y for x, y in zip(new, body)):
                setattr(node, name, new)
                changed = True
    return changed


def _scopes(tree: ast.AST) -> list:
    """(statement lists as (node, field), reads, writes, names declared global or nonlocal)
    of the module and of every function in it, in one walk. A scope's reads and
    writes include those of the functions inside it (a closure reads its parent's names)."""
    out = []

    def visit(scope):
        reads, writes, kept, lists = Counter(), Counter(), set(), []
        todo = [scope]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.Name):
                (reads if isinstance(node.ctx, ast.Load) else writes)[node.id] += 1
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                kept.update(node.names)
            for name in ("body", "orelse", "finalbody"):
                body = getattr(node, name, None)
                if isinstance(body, list) and (not body or isinstance(body[0], ast.stmt)):
                    lists.append((node, name))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inner = visit(child)
                    reads.update(inner[1])
                    writes.update(inner[2])
                else:
                    todo.append(child)
        found = (lists, reads, writes, kept)
        out.append(found)
        return found

    visit(tree)
    return out


def _simplified(body, reads, writes, kept) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in body:
        if _no_effect(stmt, reads, kept):
            continue
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Constant):
            out += stmt.body if stmt.test.value else stmt.orelse
            continue
        comp = _as_comprehension(out[-1], stmt) if out else None
        if comp is not None:
            out[-1] = comp
            continue
        if out and _inline(out[-1], stmt, reads, writes, kept):
            out[-1] = stmt
            continue
        out.append(stmt)
    return [s for s in out if not isinstance(s, ast.Pass)]


def _pure(expr: ast.AST) -> bool:
    """Evaluating ``expr`` has no effect worth keeping (no call but to a pure builtin)."""
    for node in ast.walk(expr):
        if isinstance(node, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)):
            return False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id in _PURE_CALLS):
            return False
    return True


def _no_effect(stmt: ast.stmt, reads: Counter, kept: set) -> bool:
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr):
        return _pure(stmt.value)
    if isinstance(stmt, ast.Assign) and _pure(stmt.value):
        names = [t for t in stmt.targets if isinstance(t, ast.Name)]
        if len(names) == len(stmt.targets):
            if all(reads[t.id] == 0 and t.id not in kept for t in names):
                return True  # stored and never read
            if isinstance(stmt.value, ast.Name) and all(t.id == stmt.value.id for t in names):
                return True  # x = x
    return False


def _as_comprehension(init: ast.stmt, loop: ast.stmt) -> ast.stmt | None:
    """``v = []`` then ``for t in it: [if c:] v.append(e)`` as ``v = [e for t in it if c]``
    (nested loops too; sets with ``add``, dicts with ``v[k] = e``)."""
    if not (isinstance(init, ast.Assign) and len(init.targets) == 1
            and isinstance(init.targets[0], ast.Name) and isinstance(loop, ast.For)):
        return None
    name, value = init.targets[0].id, init.value
    kind = ("list" if isinstance(value, ast.List) and not value.elts else
            "dict" if isinstance(value, ast.Dict) and not value.keys else
            next((f for f in ("list", "set", "dict") if isinstance(value, ast.Call)
                  and isinstance(value.func, ast.Name) and value.func.id == f
                  and not value.args and not value.keywords), None))
    generators, stmt = [], loop
    while True:
        if isinstance(stmt, ast.For) and not stmt.orelse and len(stmt.body) == 1:
            generators.append(ast.comprehension(stmt.target, stmt.iter, [], 0))
            stmt = stmt.body[0]
        elif isinstance(stmt, ast.If) and generators and not stmt.orelse \
                and len(stmt.body) == 1:
            generators[-1].ifs.append(stmt.test)
            stmt = stmt.body[0]
        else:
            break
    if not generators or any(name in {n.id for n in ast.walk(g) if isinstance(n, ast.Name)}
                             for g in generators):
        return None
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if kind in ("list", "set") and isinstance(call, ast.Call) and len(call.args) == 1 \
            and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) \
            and call.func.value.id == name \
            and call.func.attr == ("append" if kind == "list" else "add"):
        comp = (ast.ListComp if kind == "list" else ast.SetComp)(call.args[0], generators)
    elif kind == "dict" and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Subscript) \
            and isinstance(stmt.targets[0].value, ast.Name) and stmt.targets[0].value.id == name:
        comp = ast.DictComp(stmt.targets[0].slice, stmt.value, generators)
    else:
        return None
    return ast.copy_location(ast.Assign([init.targets[0]], comp), init)


def _inline(assign: ast.stmt, stmt: ast.stmt, reads: Counter, writes: Counter, kept) -> bool:
    """Replace the one read of a name assigned once, in the statement right after, by its
    value (so ``t = [..]; return t`` is ``return [..]``). True when done (``stmt`` changed)."""
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1
            and isinstance(assign.targets[0], ast.Name)) or isinstance(
            stmt, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    name = assign.targets[0].id
    if reads[name] != 1 or writes[name] != 1 or name in kept:
        return False
    header = [v for f, v in ast.iter_fields(stmt) if f not in _COMPOUND]
    nodes = [n for v in header for x in (v if isinstance(v, list) else [v])
             if isinstance(x, ast.AST) for n in ast.walk(x)]
    uses = [n for n in nodes if isinstance(n, ast.Name) and n.id == name]
    inside = {id(n) for x in nodes if isinstance(x, (ast.Lambda, ast.ListComp, ast.SetComp,
                                                     ast.DictComp, ast.JoinedStr))
              for n in ast.walk(x)}
    if len(uses) != 1 or not isinstance(uses[0].ctx, ast.Load) or id(uses[0]) in inside:
        return False  # read elsewhere, or inside a function, loop or f-string of the statement
    for parent in nodes:
        for field_name, value in ast.iter_fields(parent):
            if value is uses[0]:
                setattr(parent, field_name, assign.value)
            elif isinstance(value, list) and any(v is uses[0] for v in value):
                value[:] = [assign.value if v is uses[0] else v for v in value]
    reads[name] = 0
    return True


def _without(body: list[ast.stmt], context: Context, local: set) -> list[ast.stmt]:
    """``body`` without the statements the release gives, at any depth: a given statement in a
    function the student wrote goes, the function stays."""
    if not context.statements:
        return body
    out = []
    for stmt in body:
        if ast.dump(stmt) in context.statements or _simple(stmt) and _key(
                stmt, local) in context.forms:
            continue
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, name, _without(inner, context, local) or [ast.Pass()])
        out.append(stmt)
    return out


def _simple(stmt: ast.stmt) -> bool:
    return not any(hasattr(stmt, name) for name in ("body", "handlers", "cases"))


# ------------------------------------------------------------------------------ statements
_COMPOUND = {"body": [], "orelse": [], "finalbody": [], "handlers": [], "cases": []}


def _local(tree: ast.AST, imported: set[str]) -> set[str]:
    """The names of ``tree`` a student can choose: all but builtins and what it imports."""
    return _bound(tree) | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                           and n.id not in BUILTINS and n.id not in imported}


def _forms(tree: ast.Module, local: set[str]) -> Form:
    """The statement forms of each block of ``tree`` (``local``: the names numbered)."""
    form = Form("", [], {})
    module = Block(MODULE)
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            methods = [s for s in stmt.body if isinstance(s, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))]
            for m in methods:
                form.blocks.append(_block(m, local, form, cls=stmt.name))
            for s in stmt.body:
                if s not in methods:
                    _add(s, module, local, form)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            form.blocks.append(_block(stmt, local, form))
        else:
            _add(stmt, module, local, form)
    if module.forms:
        form.blocks.append(module)
    return form


def _block(fn, local, form: Form, cls: str = "") -> Block:
    """A function's forms; a method's name (and those it calls on ``self``) with its class's."""
    block = Block(f"{cls}.{fn.name}" if cls else fn.name)
    for stmt in fn.body:
        _add(stmt, block, local, form)
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                block.calls.add(node.func.id)
            elif cls and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in (
                        "self", "cls"):
                block.calls.add(f"{cls}.{node.func.attr}")
    return block


def _add(stmt: ast.stmt, block: Block, local: set, form: Form) -> None:
    """``stmt``'s form (a compound statement's header alone) and those of the statements in it.
    A ``def`` or ``class`` header is the release's signature or a name: no form of its own."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        for s in stmt.body:
            _add(s, block, local, form)
        return
    if isinstance(stmt, ast.Pass):
        return  # what an empty body holds
    if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
        header = None
    else:
        header = copy.copy(stmt)
        for name, empty in _COMPOUND.items():
            if hasattr(header, name):
                setattr(header, name, empty)
    if header is not None:
        _record(header, block, local, form)
    for name in ("body", "orelse", "finalbody"):
        for s in getattr(stmt, name, None) or []:
            _add(s, block, local, form)
    for handler in getattr(stmt, "handlers", None) or []:
        _record(ast.ExceptHandler(handler.type, handler.name, []), block, local, form)
        for s in handler.body:
            _add(s, block, local, form)
    for case in getattr(stmt, "cases", None) or []:
        for s in case.body:
            _add(s, block, local, form)


def _record(node: ast.AST, block: Block, local: set, form: Form) -> None:
    """Count ``node``'s form in ``block``."""
    key = _key(node, local)
    if key not in form.weight:
        form.weight[key] = len(_TOKEN.findall(key))
    block.forms[key] += 1


def _key(node: ast.AST, local: set) -> str:
    """``node``'s form: its text with the names a student can choose (``local``) numbered v0,
    v1, ... by their first occurrence (renamed in place, then restored)."""
    numbered: dict[str, str] = {}
    renamed = []
    for n in ast.walk(node):
        attr = ("id" if isinstance(n, ast.Name) and n.id in local else
                "arg" if isinstance(n, ast.arg) else
                "name" if isinstance(n, ast.ExceptHandler) and n.name else None)
        if attr:
            old = getattr(n, attr)
            renamed.append((n, attr, old))
            setattr(n, attr, numbered.setdefault(old, f"v{len(numbered)}"))
    try:
        return _dump(node)
    finally:
        for n, attr, old in renamed:
            setattr(n, attr, old)


def _dump(node: ast.AST) -> str:
    """A statement header's text: ``ast.unparse`` of what is left of it."""
    if isinstance(node, ast.ExceptHandler):
        node = ast.Try([ast.Pass()], [node], [], [])
        return "except" + ast.unparse(node).split("except", 1)[1].split(":", 1)[0]
    try:
        return ast.unparse(node).split("\n", 1)[0]
    except Exception:  # a header ast.unparse cannot print alone: its structure
        return ast.dump(node, annotate_fields=False)
