"""Every `elmo` command that writes refuses, in one line and before any work, with or without --overwrite:
its own input, a FIFO, a device node, a directory where a file goes (a file where a folder goes) and
control characters in the path (elmo.files.output_paths, the one rule; docs/reliability.md, fifth round).

The commands are found in the CLI's own parser: an argument is an output when its name is output/out/save
or its help says "write" or "output"; every command with one must have a case below, so a new writing
command fails here until it is run against the rule.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import stat
from pathlib import Path

import pytest
from conftest import ALLENNLP

from elmo.cli import build_parser, main

OUTPUT_DESTS = {"output", "out", "save"}
OUTPUT_HELP = re.compile(r"\b(write|output)\b", re.IGNORECASE)


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command words, parser) of every runnable command, subcommands included."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield path, parser
    for group in groups:
        seen = set()
        for name, sub in group.choices.items():
            if id(sub) not in seen:  # an alias names the same parser
                seen.add(id(sub))
                yield from leaf_commands(sub, (*path, name))


def output_arguments(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(a.dest for a in parser._actions if a.nargs != 0 and a.dest != "help"
                  and (a.dest in OUTPUT_DESTS or OUTPUT_HELP.search(a.help or "")))


def writing_commands() -> dict[str, list[str]]:
    return {" ".join(path): outs for path, parser in leaf_commands(build_parser()) if (outs := output_arguments(parser))}


# command -> (argv with {OUT} for the output and {IN} for an input it reads, "file" or "folder")
CASES = {
    "embed": (["embed", "{IN}", "{OUT}", "--overwrite"], "file"),
    "vocab": (["vocab", "{IN}", "-o", "{OUT}"], "file"),
    "static train": (["static", "train", "{IN}", "-o", "{OUT}"], "file"),
    "task train --save": (["task", "train", "ner", "--train", "{IN}", "--dev", "{IN}", "--test", "{IN}", "--model",
                           "none", "--save", "{OUT}"], "file"),
    "task train --out": (["task", "train", "ner", "--train", "{IN}", "--dev", "{IN}", "--test", "{IN}", "--model",
                          "none", "--out", "{OUT}"], "file"),
    "probe pos": (["probe", "pos", "--layer", "1", "--train", "{IN}", "--test", "{IN}", "--out", "{OUT}"], "file"),
    "probe wsd": (["probe", "wsd", "--layer", "1", "--train-xml", "{IN}", "--train-keys", "{IN}", "--test-xml", "{IN}",
                   "--test-keys", "{IN}", "--wordnet", "{IN}", "--out", "{OUT}"], "file"),
    "train": (["train", "--train", "{IN}", "--preset", "tiny", "--out", "{OUT}"], "folder"),
    "export": (["export", "{IN}", "-o", "{OUT}", "--overwrite"], "folder"),
    "import-tf": (["import-tf", "{IN}", "{OUT}", "--overwrite"], "folder"),
    "export-onnx": (["export-onnx", "{IN}", "{OUT}", "--overwrite"], "file"),
    "embed-proteins": (["embed-proteins", "{IN}", "{OUT}"], "folder"),
    "embed-dataset": (["embed-dataset", "{IN}", "{OUT}"], "folder"),
}
# a command with several outputs: one case per output, named "COMMAND --FLAG"
COVERS = {"task train": {"save": "task train --save", "out": "task train --out"}}


def test_every_writing_command_has_a_case():
    found = writing_commands()
    assert {"embed", "export-onnx", "vocab", "import-tf"} <= set(found)  # the walk sees them
    missing = []
    for command, outputs in found.items():
        for dest in outputs:
            case = COVERS.get(command, {}).get(dest, command)
            if case not in CASES:
                missing.append(f"{command} ({dest})")
    assert missing == [], f"writing commands without a case in tests/test_writers.py: {missing}"


def run_refused(argv: list[str], capsys) -> str:
    """main(argv) must refuse (exit 2) with one line, within seconds (a FIFO opened for writing would block)."""
    def hung(*_):
        raise TimeoutError(f"elmo {' '.join(argv)} did not refuse within 60 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        status = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err.strip()
    assert status == 2, (argv, status, err)
    assert len(err.splitlines()) == 1 and err.startswith("elmo "), err
    return err


def make_input(tmp_path: Path, case: str) -> Path:
    """An input the command reads: a text file, or (for commands reading a folder) a model folder copy."""
    if case in ("export-onnx", "export", "import-tf", "probe wsd"):
        folder = tmp_path / "model"
        folder.mkdir()
        for name in ("options.json", "lm_weights.hdf5"):
            os.link(ALLENNLP / name, folder / name) if ALLENNLP.is_dir() else (folder / name).write_text("{}")
        return folder
    path = tmp_path / "input.txt"
    path.write_text("the cat sat\n>p1\nMKV\n", encoding="utf-8")
    return path


def argv_for(case: str, inp: Path, out: str) -> list[str]:
    template, _ = CASES[case]
    return [out if part == "{OUT}" else str(inp) if part == "{IN}" else part for part in template]


def targets(tmp_path: Path, kind: str, inp: Path) -> dict[str, str]:
    """What the output must never be: the input (or a file inside an input folder), a FIFO, a device node
    (a link to /dev/null: safe even if a command wrongly replaced it), and the other kind of entry."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    device = tmp_path / "device"
    device.symlink_to("/dev/null")
    wrong = tmp_path / ("a-file" if kind == "folder" else "a-folder")
    wrong.write_text("x") if kind == "folder" else wrong.mkdir()
    own = inp / "lm_weights.hdf5" if inp.is_dir() and kind == "file" else inp
    return {"input": str(own), "fifo": str(fifo), "device": str(device), "wrong kind": str(wrong)}


def snapshot(path: Path) -> dict[str, tuple]:
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    return {str(p): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns) for p in paths}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_writing_command_refuses_what_it_must_not_write_over(case, tmp_path, capsys, monkeypatch):
    if case.split(" --")[0] not in writing_commands():
        pytest.skip(f"`elmo {case}` is not a command of this checkout")
    monkeypatch.chdir(tmp_path)
    inp = make_input(tmp_path, case)
    kind = CASES[case][1]
    for what, out in targets(tmp_path, kind, inp).items():
        before = {**snapshot(inp), **snapshot(Path(out))}
        err = run_refused(argv_for(case, inp, out), capsys)
        assert out in err or os.path.basename(out) in err, (what, err)
        assert {**snapshot(inp), **snapshot(Path(out))} == before, f"{case}: {what} changed"
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode) and os.path.realpath(tmp_path / "device") == "/dev/null"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("char", ["\x00", "\x1b", "\n", "\x7f"], ids=["NUL", "ESC", "newline", "DEL"])
def test_a_control_character_in_an_output_path_is_one_line_naming_the_flag(case, char, tmp_path, capsys,
                                                                          monkeypatch):
    if case.split(" --")[0] not in writing_commands():
        pytest.skip(f"`elmo {case}` is not a command of this checkout")
    monkeypatch.chdir(tmp_path)
    inp = make_input(tmp_path, case)
    err = run_refused(argv_for(case, inp, f"out{char}put"), capsys)
    assert repr(char)[1:-1] in err and "control character" in err or "NUL" in err, err
    assert not list(tmp_path.glob("out*")), "nothing is written"
