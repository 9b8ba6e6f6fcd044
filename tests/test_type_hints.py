"""Every public function and method of core/ and streamer/ has type hints (issue 15).

mypy (``make lint``) checks the hints that exist; this checks that they exist where a reader
of the public API looks for them: every parameter but ``self``/``cls``, and the return type
(``__init__`` excepted). Private names (a leading underscore) and nested functions are not
public API and are left to judgement.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# modules of the packages' public API (__main__.py and other private modules are not)
FILES = sorted(
    p
    for package in ("core", "streamer")
    for p in (ROOT / package).rglob("*.py")
    if not p.name.startswith("_") or p.name == "__init__.py"
)


def _public(name):
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def missing_hints(tree):
    """``(line, name, what)`` of each public function of ``tree`` that lacks a hint."""
    out = []

    def visit(node, public):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, public and _public(child.name))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if public and _public(child.name):
                    a = child.args
                    params = a.posonlyargs + a.args + a.kwonlyargs + [p for p in (a.vararg, a.kwarg) if p]
                    bare = [p.arg for p in params if p.annotation is None and p.arg not in ("self", "cls")]
                    if bare:
                        out.append((child.lineno, child.name, f"parameters {', '.join(bare)}"))
                    if child.returns is None and child.name != "__init__":
                        out.append((child.lineno, child.name, "return type"))
                # functions nested in a function are not public API

    visit(tree, True)
    return out


def test_the_check_finds_what_is_missing():
    src = "def f(x, y: int): ...\nclass C:\n    def g(self) -> int: ...\n    def h(self, z) -> None: ...\n"
    expected = [(1, "f", "parameters x"), (1, "f", "return type"), (4, "h", "parameters z")]
    assert missing_hints(ast.parse(src)) == expected
    assert missing_hints(ast.parse("def _f(x): ...\nclass _C:\n    def g(self, y): ...\n")) == []


def test_public_functions_have_type_hints():
    assert len(FILES) > 40  # the packages were found
    missing = {str(p.relative_to(ROOT)): m for p in FILES if (m := missing_hints(ast.parse(p.read_text())))}
    assert missing == {}
