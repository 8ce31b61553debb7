"""Imports point down the layers.

Every module under ``alf/`` is parsed (not imported) and each of its imports
of ``alf`` (absolute or relative, at module level or inside a function) is
checked against the table below: a layer may import itself and the layers
its row names, nothing else.
"""
import ast
import pathlib
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

ALF = pathlib.Path(__file__).resolve().parents[1] / "alf"

# The layer of each name directly under alf/. The root package (alf's
# public names), nest, data_structures and config are the foundations.
LAYER_OF = {
    "utils": "utils",
    "alf": "foundations",
    "nest": "foundations",
    "data_structures": "foundations",
    "config": "foundations",
    "networks": "networks",
    "replay_buffers": "replay_buffers",
    "environments": "environments",
    "algorithms": "algorithms",
    "trainers": "trainers",
    "bin": "bin",
    "examples": "examples",
}

# Bottom first. utils imports nothing else of alf; networks and replay
# buffers never see environments, environments never see algorithms, and
# algorithms never see trainers; nothing but bin imports bin, and nothing
# imports the examples.
#
# layer            may import (besides itself)
ALLOWED = {
    "utils":          (),
    "foundations":    ("utils", ),
    "networks":       ("utils", "foundations", "replay_buffers"),
    "replay_buffers": ("utils", "foundations", "networks"),
    "environments":   ("utils", "foundations", "networks", "replay_buffers"),
    "algorithms":     ("utils", "foundations", "networks", "replay_buffers",
                       "environments"),
    "trainers":       ("utils", "foundations", "networks", "replay_buffers",
                       "environments", "algorithms"),
    "bin":            ("utils", "foundations", "networks", "replay_buffers",
                       "environments", "algorithms", "trainers"),
    "examples":       ("utils", "foundations", "networks", "replay_buffers",
                       "environments", "algorithms", "trainers"),
}  # yapf: disable

# Imports that break the table, each with why it is not fixed yet. An
# entry that no longer occurs fails `test_known_exceptions_still_occur`, so
# this list can only shrink; it is empty, and a new entry needs a reason.
KNOWN_EXCEPTIONS: Dict[Tuple[str, str], str] = {}


class Import(NamedTuple):
    module: str  # the importing module, e.g. alf.utils.distributed.group
    imported: str  # the imported module (or package), e.g. alf.trainers
    line: int


def alf_sources(root: pathlib.Path = ALF) -> Dict[str, Tuple[str, bool]]:
    """Every module under ``root``: dotted name -> (source, is a package)."""
    sources = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        sources[".".join(parts)] = (path.read_text(), is_package)
    return sources


def imports(module: str, source: str, is_package: bool,
            known_modules) -> Iterator[Import]:
    """The ``alf`` modules that ``module``'s source imports, anywhere in it.

    ``from P import n`` imports the module ``P.n`` when there is one (``from
    alf.utils import distributed``), else ``P`` (``from alf.nest import
    map_structure``).
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            if node.level:  # 1: this package, 2: its parent, ...
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}"
                       if f"{base}.{alias.name}" in known_modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            if target == "alf" or target.startswith("alf."):
                yield Import(module, target, node.lineno)


def layer(module: str) -> Optional[str]:
    """The layer of a dotted module name (None if the table lacks it)."""
    parts = module.split(".")
    return LAYER_OF.get(parts[1] if len(parts) > 1 else "alf")


def violations(sources: Dict[str, Tuple[str, bool]],
               known=KNOWN_EXCEPTIONS) -> List[str]:
    """One line per import that the table forbids (or cannot place)."""
    found = []
    for module, (source, is_package) in sorted(sources.items()):
        if layer(module) is None:
            found.append(f"{module}: in no layer; add "
                         f"{module.split('.')[1]!r} to LAYER_OF")
            continue
        for imp in imports(module, source, is_package, sources):
            src, dst = layer(imp.module), layer(imp.imported)
            if dst is None:
                found.append(f"{module}:{imp.line} imports {imp.imported}, "
                             "which is in no layer")
            elif (dst != src and dst not in ALLOWED[src]
                  and (imp.module, imp.imported) not in known):
                found.append(f"{module}:{imp.line} imports {imp.imported}: "
                             f"{src} may not import {dst} (may import: "
                             f"{', '.join(ALLOWED[src]) or 'nothing'})")
    return found


def test_imports_follow_the_layers():
    found = violations(alf_sources())
    assert not found, (f"{len(found)} import(s) against the layering table "
                       "in tests/test_layering.py:\n" + "\n".join(found))


def test_known_exceptions_still_occur():
    sources = alf_sources()
    occurring = {(i.module, i.imported)
                 for module, (source, is_package) in sources.items()
                 for i in imports(module, source, is_package, sources)}
    stale = sorted(set(KNOWN_EXCEPTIONS) - occurring)
    assert not stale, f"fixed, remove from KNOWN_EXCEPTIONS: {stale}"


def test_the_table_names_only_its_layers():
    assert set(LAYER_OF.values()) == set(ALLOWED)
    assert {d for row in ALLOWED.values() for d in row} <= set(ALLOWED)


def test_a_violation_is_reported():
    """The checker is not vacuous: planted imports against the table, in
    every form it must see, are each reported in the one message."""
    sources = alf_sources()
    before = set(violations(sources))
    sources.update({
        "alf.utils.fake_absolute": ("import alf.trainers\n", False),
        "alf.utils.fake_package": ("from alf import bin\n", True),
        "alf.environments.fake_relative": (
            "def f():\n    from ..algorithms import ppo_algorithm\n", False),
        "alf.networks.fake_from": (
            "from alf.environments.suite_gym import make\n", False),
        "alf.nowhere": ("", False),
    })
    found = [line for line in violations(sources) if line not in before]
    assert found == [
        "alf.environments.fake_relative:2 imports "
        "alf.algorithms.ppo_algorithm: environments may not import "
        "algorithms (may import: utils, foundations, networks, "
        "replay_buffers)",
        "alf.networks.fake_from:1 imports alf.environments.suite_gym: "
        "networks may not import environments (may import: utils, "
        "foundations, replay_buffers)",
        "alf.nowhere: in no layer; add 'nowhere' to LAYER_OF",
        "alf.utils.fake_absolute:1 imports alf.trainers: utils may not "
        "import trainers (may import: nothing)",
        "alf.utils.fake_package:1 imports alf.bin: utils may not import bin "
        "(may import: nothing)",
    ]
    # A listed exception silences that import alone.
    known = {("alf.utils.fake_absolute", "alf.trainers"): "a reason"}
    silenced = set(violations(sources)) - set(violations(sources, known))
    assert silenced == {"alf.utils.fake_absolute:1 imports alf.trainers: "
                        "utils may not import trainers (may import: "
                        "nothing)"}


def test_relative_imports_resolve_against_the_package():
    known = {"alf.utils.distributed.group", "alf.utils.errors"}
    got = [i.imported for i in imports(
        "alf.utils.distributed.decorators",
        "from . import group\nfrom .. import errors\nfrom ..errors import X\n"
        "from . import nothing_here\n", False, known)]
    assert got == ["alf.utils.distributed.group", "alf.utils.errors",
                   "alf.utils.errors", "alf.utils.distributed"]
    got = [i.imported for i in imports(
        "alf.utils.distributed", "from .group import x\n", True, known)]
    assert got == ["alf.utils.distributed.group"]
