"""scripts/default_model_curves.py: every checkpoint scored in each mode asked for, references as lines."""

from __future__ import annotations

import json

import pytest
from conftest import BILM_TF, load_script, need, train_micro_run

from elmo.cli import main as cli_main
from elmo.training.checkpoint import list_checkpoints
from elmo.training.export import load_run
from elmo.training.perplexity import perplexity

pytest.importorskip("matplotlib", reason="scripts/default_model_curves.py draws with matplotlib: pip install -e '.[tasks]'")


def test_checkpoints_scored_per_mode_and_the_reference_drawn(tmp_path):
    run, _ = train_micro_run(tmp_path, 3)
    lines = need(BILM_TF / "train" / "data.txt").read_text(encoding="utf-8").splitlines()[:6]
    valid = tmp_path / "valid-docs.txt"
    valid.write_text("\n".join(lines[:3]) + "\n\n" + "\n".join(lines[3:]) + "\n", encoding="utf-8")
    assert cli_main(["export", str(run), "-o", str(tmp_path / "model")]) == 0
    out = tmp_path / "curves"
    script = load_script("scripts/default_model_curves.py")
    script.main([str(run), "--valid", str(valid), "--lines", "7", "--mode", "sentence", "document", "--budget", "0",
                 "--reference", str(tmp_path / "model"), "--out", str(out), "--threads", "1"])
    records = [json.loads(x) for x in out.with_suffix(".jsonl").read_text().splitlines()]
    scored = [r for r in records if "step" in r]
    (step, path), = list_checkpoints(run)[-1:]
    model, vocab, _ = load_run(run, path)
    for mode in ("sentence", "document"):
        mine = next(r for r in scored if r["step"] == step and r["mode"] == mode)
        expected = perplexity(model, vocab, [str(valid)], mode=mode, batch_size=64)
        assert abs(mine["average"] - expected["average"]) < 1e-6 * expected["average"]
        reference = next(r for r in records if r.get("reference") and r["mode"] == mode)
        assert abs(reference["average"] - expected["average"]) < 1e-3 * expected["average"]  # the export is the last step
    assert len(scored) == 2 * len(list_checkpoints(run)) and not any("fit" in r for r in records)
    assert out.with_suffix(".png").stat().st_size > 0
    sentence, document = (next(r for r in scored if r["step"] == step and r["mode"] == m)["average"]
                          for m in ("sentence", "document"))
    assert sentence != document  # the second document's sentences were read after the first's
