"""Panel 7: the paper's six benchmarks beside the numbers this project measured.

The paper's figures are Table 1 of Peters et al. (2018), "baseline" and "ELMo + baseline". Ours
come from the task experiments, never typed here: the per-run metrics files that
scripts/run_results.py turns into docs/results.md (a folder, e.g. runs/results), the "ours" columns
of that report's Table 1, or one JSON file in the lab's own shape (docs/results.json). Increases
and relative error reductions are computed from the figures, so they cannot drift from them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from elmo.errors import InputError
from elmo.tasks.paper import TABLE1, aggregate_runs, error_reduction


def find_results(explicit: str | os.PathLike | None = None) -> Path | None:
    """--results, $ELMO_RESULTS, or the first of docs/results.json, runs/results/, docs/results.md in the
    current folder (a checkout). Never guessed from where the package lives: installed, that is
    site-packages."""
    if explicit or os.environ.get("ELMO_RESULTS"):
        return Path(explicit or os.environ["ELMO_RESULTS"])
    root = Path.cwd()
    for candidate in (root / "docs" / "results.json", root / "runs" / "results", root / "docs" / "results.md"):
        if candidate.exists():
            return candidate
    return None


def shown_path(path: Path) -> str:
    """A path as the page shows it: relative to the current folder when inside it, so no machine's layout
    leaks."""
    try:
        return os.fspath(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return os.fspath(path)


_CELL = re.compile(r"^\s*(-?\d+(?:\.\d+)?)(?:\s*±\s*(\d+(?:\.\d+)?))?")


def from_report(path: Path) -> dict:
    """The "ours: static" / "ours: +ELMo" cells of docs/results.md's Table 1 (as run_results.py writes it).

    Only for a report rendered before run_results.py wrote docs/results.json beside it (which
    `find_results` prefers): the JSON comes from the package's aggregation, not from Markdown."""
    out, header = {}, None
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if not cells:
            header = None
            continue
        if "ours: static" in cells and "ours: +ELMo" in cells:
            header = cells
            continue
        if header is None or len(cells) != len(header):
            continue
        name = next((n for n in ("NER", "POS", "SST-5") if cells[0].startswith(n)), None)
        base, elmo = (_CELL.match(cells[header.index(h)]) for h in ("ours: static", "ours: +ELMo"))
        if not name or not base or not elmo:
            continue
        metric = cells[0].rsplit(",", 1)[-1].strip(" )") if "(" in cells[0] else ""
        entry = {"metric": metric, "baseline": float(base.group(1)), "elmo": float(elmo.group(1)),
                 "note": f"{path.name}: {cells[0]}"}
        if base.group(2):
            entry["baseline_std"] = float(base.group(2))
        if elmo.group(2):
            entry["elmo_std"] = float(elmo.group(2))
        out[name] = entry
    return out


def read_results(path: Path | None) -> tuple[dict, str]:
    """(our results by benchmark name, why there are none when empty)."""
    if path is None:
        return {}, ("not available yet: no measured results found (the task grid writes benchmarks/results/grid/; "
                    "or pass --results FOLDER|FILE)")
    if path.is_dir():
        found = aggregate_runs(path)
        return found, "" if found else f"not available yet: no finished runs of this task in {path}"
    if path.suffix == ".md":
        found = from_report(path)
        return found, "" if found else f"not available yet: {path.name} has no measured numbers yet"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read the results file ({e})") from e
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, dict):
        raise InputError(f"{path}: expected an object with 'benchmarks': {{name: {{metric, baseline, elmo, ...}}}}")
    return benchmarks, ""


def _ours(entry: dict | None) -> dict | None:
    if not isinstance(entry, dict):
        return None
    out = {k: entry[k] for k in ("metric", "baseline", "elmo", "baseline_std", "elmo_std", "note", "command",
                                 "why") if k in entry}
    b, e = entry.get("baseline"), entry.get("elmo")
    if isinstance(b, (int, float)) and isinstance(e, (int, float)):
        out["increase"] = round(e - b, 2)
        out["error_reduction"] = round(error_reduction(b, e), 1)
    return out


def results_table(ours: dict, why_none: str, data_dir: Path | None) -> list[dict]:
    """One row per benchmark: the paper's side always, ours where measured, else why not."""
    rows = []
    for name, bench in TABLE1.items():
        folder = bench.data
        row = {"name": name, "task": bench.task, "metric": bench.metric, "paper": {
            "baseline": bench.baseline, "elmo": bench.elmo, "increase": bench.increase,
            "error_reduction": round(bench.reduction, 1)}}
        mine = _ours(ours.get(name))
        if mine and "elmo" in mine:
            row["ours"] = mine
        elif mine and "why" in mine:
            row["why"] = str(mine["why"])
        elif folder is None:
            row["why"] = f"not run: there is no {name} data set in ../shared/data (only offline data can be used)"
        elif data_dir is not None and not (data_dir / folder).is_dir():
            row["why"] = f"not run: ../shared/data/{folder} is missing here"
        else:
            row["why"] = why_none or f"not available yet: no measured result for {name}"
        rows.append(row)
    for name, entry in ours.items():  # our extra tasks (e.g. POS), not among the paper's six
        if name not in TABLE1 and _ours(entry) and "elmo" in entry:
            rows.append({"name": name, "task": str(entry.get("task", name)), "metric": str(entry.get("metric", "")),
                         "paper": None, "ours": _ours(entry), "extra": True})
    return rows
