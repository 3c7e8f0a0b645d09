"""`elmo.models`: one model reference (`--model NAME|DIR` or `--options O --weights W`) in every command and API
(`resolve`); bad references are refused as in test_errors.py (a missing directory is also a FileNotFoundError)."""

import json

import pytest

from elmo.cli import build_parser
from elmo.cli import main as cli_main
from elmo.errors import InputError, ModelFileError
from elmo.files.layout import ModelFiles
from elmo.models import ManyLangsModel, OriginalModel, TrainingRun, resolve


def test_resolve_takes_a_name_a_directory_or_a_file_pair(allennlp_dir, tmp_path):
    default = resolve()
    assert isinstance(default, OriginalModel) and default == resolve("default")
    assert default.original_files() == ModelFiles.from_dir(default.original_files().options_file.parent)
    assert resolve(default) is default
    pair = resolve(options=allennlp_dir / "options.json", weights=allennlp_dir / "lm_weights.hdf5").original_files()
    assert pair.weight_file == allennlp_dir / "lm_weights.hdf5" and pair.vocab_file is None
    with pytest.raises(ModelFileError, match=r"nowhere: neither a model directory nor a bundled model \(bundled: default"):
        resolve("nowhere")
    with pytest.raises(FileNotFoundError, match=r"nowhere: neither a model directory nor a bundled model"):
        resolve(tmp_path / "nowhere")  # a path, not a name: nothing there
    with pytest.raises(InputError, match="--options and --weights go together"):
        resolve(options=allennlp_dir / "options.json")
    with pytest.raises(InputError, match="either --model or --options/--weights"):
        resolve("default", allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    with pytest.raises(InputError, match=r"missing\.hdf5: file not found"):
        resolve(options=allennlp_dir / "options.json", weights=tmp_path / "missing.hdf5")


def test_a_training_run_is_not_a_model_and_the_error_says_how_to_make_one(allennlp_dir, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "options.json").write_text((allennlp_dir / "options.json").read_text())
    (run / "run.json").write_text(json.dumps({"seed": 1}))
    assert isinstance(resolve(run), TrainingRun)
    for use in (lambda m: m.load(), lambda m: m.original_files()):
        with pytest.raises(ModelFileError, match=r"a training run, not a model directory; make one with `elmo export"):
            use(resolve(run))
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    assert cli_main(["embed", str(text), str(tmp_path / "o.hdf5"), "--model", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"elmo embed: error: {run}: a training run, not a model directory; make one with " \
                  f"`elmo export {run} -o MODEL_DIR` and pass that"


@pytest.mark.parametrize("flag", ["--model", "--elmo"])
def test_task_commands_take_model_and_keep_elmo_as_its_old_name(flag):
    parser = build_parser()
    args = parser.parse_args(["task", "train", "ner", "--train", "t", "--dev", "d", "--test", "e", flag, "none"])
    assert args.model == "none"
    args = parser.parse_args(["probe", "pos", "--layer", "1", "--train", "t", "--test", "e", flag, "default"])
    assert args.model == "default"


def test_manylangs_directories_load_and_refuse_only_where_the_original_files_are_needed():
    """`elmo embed` loads them; a command that needs the original format's files is told so."""
    from pathlib import Path
    directory = next(p for p in (Path(__file__).parent / "fixtures" / "manylangs").iterdir() if (p / "config.json").is_file())
    model = resolve(str(directory))
    assert isinstance(model, ManyLangsModel) and model.directory == directory
    assert model.load().config.token_input is not None
    with pytest.raises(ModelFileError, match="an ELMoForManyLangs model directory"):
        model.original_files()


def test_references_are_refused_in_one_line_before_any_parser(capsys):
    """A URL that urllib cannot split, and control characters in a reference, are one clear error each."""
    from elmo.cli import main

    assert main(["download", "https://[::1/x.zip"]) == 2
    assert "not a URL" in capsys.readouterr().err
    with pytest.raises(ModelFileError, match=r"abc\\x1bdef: neither a model directory"):
        resolve("abc\x1bdef")
