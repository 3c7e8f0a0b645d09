"""scripts/compare_runs.py: arms paired by seed, and the seed-noise verdict by its stated rule."""

import json
from pathlib import Path

import pytest
from conftest import load_script

compare_runs = load_script("scripts/compare_runs.py")


def write_runs(folder: Path, name: str, scores: dict[int, tuple[float, float]]) -> list[str]:
    folder.mkdir(exist_ok=True)
    paths = []
    for seed, (dev, test) in scores.items():
        path = folder / f"{name}-s{seed}.json"
        path.write_text(json.dumps({"seed": seed, "metric": "f1", "dev": {"f1": dev}, "test": {"f1": test}}))
        paths.append(str(path))
    return paths


def test_a_consistent_gain_larger_than_the_spread_is_beyond_noise(tmp_path, capsys):
    a = write_runs(tmp_path, "a", {1: (90.0, 85.0), 2: (90.2, 85.1), 3: (89.9, 84.9)})
    b = write_runs(tmp_path, "b", {3: (91.0, 84.8), 1: (91.2, 85.3), 2: (91.1, 84.9)})  # any file order
    assert compare_runs.main(["--a", "base", *a, "--b", "new", *b]) == 0
    out = capsys.readouterr().out
    assert "| base | mean ± sd | 90.03 ± 0.15 | 85.00 ± 0.10 |" in out
    dev, test = [line for line in out.splitlines() if line.startswith("- ")]
    assert "+1.07 on average" in dev and "beyond seed noise" in dev
    assert "per seed +0.30, -0.20, -0.10" in test and "within seed noise" in test


def test_arms_with_different_seeds_are_refused(tmp_path):
    a = write_runs(tmp_path, "a", {1: (90.0, 85.0), 2: (90.0, 85.0)})
    b = write_runs(tmp_path, "b", {1: (90.0, 85.0), 3: (90.0, 85.0)})
    with pytest.raises(SystemExit, match=r"same seeds: \[1, 2\] against \[1, 3\]"):
        compare_runs.main(["--a", "x", *a, "--b", "y", *b])


def test_a_file_that_is_not_a_metrics_file_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"seed": 1}')
    with pytest.raises(SystemExit, match=r"bad\.json: not a task metrics file"):
        compare_runs.main(["--a", "x", str(bad), "--b", "y", str(bad)])
