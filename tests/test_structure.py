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
    assert "elmo.models" in graph and "elmo.manylangs" in graph["elmo.models"]  # the walk sees imports
    assert cycles(graph) == []


# The layers, bottom up (README "Layout"): the core (every module directly under src/elmo: file layout,
# characters, options, the biLM, weights, Elmo, the Embedder, embedding files, ...); `elmo.hub`, which
# fetches files and knows nothing above the core; the one model resolver `elmo.models`, which turns every
# reference into local files (through the hub) and a model; training, tasks, lab and the command line.
UPPER_PACKAGES = ("training", "tasks", "lab", "serve", "hub", "cli")
ABOVE_THE_CORE = {
    "elmo.models": "the resolver: the core's one door to the hub",
    "elmo.__main__": "`python -m elmo`, the command line",
    "elmo.simple_elmo": "simple_elmo's API, whose LM scoring reads the softmax and vocabulary of training/",
    "elmo.tfhub": "TF-Hub's Module API, which resolves handles and module folders through the resolver",
}


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def is_core(module: str) -> bool:
    """A module directly under src/elmo, not a subpackage's __init__ and not one named above the core."""
    subpackage = (SRC / module.replace(".", "/") / "__init__.py").is_file()
    return module.count(".") == 1 and not subpackage and module not in ABOVE_THE_CORE


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports that look up: the core into training/tasks/lab/hub/cli, the hub into training/tasks/lab/cli
    or the resolver, the TensorFlow reader (tf/) into training/tasks/lab/cli."""
    found = []
    for module, imports in sorted(graph.items()):
        for imported in sorted(imports):
            up = _package(imported)
            core_looks_up = is_core(module) and up in UPPER_PACKAGES
            hub_looks_up = _package(module) == "hub" and (up in ("training", "tasks", "lab", "cli") or imported == "elmo.models")
            tf_looks_up = _package(module) == "tf" and up in ("training", "tasks", "lab", "cli")
            if core_looks_up or hub_looks_up or tf_looks_up:
                found.append(f"{module} imports {imported}")
    return found


def test_the_layer_check_finds_an_import_that_looks_up():
    graph = {"elmo.weights": {"elmo.hub"}, "elmo.hub.fetch": {"elmo.training.data"}, "elmo.hub.x": {"elmo.models"},
             "elmo.models": {"elmo.hub", "elmo.weights"}, "elmo.cli.hub": {"elmo.hub.cache"},
             "elmo.tasks.x": {"elmo.hub"}, "elmo.embedder": {"elmo.models"},
             "elmo.tf.bilm_import": {"elmo.training.vocab", "elmo.lm_vocab"}}
    assert layer_violations(graph) == ["elmo.hub.fetch imports elmo.training.data", "elmo.hub.x imports elmo.models",
                                       "elmo.tf.bilm_import imports elmo.training.vocab",
                                       "elmo.weights imports elmo.hub"]


def test_layers_only_look_down():
    assert layer_violations(import_graph()) == []


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
    """INPUT's path, state, line limits and lines live in elmo.embed_input; the embedding modules go down to it and
    take none of it from each other (once, a run entered embed_file.py 9 times for pieces of its input)."""
    graph = import_graph()
    assert "elmo.embed_input" in graph["elmo.embed_file"] and "elmo.embed_input" in graph["elmo.embed_corpus"]
    assert graph["elmo.embed_input"].isdisjoint({"elmo.embed_file", "elmo.embed_corpus"})


def test_the_output_of_elmo_embed_has_one_home_below_both_writers():
    """What a line's dataset holds, the checks on OUTPUT and the sentence keys live in elmo.embed_output, below both
    writers: embed_corpus goes down to it (and to embed_input, long_lines) and never up into embed_file, so its
    input, followed through the code, only goes down (once, embed_corpus reached into embed_file for them)."""
    graph = import_graph()
    assert {"elmo.embed_output", "elmo.embed_input", "elmo.long_lines"} <= graph["elmo.embed_corpus"]
    assert "elmo.embed_output" in graph["elmo.embed_file"]
    assert "elmo.embed_file" not in graph["elmo.embed_corpus"]
    below = {"elmo.embed_output", "elmo.embed_input", "elmo.long_lines"}
    assert all(graph[m].isdisjoint({"elmo.embed_file", "elmo.embed_corpus"}) for m in below)
