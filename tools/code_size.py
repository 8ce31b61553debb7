r"""How big the code is: the longest functions and files of a package.

    python tools/code_size.py [ROOT ...] [--top 15]

Prints the ``--top`` longest functions (methods and nested functions
included) with ``file:line`` and their length in lines, the ``--top``
longest ``.py`` files, and the number of functions with their mean length.
ROOT defaults to ``alf``. Standard library only, so that anyone can rerun
it on any checkout (before and after a change) without installing alf.

A function's length runs from its ``def`` line to its last line, docstring
and comments included: that is what a reader has to get through.
"""
import argparse
import ast
import os
import sys
from typing import Iterator, List, NamedTuple


class Function(NamedTuple):
    """One function or method: where it is, its dotted name and length."""
    path: str
    line: int
    name: str
    length: int


def python_files(root: str) -> Iterator[str]:
    """The ``.py`` files under ``root`` (or ``root`` itself), sorted."""
    if os.path.isfile(root):
        yield root
        return
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith(".")
                               and d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(folder, name)


def functions(path: str, tree: ast.AST) -> List[Function]:
    """Every function defined in ``tree``, named ``Class.method`` or
    ``outer.inner`` so that a reader can find it."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found.append(Function(path, child.lineno, name,
                                      child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def main(argv=None) -> int:
    """Parses the command line and prints the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=["alf"])
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)

    funcs, sizes = [], []
    for root in args.roots:
        for path in python_files(root):
            with open(path, encoding="utf-8") as f:
                source = f.read()
            sizes.append((len(source.splitlines()), path))
            funcs += functions(path, ast.parse(source, filename=path))
    if not sizes:
        print(f"no .py files under {' '.join(args.roots)}", file=sys.stderr)
        return 1

    print(f"Longest functions (top {args.top}):")
    for fn in sorted(funcs, key=lambda f: (-f.length, f.path, f.line)
                     )[:args.top]:
        print(f"  {fn.length:5d}  {fn.path}:{fn.line}  {fn.name}")
    print(f"\nLongest files (top {args.top}):")
    for lines, path in sorted(sizes, key=lambda s: (-s[0], s[1]))[:args.top]:
        print(f"  {lines:5d}  {path}")
    total = sum(f.length for f in funcs)
    mean = total / len(funcs) if funcs else 0.0
    print(f"\n{len(funcs)} functions in {len(sizes)} files, "
          f"{sum(s[0] for s in sizes)} lines; "
          f"mean function length {mean:.1f} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
