"""The house's floors (docs/ARCHITECTURE.md, "The packages"): each layer imports only the
layers below it, by ``import`` statement or by a module name in a string.

    registry  <-  photon (the domain)  <-  spark_apps, plugins  <-  dags
                                       <-  photon.tooling (cli, local stack, chaos, bench,
                                           gen, observe), which may start spark_apps

A module name in a string counts: ``python -m spark_apps.joiner`` in the domain
would be an upward dependency that no import statement shows. Docstrings do not
count (prose may name what uses a module).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

TOOLING = "photon.tooling"
SHELLS = ("spark_apps", "plugins", "dags")

#: Each layer, by module prefix, and the prefixes it may never name.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "registry": ("photon", TOOLING, *SHELLS),
    "photon": (TOOLING, *SHELLS),  # the domain: photon minus photon.tooling
    "spark_apps": (TOOLING, "plugins", "dags"),
    "plugins": (TOOLING, "dags"),
    "dags": (TOOLING,),
}

_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(/[A-Za-z_][\w.]*)*")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the constant nodes that are docstrings."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def named_modules(source: str) -> Iterator[str]:
    """Every module ``source`` imports, and every string in it that names a module (dotted,
    or as a path ``spark_apps/joiner.py``), docstrings apart."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            text = node.value.strip()
            if _MODULE_NAME.fullmatch(text):
                yield text
            elif "/" in text and _MODULE_PATH.fullmatch(text):
                yield text.removesuffix(".py").replace("/", ".")


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(module: str) -> str | None:
    if _within(module, TOOLING):
        return None  # the top floor: it may name any layer
    return next((layer for layer in FORBIDDEN if _within(module, layer)), None)


def violations(module: str, source: str) -> list[str]:
    """The names ``module`` may not use, given its layer."""
    layer = layer_of(module)
    if layer is None:
        return []
    return sorted(
        {
            name
            for name in named_modules(source)
            if any(_within(name, banned) for banned in FORBIDDEN[layer])
        }
    )


def _modules() -> Iterator[tuple[str, Path]]:
    for top in FORBIDDEN:
        for path in sorted((REPO / top).rglob("*.py")):
            yield ".".join(path.relative_to(REPO).with_suffix("").parts), path


def test_no_layer_names_a_layer_above_it() -> None:
    found = {
        module: names
        for module, path in _modules()
        if (names := violations(module, path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_layers_are_all_there() -> None:
    modules = {module for module, _ in _modules()}
    for must in (
        "registry.client",
        "photon.join.dispatcher",
        "photon.tooling.cli.main",
        "spark_apps.contracts",
        "plugins.hooks.registry",
    ):
        assert must in modules


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("photon.join.x", "from photon.tooling.gen import model\n", ["photon.tooling.gen"]),
        ("photon.join.x", "import spark_apps.joiner as j\n", ["spark_apps.joiner"]),
        ("photon.join.x", "ARGV = ['-m', 'spark_apps.joiner']\n", ["spark_apps.joiner"]),
        ("photon.ops.x", "PATH = 'spark_apps/joiner.py'\n", ["spark_apps.joiner"]),
        ("photon.ops.x", "from photon.join import output\n", []),
        ("photon.ops.x", '"""Run by spark_apps.joiner."""\n', []),
        ("registry.x", "from photon.settings import S\n", ["photon.settings"]),
        ("spark_apps.x", "from photon.tooling.runs import namespace\n", ["photon.tooling.runs"]),
        ("spark_apps.x", "from photon.join import output\n", []),
        ("photon.tooling.cli.x", "from spark_apps.contracts import APP_MODULES\n", []),
        ("dags.x", "from plugins.operators import photon\n", []),
        ("photon.ops.x", "KEY = 'joined'\n", []),
    ],
)
def test_the_check_sees_imports_and_module_names_in_strings(
    module: str, source: str, expected: list[str]
) -> None:
    assert violations(module, source) == expected
