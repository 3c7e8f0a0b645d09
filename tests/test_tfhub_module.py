"""Issue #63 items 2-4: TF-Hub ELMo modules read without TensorFlow, against TensorFlow's own outputs.

tests/data/tfhub/ was made by scripts/make_tfhub_references.py in the TensorFlow peer venv: a TF1-Hub-format module
built from bilm-tf's own graph with the AllenNLP fixture's weights, and `hub.load(path).signatures[...]`'s outputs
(its docstring says exactly how). No TensorFlow here.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ALLENNLP, need

pytest.importorskip("google_crc32c", reason="the `tf` extra (google-crc32c) is not installed")

from make_tfhub_references import MIX_FIXTURE, SECOND_CALL, SENTENCES, TOKEN_LENGTHS, TOKENS  # noqa: E402

from elmo.tf.hub_import import MIX_NAME, PUBLISHED_SETTINGS, read_hub_module, read_mix, write_original  # noqa: E402
from elmo.tfhub import OUTPUTS, Module  # noqa: E402

DATA = Path(__file__).parent / "data" / "tfhub"
ARCHIVE = DATA / "fixture-module.tar.gz"
REFERENCE = dict(np.load(DATA / "fixture-outputs.npz"))
TOKENS_INPUT = {"tokens": TOKENS, "sequence_len": TOKEN_LENGTHS}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "tfhub-cache"))
    monkeypatch.setenv("ELMO_OFFLINE", "1")


@pytest.fixture
def module_dir(tmp_path) -> Path:
    out = tmp_path / "module"
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(out, filter="data")
    return out


def assert_outputs(found: dict, prefix: str) -> None:
    assert list(found) == list(OUTPUTS)
    for name in OUTPUTS:
        expected = REFERENCE[prefix + name]
        assert found[name].dtype == np.float32 and found[name].shape == expected.shape, name
        np.testing.assert_allclose(found[name], expected, atol=1e-6, rtol=0, err_msg=prefix + name)


def test_both_signatures_give_tensorflows_five_outputs(module_dir):
    module = Module(module_dir)
    assert_outputs(module(SENTENCES, signature="default", as_dict=True), "default/")
    assert_outputs(module(TOKENS_INPUT, signature="tokens", as_dict=True), "tokens0/")
    np.testing.assert_allclose(module(SENTENCES), REFERENCE["default/default"], atol=1e-6, rtol=0)  # as_dict=False
    assert module.get_signature_names() == ["default", "tokens"]
    assert module.get_output_info_dict()["elmo"] == ((None, None, 32), "float32")


def test_padding_is_filled_as_the_graph_fills_it(module_dir):
    """Row 3 has one token in six: word_emb is the CNN of an all-padding token there, LSTM outputs 0."""
    out = Module(module_dir)(TOKENS_INPUT, signature="tokens", as_dict=True)
    assert (out["lstm_outputs1"][3, 1:] == 0).all() and (out["lstm_outputs2"][3, 1:] == 0).all()
    padding = out["word_emb"][3, 1]
    assert np.abs(padding).max() > 0 and (out["word_emb"][3, 1:] == padding).all()
    np.testing.assert_array_equal(out["word_emb"][1, 5], padding)
    weights = np.exp(MIX_FIXTURE[0]) / np.exp(MIX_FIXTURE[0]).sum()
    np.testing.assert_allclose(out["elmo"][3, 1], MIX_FIXTURE[1] * weights[0] * np.concatenate([padding, padding]),
                               atol=1e-6, rtol=0)


def test_the_module_carries_lstm_state_and_stateful_reproduces_it(module_dir):
    """bilm-tf's graph assigns each row's final LSTM state to its variables: a second identical call differs."""
    assert np.abs(REFERENCE["tokens1/elmo"] - REFERENCE["tokens0/elmo"]).max() > 0.1
    stateful = Module(module_dir, stateful=True)
    stateful(SENTENCES)  # the `default` signature keeps its own state, as each signature has its own variables
    for call, (words, lengths) in enumerate([(TOKENS, TOKEN_LENGTHS), (TOKENS, TOKEN_LENGTHS), SECOND_CALL]):
        found = stateful({"tokens": words, "sequence_len": lengths}, signature="tokens", as_dict=True)
        assert_outputs(found, f"tokens{call}/")
    stateful.reset_states()
    assert_outputs(stateful(TOKENS_INPUT, signature="tokens", as_dict=True), "tokens0/")
    stateless = Module(module_dir)
    for _ in range(2):
        assert_outputs(stateless(TOKENS_INPUT, signature="tokens", as_dict=True), "tokens0/")


def test_default_pooled_over_padding_as_versions_1_and_2(module_dir):
    module = Module(module_dir, default_pooling="all")
    assert_outputs(module(SENTENCES, signature="default", as_dict=True), "all_pooling/default/")
    assert_outputs(module(TOKENS_INPUT, signature="tokens", as_dict=True), "all_pooling/tokens0/")


def test_a_module_tar_gz_works_as_it_is(module_dir):
    assert_outputs(Module(ARCHIVE)(SENTENCES, as_dict=True), "default/")


def test_settings_come_from_the_graph(module_dir):
    module = read_hub_module(module_dir)
    options = json.loads((need(ALLENNLP / "options.json")).read_text())
    assert module.options["lstm"] == {**options["lstm"], "cell_clip": 3.0, "proj_clip": 3.0}
    assert module.options["char_cnn"] == options["char_cnn"]
    assert all(source.startswith("graph: ") for source in module.sources.values()), module.sources
    assert module.mix_weights == pytest.approx(MIX_FIXTURE[0]) and module.scaling == pytest.approx(MIX_FIXTURE[1])


def test_skip_connections_off_read_from_the_graph(module_dir):
    """bilm-tf's own fixture's graph (skip connections off) with the same shapes: no ResidualWrapper add."""
    (module_dir / "saved_model.pb").write_bytes(gzip.decompress((DATA / "skip-off.pb.gz").read_bytes()))
    module = read_hub_module(module_dir)
    assert module.options["lstm"]["use_skip_connections"] is False
    assert module.sources["use_skip_connections"].startswith("graph: no add")


def test_a_silent_graph_falls_back_to_the_published_settings(module_dir):
    """A graph that shows none of the settings (one Const node): the published module's, and the record says so."""
    node = b"\n\x01x\x12\x05Const"  # NodeDef {name: "x", op: "Const"}
    graph = b"\n" + bytes([len(node)]) + node
    meta = b"\x12" + bytes([len(graph)]) + graph
    (module_dir / "saved_model.pb").write_bytes(b"\x08\x01\x12" + bytes([len(meta)]) + meta)
    module = read_hub_module(module_dir)
    for key, value in PUBLISHED_SETTINGS.items():
        part = "lstm" if key in ("cell_clip", "proj_clip", "use_skip_connections") else "char_cnn"
        assert module.options[part][key] == value and "google/elmo's known settings" in module.sources[key]


def test_import_writes_the_original_format_and_keeps_the_mix(module_dir, tmp_path):
    from elmo import Elmo, Embedder
    from elmo.cli import main

    out = tmp_path / "imported"
    assert main(["import-tf", str(module_dir), str(out)]) == 0
    weights = need(ALLENNLP / "lm_weights.hdf5")
    import h5py

    with h5py.File(out / "weights.hdf5") as mine, h5py.File(weights) as theirs:
        names = []
        theirs.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in names:
            np.testing.assert_array_equal(mine[name][...], theirs[name][...], err_msg=name)
    mix, scaling = read_mix(out)
    assert mix == pytest.approx(MIX_FIXTURE[0]) and scaling == pytest.approx(MIX_FIXTURE[1])
    assert json.loads((out / MIX_NAME).read_text())["settings_from"]["activation"] == "graph: bilm/CNN/Relu*"
    elmo = Elmo.from_pretrained(str(out), num_output_representations=1, dropout=0.0, scalar_mix_parameters=mix)
    layers = Embedder.from_model(str(out)).embed_sentence(SENTENCES[0].split())
    assert elmo.bilm.config.use_skip_connections and layers.shape == (3, 6, 32)
    assert main(["import-tf", str(module_dir), str(out)]) == 2  # exists: --overwrite
    mix_module = Module(module_dir).scalar_mix()
    assert mix_module.gamma.item() == pytest.approx(MIX_FIXTURE[1])


def test_a_module_is_a_model_everywhere(module_dir, tmp_path):
    import elmo
    from elmo import Embedder
    from elmo.cli import main

    expected = REFERENCE["default/lstm_outputs2"][0, :6]
    for reference in (module_dir, ARCHIVE):
        bilm = elmo.load_model(str(reference))
        vectors = Embedder.from_model(str(reference)).embed_sentence(SENTENCES[0].split())
        np.testing.assert_allclose(vectors[2], expected, atol=1e-6, rtol=0)
        assert bilm.config.projection_dim == 16
    text = tmp_path / "in.txt"
    text.write_text(SENTENCES[0] + "\n")
    assert main(["embed", str(text), str(tmp_path / "out.hdf5"), "--model", str(ARCHIVE)]) == 0
    from elmo.integrations.common import resolve_reference  # flair's and spaCy's door to the resolver
    from elmo.training.finetune import describe_start  # `elmo train --init-from`

    assert resolve_reference(str(ARCHIVE)).original_files().weight_file.is_file()
    assert describe_start(str(module_dir)).reference == str(module_dir)


def test_the_module_folder_is_never_written(module_dir):
    before = {p: p.stat().st_mtime_ns for p in module_dir.rglob("*")}
    Module(module_dir)(SENTENCES)
    assert {p: p.stat().st_mtime_ns for p in module_dir.rglob("*")} == before


def test_write_original_refuses_an_existing_output(module_dir, tmp_path):
    from elmo.errors import ModelFileError

    out = write_original(read_hub_module(module_dir), tmp_path / "o")
    with pytest.raises(ModelFileError, match="--overwrite"):
        write_original(read_hub_module(module_dir), out)
    shutil.rmtree(out)
