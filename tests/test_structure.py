"""The code's shape, checked: no import cycle among the package's modules, layers that only look down,
no function over 80 lines (src/, scripts/, benchmarks/), no module of the package over 450 lines."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO

SRC = REPO / "src"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 450


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """Every module of the package that `path` imports, at any depth: in functions, and under TYPE_CHECKING too (an
    import for annotations only is still an arrow: a circle drawn with one is a circle in the design)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    todo = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        todo.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            submodules = {f"{base}.{a.name}" for a in node.names} & modules  # `from . import x`: module x
            found.update(submodules)
            if len(submodules) < len(node.names):  # names defined in `base` itself
                found.add(base)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(SRC.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, modules) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_an_import_for_annotations_only_is_an_arrow(tmp_path, monkeypatch):
    """A circle drawn with a TYPE_CHECKING import (bilm.py <-> token_cache.py once) is found like any other."""
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    (tmp_path / "elmo").mkdir()
    (tmp_path / "elmo" / "cache.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                "    from .model import Encoder\n")
    (tmp_path / "elmo" / "model.py").write_text("from .cache import Cache\n")
    graph = import_graph()
    assert graph == {"elmo.cache": {"elmo.model"}, "elmo.model": {"elmo.cache"}}
    assert cycles(graph) == [["elmo.cache", "elmo.model"]]


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    assert "elmo.models" in graph and "elmo.formats.manylangs" in graph["elmo.models"]  # the walk sees imports
    assert cycles(graph) == []


# The folders, bottom up (docs/layout.md), and what each may import besides itself. A module directly under
# src/elmo is its own "folder" (errors, models, the drop-in faces tfhub and simple_elmo); "elmo" is the package
# face (src/elmo/__init__.py); elmo_char_ids is the torch-free character-id package beside elmo.
_FILES = {"errors", "files"}
_MODEL = _FILES | {"model", "elmo_char_ids"}
_FORMATS = _MODEL | {"formats"}
_HUB = _FORMATS | {"hub"}
_RESOLVER = _HUB | {"tf", "models"}
_EMBED = _RESOLVER | {"embed"}
MAY_IMPORT: dict[str, set[str]] = {
    "elmo_char_ids": set(),
    "errors": set(),
    "files": {"errors"},
    "model": _FILES | {"elmo_char_ids"},
    "formats": _MODEL,
    "hub": _FORMATS,
    "tf": _HUB,
    "models": _HUB | {"tf"},
    "embed": _RESOLVER,
    "allennlp": _EMBED,
    "elmo": _EMBED | {"allennlp"},
    "tfhub": _RESOLVER,
    "training": _EMBED,
    "simple_elmo": _EMBED | {"training"},
    "tasks": _EMBED,
    "lab": _EMBED | {"tasks", "training"},
    "serve": _EMBED | {"elmo", "lab"},
    "proteins": _EMBED | {"allennlp"},
    "integrations": _EMBED | {"allennlp", "proteins"},
    "cli": set(),  # filled below: the command line may import everything but `python -m elmo`
    "__main__": {"cli"},
}
MAY_IMPORT["cli"] = set(MAY_IMPORT) - {"cli", "__main__"}
ROOT_MODULES = {"__init__", "__main__", "errors", "models", "tfhub", "simple_elmo"}  # all else lives in a folder
NEW_FOLDERS = ("files", "model", "formats", "embed", "allennlp")  # their __init__ is a docstring and nothing else


def folder(module: str) -> str:
    """`elmo.model.bilm` -> "model", `elmo.models` -> "models", `elmo` -> "elmo", `elmo_char_ids` -> itself."""
    parts = module.split(".")
    return parts[0] if len(parts) == 1 else parts[1]


def folder_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports from one folder into another that its rule does not name (an arrow that looks up or sideways)."""
    found = []
    for module, imports in sorted(graph.items()):
        here = folder(module)
        for imported in sorted(imports):
            there = folder(imported)
            if there != here and there not in MAY_IMPORT.get(here, set()):
                found.append(f"{module} imports {imported}")
    return found


def test_the_folder_check_finds_an_import_that_looks_up():
    graph = {"elmo.formats.weights": {"elmo.hub.cache", "elmo.model.bilm"}, "elmo.hub.fetch": {"elmo.training.corpus"},
             "elmo.hub.x": {"elmo.models"}, "elmo.models": {"elmo.hub", "elmo.formats.weights"},
             "elmo.cli.hub": {"elmo.hub.cache"}, "elmo.tasks.x": {"elmo.hub"}, "elmo.embed.embedder": {"elmo.models"},
             "elmo.tf.bilm_import": {"elmo.training.vocab", "elmo.formats.lm_vocab"}, "elmo.files.fileio": {"elmo"},
             "elmo_char_ids": {"elmo.model.chars"}, "elmo.lab.app": {"elmo.serve.app"}}
    assert folder_violations(graph) == [
        "elmo.files.fileio imports elmo", "elmo.formats.weights imports elmo.hub.cache",
        "elmo.hub.fetch imports elmo.training.corpus", "elmo.hub.x imports elmo.models",
        "elmo.lab.app imports elmo.serve.app", "elmo.tf.bilm_import imports elmo.training.vocab",
        "elmo_char_ids imports elmo.model.chars"]


def test_every_folder_has_a_rule_and_the_rules_draw_no_circle():
    folders = {folder(m) for m in import_graph()}
    assert folders == set(MAY_IMPORT)
    assert cycles({f: {g for g in allowed if g != f} for f, allowed in MAY_IMPORT.items()}) == []


def test_imports_between_folders_follow_the_rules():
    assert folder_violations(import_graph()) == []


def test_only_the_face_errors_the_resolver_and_the_drop_in_faces_sit_at_the_root():
    root = {p.stem for p in (SRC / "elmo").glob("*.py")}
    assert root == ROOT_MODULES


def test_each_folder_says_what_it_is_for_and_what_it_may_import():
    """Every subpackage's docstring ends with "May import: ..." naming exactly its rule; the new folders' __init__
    holds that docstring and nothing else (importing elmo.model must not import the biLM)."""
    for init in sorted((SRC / "elmo").glob("*/__init__.py")):
        name = init.parent.name
        tree = ast.parse(init.read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        assert "May import:" in doc, f"{init.relative_to(REPO)}: no 'May import:' line in its docstring"
        said = doc.rpartition("May import:")[2].strip().rstrip(".")
        named = set() if said == "nothing of elmo" else {n.strip().removeprefix("elmo.") for n in said.split(",")}
        named = {"elmo" if n == "the package face" else n for n in named}
        assert named == MAY_IMPORT[name], f"{init.relative_to(REPO)} says {sorted(named)}, the rule is {sorted(MAY_IMPORT[name])}"
        if name in NEW_FOLDERS:
            assert len(tree.body) == 1, f"{init.relative_to(REPO)}: a docstring-only __init__ expected"


def test_import_elmo_loads_no_training_or_hub_downloads():
    code = ("import sys, elmo; print(sorted(m for m in sys.modules if m.startswith(('elmo.training', 'elmo.tasks', "
            "'elmo.lab', 'elmo.cli', 'elmo.hub.fetch', 'elmo.hub.download'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"



def long_functions(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - min([node.lineno] + [d.lineno for d in node.decorator_list]) + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_over_80_lines():
    assert long_functions(SRC) + long_functions(REPO / "scripts") + long_functions(REPO / "benchmarks") == []


def long_modules(root: Path) -> list[str]:
    return [f"{path.relative_to(REPO)} ({lines} lines)" for path in sorted(root.rglob("*.py"))
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]


def test_the_length_checks_find_a_long_function_and_a_long_module(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    body = "".join(f"    x = {i}\n" for i in range(MAX_FUNCTION_LINES))  # with its def line: one too many
    (tmp_path / "long.py").write_text("def f():\n" + body + "\n" * (MAX_MODULE_LINES - MAX_FUNCTION_LINES))
    (tmp_path / "short.py").write_text("def g():\n" + body[: -len("    x = 79\n")])
    assert long_functions(tmp_path) == ["long.py:1 f (81 lines)"]
    assert long_modules(tmp_path) == [f"long.py ({MAX_MODULE_LINES + 1} lines)"]


def test_no_module_in_src_over_450_lines():
    assert long_modules(SRC) == []


def test_the_input_of_elmo_embed_has_one_home():
    """INPUT's path, state, line limits and lines live in elmo.embed.input_file; the embedding modules go down to it and
    take none of it from each other (once, a run entered embed_file.py 9 times for pieces of its input)."""
    graph = import_graph()
    assert "elmo.embed.input_file" in graph["elmo.embed.stream"] and "elmo.embed.input_file" in graph["elmo.embed.corpus"]
    assert graph["elmo.embed.input_file"].isdisjoint({"elmo.embed.stream", "elmo.embed.corpus"})


def test_the_output_of_elmo_embed_has_one_home_below_both_writers():
    """What a line's dataset holds, the checks on OUTPUT and the sentence keys live in elmo.embed.output_file, below both
    writers: embed_corpus goes down to it (and to embed_input, long_lines) and never up into embed_file, so its
    input, followed through the code, only goes down (once, embed_corpus reached into embed_file for them)."""
    graph = import_graph()
    assert {"elmo.embed.output_file", "elmo.embed.input_file", "elmo.embed.long_lines"} <= graph["elmo.embed.corpus"]
    assert "elmo.embed.output_file" in graph["elmo.embed.stream"]
    assert "elmo.embed.stream" not in graph["elmo.embed.corpus"]
    below = {"elmo.embed.output_file", "elmo.embed.input_file", "elmo.embed.long_lines"}
    assert all(graph[m].isdisjoint({"elmo.embed.stream", "elmo.embed.corpus"}) for m in below)
