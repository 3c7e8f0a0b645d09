"""Print docs/published-models.md's table of names from the catalog (src/elmo/hub/catalog.json).

    python scripts/published_models_table.py        # paste between docs/published-models.md's markers
tests/test_hub_cli.py checks that the page holds exactly this table.
"""

from __future__ import annotations

from elmo.hub.catalog import published_models


def _size(size: int | None) -> str:
    return "?" if size is None else f"{size / 1e6:.0f} MB"


def markdown_table() -> str:
    lines = ["| name (aliases) | vector size | corpus | download | licence |", "|---|---|---|---|---|"]
    manylangs = []
    for m in published_models():
        if m.format == "manylangs":
            manylangs.append(m)
            continue
        names = f"`{m.name}`" + (f" ({', '.join(f'`{a}`' for a in m.aliases)})" if m.aliases else "")
        lines.append(f"| {names} | {m.vector_size or '?'} | {m.corpus} | {_size(m.download_size)} | {m.licence} |")
    codes = ", ".join(m.name.removeprefix("manylangs-") for m in manylangs)
    lines.append(f"| `manylangs-XX`, XX one of: {codes} | 1024 | {manylangs[0].corpus} (ELMoForManyLangs; "
                 f"zhs: {manylangs[-1].corpus}) | ? | {manylangs[0].licence} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
