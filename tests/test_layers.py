"""The autograder's structure, read from its imports: the program that runs inside the sandbox
is never imported by the grader; the wings are layers whose arrows point one way."""

import ast
from pathlib import Path

AUTOGRADER = Path(__file__).resolve().parents[1] / "autograder"


def imports(path: Path) -> set[str]:
    """The modules ``path`` imports, absolute (``autograder.x.y``) where they are ours."""
    package = ".".join(path.relative_to(AUTOGRADER.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                found.add(module)
                found.update(f"{module}.{a.name}" for a in node.names)
            elif node.module:
                found.add(node.module)
    return found


def modules(folder: str) -> list[Path]:
    return sorted((AUTOGRADER / folder).rglob("*.py")) if folder else \
        sorted(AUTOGRADER.glob("*.py"))


PROGRAMS = {"runner", "rules", "template"}  # run in the sandbox, as plain modules


def test_no_grader_module_imports_the_programs_that_run_in_the_sandbox():
    """The student's program (inside/) and the template that becomes it run in the sandbox;
    the grader starts them and never imports them, whatever the name."""
    assert {p.stem for p in (AUTOGRADER / "isolation" / "inside").glob("*.py")} == \
        {"runner", "rules"}
    for path in AUTOGRADER.rglob("*.py"):
        if path.stem in PROGRAMS:
            continue
        found = imports(path)
        assert not any(m.startswith(("autograder.isolation.inside",
                                     "autograder.isolation.privileged.template"))
                       for m in found), path
        assert not found & PROGRAMS, path  # nor as the plain modules a sandbox imports


def test_the_sandboxs_programs_import_only_each_other_and_the_standard_library():
    import sys

    peers = {"protocol", "rules", "runner", "guard", "become", "ending",
             "IPython", "torch"}  # the shell that runs cells; torch, to switch its attention off
    for path in [*(AUTOGRADER / "isolation" / "inside").glob("*.py"),
                 AUTOGRADER / "isolation" / "privileged" / "template.py"]:
        for module in imports(path):
            top = module.split(".")[0]
            assert top in peers or top in sys.stdlib_module_names, (path, module)


def test_the_wings_are_layers():
    """authoring above scoring above intake and isolation; intake and isolation import no
    other wing; nothing imports authoring but the command line."""
    rules = {"intake": {"scoring", "authoring", "isolation"},
             "isolation": {"scoring", "authoring", "intake"},
             "scoring": {"authoring"}}
    for wing, forbidden in rules.items():
        for path in modules(wing):
            for module in imports(path):
                parts = module.split(".")
                if parts[0] == "autograder" and len(parts) > 1:
                    assert parts[1] not in forbidden, f"{path} imports {module}"
