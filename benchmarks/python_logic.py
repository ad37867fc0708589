"""How much logic the Python package holds: lines of functions that do more than check their
arguments and forward (the bindings should translate, not decide).

A function *forwards* when every statement of its body is a docstring, an import, a return, a
call, an assignment, or an ``if`` whose branches only raise or assign (argument checks and
defaults); a loop, a ``try``, a ``with``, a nested function or an ``if`` that does anything else
makes it *logic*. Its lines are its code lines (docstring, comments and blank lines left out).
Nested functions count with the function they are in.

    python benchmarks/python_logic.py                 # this tree
    python benchmarks/python_logic.py --rev e5dd408   # another commit (git show)
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "python/sluice"


def _code_lines(source: str) -> set[int]:
    """Line numbers holding code (not comments, blank lines or docstrings)."""
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                        tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            lines.difference_update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def _only_checks(stmts: list[ast.stmt]) -> bool:
    return all(isinstance(s, (ast.Raise, ast.Assign, ast.AnnAssign, ast.Pass)) or
               (isinstance(s, ast.If) and _only_checks(s.body) and _only_checks(s.orelse))
               for s in stmts)


def _forwards(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for s in fn.body:
        if isinstance(s, (ast.Expr, ast.Return, ast.Assign, ast.AnnAssign, ast.AugAssign,
                          ast.Import, ast.ImportFrom, ast.Pass, ast.Raise)):
            continue
        if isinstance(s, ast.If) and _only_checks(s.body) and _only_checks(s.orelse):
            continue
        return False
    return True


def count(files: dict[str, str]) -> dict[str, int]:
    """Logic lines per file."""
    out: dict[str, int] = {}
    for name, source in files.items():
        code = _code_lines(source)
        tree = ast.parse(source)
        total = 0
        # Only outermost functions (methods included): nested ones count with their parent.
        stack: list[ast.AST] = [tree]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if not _forwards(child):
                        total += len([n for n in code if child.lineno <= n <= child.end_lineno])
                elif isinstance(child, ast.ClassDef):
                    stack.append(child)
        out[name] = total
    return out


def files_at(rev: str | None) -> dict[str, str]:
    if rev is None:
        return {p.name: p.read_text() for p in sorted((ROOT / PACKAGE).glob("*.py"))}
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{PACKAGE}"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    return {n: subprocess.run(["git", "show", f"{rev}:{PACKAGE}/{n}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
            for n in names if n.endswith(".py")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", help="a commit to count instead of the working tree")
    ap.add_argument("--base", help="also count this commit and print the change")
    a = ap.parse_args()
    now = count(files_at(a.rev))
    if a.base:
        base = count(files_at(a.base))
        for name in sorted(set(base) | set(now)):
            b, n = base.get(name, 0), now.get(name, 0)
            if b or n:
                print(f"{name:24} {b:5} -> {n:5}")
        tb, tn = sum(base.values()), sum(now.values())
        print(f"{'total':24} {tb:5} -> {tn:5} ({(tn - tb) / tb:+.0%})")
    else:
        for name, n in sorted(now.items()):
            if n:
                print(f"{name:24} {n:5}")
        print(f"{'total':24} {sum(now.values()):5}")


if __name__ == "__main__":
    main()
