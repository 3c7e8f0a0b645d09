"""The `elmo` command: a thin layer that parses arguments and calls the library.

Each command group lives in its own module with a `register(subparsers)` function.

May import: elmo.allennlp, the package face, elmo_char_ids, elmo.embed, elmo.errors, elmo.files, elmo.formats,
elmo.hub, elmo.integrations, elmo.lab, elmo.model, elmo.models, elmo.proteins, elmo.serve, elmo.simple_elmo,
elmo.tasks, elmo.tf, elmo.tfhub, elmo.training.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from typing import TypeVar

from elmo import __version__
from elmo.errors import ElmoError

T = TypeVar("T")
# One module per command group, each with register(subparsers); add new groups here.
COMMAND_MODULES = ["embed", "tasks", "vocab", "train", "perplexity", "export", "lab", "hub", "import_tf", "export_onnx",
                   "serve", "proteins", "embed_dataset"]


def settings_from_args(cls: type[T], args: argparse.Namespace, **given) -> T:
    """A settings dataclass filled from the parsed flags of the same names (`given` wins), so a new
    setting needs a field and a flag, never a third list of names to keep in step."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return cls(**{**values, **given})


def add_model_flags(p: argparse.ArgumentParser, required: bool = False, none_for: str | None = None,
                    old_name: str | None = None) -> None:
    """`--model NAME|DIR` or `--options O --weights W`, the same in every command (elmo.models.resolve
    reads them). `none_for`: what `--model none` means there; `old_name`: an earlier spelling of --model."""
    names = ["--model"] + ([old_name] if old_name else [])
    help = ("a bundled or published model's name (`elmo models`), a model directory (options.json + weights.hdf5, "
            "or an ELMoForManyLangs model: config.json, char.dic/word.dic, *.pkl), or the URL of an archive holding one"
            + (f"; 'none': {none_for}" if none_for else "")
            + (" (required, or --options/--weights)" if required else " (default: the bundled model)")
            + (f"; {old_name} is its older name" if old_name else ""))
    p.add_argument(*names, dest="model", default=None, metavar="MODEL" + ("|none" if none_for else ""), help=help)
    p.add_argument("--options", help="options.json, a path or URL (with --weights, instead of --model)")
    p.add_argument("--weights", help="weights.hdf5, a path or URL (with --options)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elmo", description="ELMo: deep contextualized word representations.")
    parser.add_argument("--version", action="version", version=f"elmo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args.func(args) or 0
        sys.stdout.flush()  # inside the try: a reader that stopped early surfaces here, not at exit
        return status
    except BrokenPipeError:  # stdout's reader stopped early (`elmo models | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit has somewhere to go
        return 141  # 128 + SIGPIPE, what a Unix tool stopped this way returns
    except ElmoError as e:
        print(f"elmo {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # what the OS refused and no check caught first (permissions, a read-only cache): one line
        print(f"elmo {args.command}: error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"elmo {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
