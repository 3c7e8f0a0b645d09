"""scripts/run_results.py (its parts in scripts/results_grid/): the grid runs end to end on tiny slices and the report holds only measured numbers."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest
import torch
from conftest import ALLENNLP, DATA, REPO, load_script, need
from results_grid import cli, grid, ptb, stats, verdicts, work_queue  # scripts/results_grid: the command's parts

pytest.importorskip("matplotlib", reason="the report's figures need the tasks extra (matplotlib)")
pytest.importorskip("gensim", reason="the static baseline needs the tasks extra (gensim)")


def _script():
    return load_script("scripts/run_results.py")


def test_skeleton_has_no_numbers_of_ours(tmp_path):
    script = _script()
    assert script.main(["--render-only", "--out", str(tmp_path / "none"), "--docs", str(tmp_path / "docs"),
                        "--ner-arms", str(tmp_path / "none")]) == 0
    text = (tmp_path / "docs" / "results.md").read_text()
    assert "### int8 against float32 biLM features {#int8-against-float32-bilm-features-issue-49}\n\nThe biLM's products" in text
    assert "Not all runs are present yet." in text
    table = next(line for line in text.splitlines() if line.startswith("| NER (CoNLL-2003"))
    # the paper's cells from elmo.tasks.paper (its reduction computed: the paper prints 21%), ours empty
    assert table.rstrip().endswith("| 90.15 | 92.22 ± 0.10 | 21.0% |  |  |  |")
    assert json.loads((tmp_path / "docs" / "results.json").read_text()) == {"benchmarks": {}}  # for the lab
    assert "0 of 39 runs present" in text
    grid_commands = text[text.index("## Commands"):]  # other sections show their own commands
    commands = [line for line in grid_commands.splitlines() if line.startswith("elmo ")]
    assert sum(c.startswith("elmo task train") for c in commands) == 30
    assert sum(c.startswith("elmo probe") for c in commands) == 9
    assert commands[0].startswith("elmo static train ../shared/data/wiki_corpus/train.txt.gz")
    assert str(REPO.parent) not in text.replace(str(tmp_path), "")  # no absolute path of this checkout's machine
    assert all((tmp_path / "docs" / f"results_{n}.png").exists() for n in ("lowres", "probes", "layer_weights", "ptb"))


@pytest.mark.slow  # end-to-end: 12 task runs
def test_smoke_grid(tmp_path):
    need(ALLENNLP)
    need(DATA / "conll2003")
    script = _script()
    before = torch.get_num_threads()
    try:
        assert script.main(["--smoke", "--in-process", "--seeds", "1", "--tasks", "ner", "--num-layers", "2",
                            "--threads", "1", "--limit", "8", "--out", str(tmp_path / "res"),
                            "--cache-dir", str(tmp_path / "cache"), "--docs", str(tmp_path / "docs")]) == 0
    finally:
        torch.set_num_threads(before)
    text = (tmp_path / "docs" / "results.md").read_text()
    assert "12 of 12 runs present" in text
    rows = [line for line in text.splitlines() if re.match(r"\| (1|10|100)% \|", line)]
    assert len(rows) == 3 and all(re.search(r"\| \d+\.\d\d \(1 seed\) \| \d+\.\d\d \(1 seed\) \|", r) for r in rows)
    assert re.search(r"\| WSD, Raganato ALL, F1 \| 1 \| 67\.4 \| \d+\.\d \|", text)
    assert re.search(r"\| ner \| input \| 0\.\d{3} \| 0\.\d{3} \|", text)


def test_shards_partition_the_grid(tmp_path, monkeypatch):
    static = tmp_path / "w2v.bin"
    static.write_bytes(b"")  # present, so no shard trains it
    ran = []
    monkeypatch.setattr(work_queue, "_run", lambda args, cmd: ran.append(cmd[cmd.index("--out") + 1]))
    for k in range(3):
        args = cli.parse_args(["--out", str(tmp_path / "r"), "--static", str(static), "--shard", f"{k}/3"])
        runs = grid.plan(args)
        work_queue.run_grid(args, runs)
    assert sorted(ran) == sorted(str(tmp_path / "r" / name) for name, _ in runs)  # each run once, by one shard
    for bad in ("3/3", "x", "1/0", "-1/2"):
        with pytest.raises(Exception, match="expected"):
            cli.shard(bad)


def test_arms_split_the_grid(tmp_path, monkeypatch):
    """--arms static runs exactly the runs that need no biLM, --arms elmo the rest (probes included)."""
    static = tmp_path / "w2v.bin"
    static.write_bytes(b"")
    ran = {}
    for arm in ("static", "elmo"):
        ran[arm] = []
        monkeypatch.setattr(work_queue, "_run", lambda args, cmd, arm=arm: ran[arm].append(cmd))
        args = cli.parse_args(["--out", str(tmp_path / "r"), "--static", str(static), "--arms", arm])
        runs = grid.plan(args)
        work_queue.run_grid(args, runs)
    assert len(ran["static"]) == 15 and len(ran["elmo"]) == 24
    assert all(cmd[cmd.index("--elmo") + 1] == "none" for cmd in ran["static"])
    assert not any("--elmo" in cmd and cmd[cmd.index("--elmo") + 1] == "none" for cmd in ran["elmo"])
    assert sum(cmd[0] == "probe" for cmd in ran["elmo"]) == 9
    with pytest.raises(SystemExit):
        cli.parse_args(["--arms", "word2vec"])


def test_processes_share_the_grid_through_lock_files(tmp_path, monkeypatch):
    """A run held by a live process is left to it; a lock left by a killed process is taken over."""
    static, out = tmp_path / "w2v.bin", tmp_path / "r"
    static.write_bytes(b"")
    out.mkdir()
    args = cli.parse_args(["--out", str(out), "--static", str(static)])
    runs = grid.plan(args)
    held, stale = runs[0][0], runs[1][0]
    (out / f".{held}.lock").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (out / f".{stale}.lock").write_text(f"{socket.gethostname()} {gone.pid}\n")
    ran = []
    monkeypatch.setattr(work_queue, "_run", lambda args, cmd: ran.append(os.path.basename(cmd[cmd.index("--out") + 1])))
    work_queue.run_grid(args, runs)
    assert ran == [name for name, _ in runs if name != held]
    assert [p.name for p in out.glob(".*.lock")] == [f".{held}.lock"]  # ours are released when a run ends


def test_render_refuses_to_empty_a_report_whose_metrics_are_missing(tmp_path):
    script = _script()
    docs = tmp_path / "docs"
    docs.mkdir()
    report = docs / "results.md"
    report.write_text("biLM: `default`; 39 of 39 runs present, 9.8 h of wall-clock time.\n")
    args = ["--render-only", "--out", str(tmp_path / "none"), "--docs", str(docs)]
    assert script.main(args) == 2
    assert report.read_text().startswith("biLM: `default`; 39 of 39")  # untouched
    assert script.main([*args, "--force"]) == 0
    assert "0 of 39 runs present" in report.read_text()


@pytest.mark.parametrize("law", ["power", "exponential"])
def test_ptb_projection_extrapolates_the_law_the_curve_follows(law):
    curve = {"power": lambda e: 110 + 150 * e ** -0.8, "exponential": lambda e: 118 + 300 * 0.6 ** e}[law]
    records = [{"epoch": e, "lr": 1.0, "valid": {"forward": curve(e)}} for e in range(1, 10)]
    records.append({"epoch": 10, "lr": 0.5, "valid": {"forward": 100.0}})  # after a halving: not part of the fit
    (line,) = [x for x in ptb.ptb_projection(records) if x]
    end = curve(ptb.PTB_EPOCHS)
    assert f"about **{end:.0f}** by epoch {ptb.PTB_EPOCHS} ({law}" in line and "epochs 2-9" in line
    cuts = re.search(r"cut about (\d+)-(\d+)% from there", line).groups()
    assert f"{100 * (1 - ptb.PTB_TARGET / end):.0f}" in cuts
    assert ptb.ptb_projection(records[:4]) == []  # too few epochs at the first rate to fit three numbers


def test_ptb_section_reports_the_test_set_once_the_run_is_finished(tmp_path, monkeypatch):
    current, earlier = tmp_path / "ordered.jsonl", tmp_path / "stream.jsonl"
    valid = {"forward": 120.0, "backward": 118.0, "average": 119.0, "tokens": 73760}
    test = {"forward": 95.04, "backward": 93.0, "average": 94.0, "tokens": 82430}
    monkeypatch.setattr(ptb, "REPO", tmp_path)
    monkeypatch.setattr(ptb, "PTB_EPOCHS", 3)
    monkeypatch.setattr(ptb, "PTB_RUNS", [("in order", "in order", current, "cmd-ordered"), ("shuffled", "shuffled", earlier, "cmd-stream")])

    def write(log, epochs, test_at=None):
        records = [{"epoch": e, "lr": 1.0, "next_lr": 1.0, "valid": valid, "wall_s": 3600.0 * e, "device": "cpu"}
                   for e in range(1, epochs + 1)]
        if test_at:
            records[test_at - 1]["test"] = dict(test)
        log.write_text("".join(json.dumps(r) + "\n" for r in records))
        return records

    write(earlier, 3, test_at=3)
    write(current, 2, test_at=2)  # a shorter run's own test score (an ablation's) is not the benchmark's
    text = "\n".join(ptb.ptb_section(ptb.ptb_logs()))
    run1, run2 = (line for line in text.splitlines() if line.startswith("**Run "))
    assert "Not finished**: 2 of 3 epochs after 2.0 h on cpu" in run1
    assert ("forward **95.0**, backward **93.0**, average 94.0 (82,430 tokens); target missed. "
            "Final validation 120.0 / 118.0. Wall time 3.0 h") in run2
    assert "| 3 |  |  | 1 | 120.0 / 118.0 |" in text and "cmd-ordered" in text and "cmd-stream" in text

    records = write(current, 3, test_at=3)
    assert "average 94.0 (82,430 tokens); target missed" in "\n".join(ptb.ptb_section(ptb.ptb_logs()))
    records[-1]["test"]["forward"] = ptb.PTB_TARGET
    current.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert "; target met" in "\n".join(ptb.ptb_section(ptb.ptb_logs()))

    records[1]["device"] = records[2]["device"] = "cuda"  # resumed on a GPU after epoch 1
    current.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert "Wall time 3.0 h on cpu (epoch 1), cuda (epochs 2-3)." in "\n".join(ptb.ptb_section(ptb.ptb_logs()))

    records[-1]["valid_zero_state"] = {"forward": 140.04, "backward": 135.0, "average": 137.5, "tokens": 73760}
    current.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert "Final validation 120.0 / 118.0 (every sentence from zero state: 140.0 / 135.0)." in "\n".join(
        ptb.ptb_section(ptb.ptb_logs()))


def _write_grid_scores(out, ner_static, ner_elmo, wsd_layers, first_sense):
    out.mkdir(exist_ok=True)
    for seed, (b, e) in enumerate(zip(ner_static, ner_elmo), start=1):
        for arm, score in (("static", b), ("elmo", e)):
            (out / f"ner-{arm}-1-s{seed}.json").write_text(json.dumps({"metric": "f1", "test": {"f1": score}}))
    for layer, f1 in enumerate(wsd_layers):
        (out / f"probe-wsd-layer{layer}.json").write_text(
            json.dumps({"test": {"f1": f1}, "first_sense_baseline": first_sense}))
    return [("wsd", layer, f1) for layer, f1 in enumerate(wsd_layers)]


def test_bundled_model_targets_say_by_how_much_they_are_missed(tmp_path):
    """#25's bars: NER error reduction >= 10% in every seed, WSD layer 2 >= layer 1 and above first sense."""
    args = cli.parse_args(["--out", str(tmp_path / "r")])
    rows = _write_grid_scores(args.out, [88.0, 88.2, 88.4], [89.5, 89.0, 88.3], [49.0, 60.5, 63.1], 65.2)
    lines = verdicts.bar_verdicts(args, stats.load_metrics(args, []), rows, verdicts.model_facts(args))
    ner = next(x for x in lines if x.startswith("- NER: relative error reduction at least 10%"))
    # means 88.2 -> 88.93: 100 * 0.733 / 11.8 = 6.2%
    assert "**does not hold** (6.2%, 3.8 points short of the target; +0.73, ahead in 2 of 3 seeds)" in ner
    assert "Why we think so:" in ner
    wsd = next(x for x in lines if x.startswith("- WSD probe: layer 2 at least layer 1 and above"))
    assert "**does not hold** (layer 2 63.1, layer 1 60.5, first sense 65.2: layer 2 2.1 under it)" in wsd

    rows = _write_grid_scores(args.out, [88.0, 88.2, 88.4], [90.0, 90.1, 89.9], [49.0, 66.0, 67.5], 65.2)
    lines = verdicts.bar_verdicts(args, stats.load_metrics(args, []), rows, verdicts.model_facts(args))
    assert any(x.startswith("- NER: relative error reduction") and "**holds** (15.3%; +1.80, ahead in 3 of 3" in x
               for x in lines)
    assert any(x.startswith("- WSD probe: layer 2 at least") and "**holds**" in x and "2.3 above it" in x for x in lines)
    targets = [x for x in lines if x.startswith(("- NER: relative error", "- WSD probe: layer 2 at least"))]
    assert len(targets) == 2 and not any("Why we think so" in x for x in targets)


def test_paired_ner_arms_render_with_their_verdicts(tmp_path):
    arms = tmp_path / "arms"
    arms.mkdir()
    for arm, base in (("fp32", 90.0), ("int8", 90.5)):
        for seed in (1, 2, 3):
            metrics = {"seed": seed, "metric": "f1", "dev": {"f1": base + seed / 10}, "test": {"f1": base - seed / 10}}
            (arms / f"ner-elmo-{arm}-s{seed}.json").write_text(json.dumps(metrics))
    script = _script()
    assert script.main(["--render-only", "--out", str(tmp_path / "none"), "--docs", str(tmp_path / "docs"),
                        "--ner-arms", str(arms)]) == 0
    text = (tmp_path / "docs" / "results.md").read_text()
    assert "| int8 | mean ± sd | 90.70 ± 0.10 | 90.30 ± 0.10 |" in text
    assert "- dev: int8 minus fp32 = +0.50 on average (per seed +0.50, +0.50, +0.50)" in text
    assert "--int8 --static ../runs/static/wiki-w2v300.bin" in text
