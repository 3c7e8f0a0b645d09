"""The PTB comparison table (benchmarks/ptb_ablations_table.py), rendered from logs written here."""

from __future__ import annotations

import json

from conftest import load_script


def load_table_module():
    return load_script("benchmarks/ptb_ablations_table.py")


def write_records(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_table_reads_both_log_layouts_and_collect_keeps_it(tmp_path):
    tables = load_table_module()
    runs = tmp_path / "runs"
    write_records(runs / "bilm-ordered-mean" / "benchmark.jsonl", [
        {"epoch": 1, "objective": "mean", "valid": {"forward": 200.0, "backward": 190.0}},
        {"epoch": 2, "objective": "mean", "valid": {"forward": 150.0, "backward": 148.0},
         "valid_zero_state": {"forward": 165.0, "backward": 160.0}},
    ])
    write_records(runs / "bilm-ordered-forward" / "benchmark.jsonl", [
        {"epoch": 1, "objective": "forward", "valid": {"forward": 210.0, "backward": 9999.0}}])
    (runs / "word-shuffled.log").write_text("epoch 1 step 50: train ppl 900.0, mean gradient norm 5.00\n"
                                            "epoch 1: valid ppl 221.7\nepoch 2: valid ppl 170.2\n")
    table = tables.table(runs)
    rows = table.splitlines()[2:]
    assert len(rows) == 3  # the runs without logs are left out
    assert "200.0 / 190.0, 150.0 / 148.0" in rows[0] and "150.0 vs 165.0 (+10.0%)" in rows[0]
    assert "| 210.0 |" in rows[1] and "9999" not in rows[1]  # a forward-only run has no backward LM to show
    assert "221.7, 170.2" in rows[2]

    tables.collect(runs, tmp_path / "kept")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [
        "bilm-ordered-forward.jsonl", "bilm-ordered-mean.jsonl", "word-shuffled.log"]
    assert tables.table(tmp_path / "kept") == table
