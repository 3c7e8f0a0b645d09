"""MkDocs hooks (mkdocs.yml `hooks:`): the `elmo` command reference, generated from the argparse parser itself.

docs/reference/cli.md holds the marker `<!-- elmo-commands -->`; at build time it becomes one section per command
(and per subcommand, such as `elmo task train`) with its usage and every flag, its help and its default, so the
page cannot drift from the code. Run as a script, it prints that markdown:

    python scripts/docs_hooks.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

MARKER = "<!-- elmo-commands -->"
CLI_PAGE = "reference/cli.md"


def subcommands(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(full command name, its parser, its one-line help) for every command below `parser`, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for sub_name, sub in action.choices.items():
                yield f"{name} {sub_name}", sub, helps.get(sub_name, "")
                yield from subcommands(sub, f"{name} {sub_name}")


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    """One table row per argument: its spelling, its help (%(default)s and the like filled in), its default."""
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        spelling = ", ".join(action.option_strings) or action.metavar or action.dest
        if action.option_strings and action.nargs != 0:  # the value as --help shows it: a metavar or {the,choices}
            spelling += " " + formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
        default = action.default
        takes_value = action.option_strings and action.nargs != 0
        shown = f"`{default}`" if takes_value and default not in (None, argparse.SUPPRESS) else ""
        rows.append(f"| `{cell(spelling)}` | {cell(formatter._expand_help(action) if action.help else '')} | {shown} |")
    return rows


def command_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown for every `elmo` command: heading, what it does, usage, flags."""
    parts = []
    for name, sub, help_line in subcommands(parser, parser.prog):
        parts.append(f"## `{name}`\n")
        about = sub.description or help_line
        if about:
            parts.append(f"{' '.join(about.split())}\n")
        usage = " ".join(sub.format_usage().split())
        parts.append(f"```text\n{usage}\n```\n")
        rows = flag_rows(sub)
        if rows:
            parts.append("| argument | what it does | default |\n|---|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def elmo_parser() -> argparse.ArgumentParser:
    src = str(Path(__file__).resolve().parents[1] / "src")
    if src not in sys.path:  # the checkout's own code, installed or not
        sys.path.insert(0, src)
    from elmo.cli import build_parser

    return build_parser()


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    """MkDocs: fill the marker of the command reference page."""
    if page.file.src_uri == CLI_PAGE:
        if MARKER not in markdown:
            raise ValueError(f"docs/{CLI_PAGE}: the marker {MARKER} is missing")
        markdown = markdown.replace(MARKER, command_reference(elmo_parser()))
    return markdown


if __name__ == "__main__":
    print(command_reference(elmo_parser()))
