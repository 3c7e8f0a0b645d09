"""flair: two modes of one model on one Sentence are two embeddings (each was named "elmo-MODEL" and the second
was skipped); a saved tagger's ELMo record is checked field by field before anything is built from it, so a
record that says char_rows 10**9 is one ModelFileError, not 64 GB (issue #66 class 6)."""

from __future__ import annotations

import dataclasses
import resource

import pytest
import torch

flair = pytest.importorskip("flair", reason="needs flair (pip install 'elmo-bilm[flair]')")
from flair.data import Sentence  # noqa: E402

import elmo  # noqa: E402
from elmo.errors import ModelFileError  # noqa: E402
from elmo.integrations.flair import ELMoEmbeddings, SavedELMo  # noqa: E402


@pytest.fixture(scope="module")
def fixture_files(allennlp_dir):
    return str(allennlp_dir / "options.json"), str(allennlp_dir / "lm_weights.hdf5")


def test_two_modes_of_one_model_on_one_sentence_are_two_embeddings(fixture_files, one_thread):
    both = [ELMoEmbeddings(options_file=fixture_files[0], weight_file=fixture_files[1], embedding_mode=mode)
            for mode in ("all", "top")]
    assert both[0].name != both[1].name and both[0].name.endswith("-all") and both[1].name.endswith("-top")
    sentence = Sentence("The bank raised rates .")
    for embedding in both:
        embedding.embed(sentence)
    layers = next(elmo.Embedder.from_files(*fixture_files).embed_sentences([[t.text for t in sentence]]))  # (3, n, 32)
    token = sentence[1]
    assert token.get_embedding([both[1].name]).shape == (32,)  # was 96: the "all" vectors under the shared name
    torch.testing.assert_close(token.get_embedding([both[1].name]).cpu(), torch.from_numpy(layers[-1, 1]),
                               atol=1e-6, rtol=0)
    assert token.get_embedding().shape == (96 + 32,)


def saved_record(fixture_files) -> SavedELMo:
    return ELMoEmbeddings(options_file=fixture_files[0], weight_file=fixture_files[1]).to_params()["saved"]


BAD_FIELDS = [
    ("char_rows", 10**8), ("char_rows", 10**9), ("char_rows", -5), ("char_rows", True), ("char_rows", "262"),
    ("char_rows", 262.0), ("embedding_mode", "mean"), ("save", "pickle"), ("options", [1]), ("fingerprint", "x"),
    ("name", ""), ("files", ("a",)), ("model", 3),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS)
def test_every_field_of_a_saved_record_is_checked_before_anything_is_built(fixture_files, field, value):
    """from_params is what flair's SequenceTagger.load calls with the unpickled record."""
    tampered = dataclasses.replace(saved_record(fixture_files), **{field: value})
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ModelFileError, match=f"{field} must be") as caught:
        ELMoEmbeddings.from_params({"saved": tampered})
    assert "\n" not in str(caught.value) and "saved flair model" in str(caught.value)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 200 * 1024  # KiB: nothing allocated


def test_a_record_that_is_not_a_record_is_refused():
    for params in ({"saved": {"char_rows": 262}}, {}, None):
        with pytest.raises(ModelFileError, match="expected a SavedELMo"):
            ELMoEmbeddings.from_params(params)


def test_options_in_the_record_are_checked_as_options_json_is(fixture_files):
    record = saved_record(fixture_files)
    options = {**record.options, "lstm": {**record.options["lstm"], "n_layers": -2}}
    with pytest.raises(ModelFileError, match="n_layers"):
        ELMoEmbeddings.from_params({"saved": dataclasses.replace(record, options=options)})


def test_a_good_record_still_loads(fixture_files, one_thread):
    loaded = ELMoEmbeddings.from_params({"saved": saved_record(fixture_files)})
    assert loaded.embedding_length == 96


def test_two_models_in_folders_of_one_name_are_two_embeddings(tmp_path, fixture_files, one_thread):
    """Named by the weights' fingerprint: the second model was skipped on a shared Sentence (one name)."""
    import shutil

    import h5py

    folders = [tmp_path / "a" / "model", tmp_path / "b" / "model"]
    for folder in folders:
        folder.mkdir(parents=True)
        shutil.copy(fixture_files[0], folder / "options.json")
        shutil.copy(fixture_files[1], folder / "weights.hdf5")
    with h5py.File(folders[1] / "weights.hdf5", "r+") as f:
        f["CNN_proj/W_proj"][...] *= 1.5  # another model: the same architecture, other weights
    both = [ELMoEmbeddings(str(folder), embedding_mode="top") for folder in folders]
    assert both[0].name != both[1].name
    assert both[0].name == f"elmo-model-{both[0].fingerprint[:12]}-top"
    sentence = Sentence("The bank raised rates .")
    for embedding in both:
        embedding.embed(sentence)
    first, second = (sentence[1].get_embedding([e.name]) for e in both)
    assert first.shape == second.shape == (32,) and not torch.equal(first, second)  # both set, each its own
    assert ELMoEmbeddings(str(folders[0]), embedding_mode="top").name == both[0].name  # the same model: one name


@pytest.mark.parametrize("kwargs, says", [
    ({"model": None}, "ELMoEmbeddings: model must be a model reference .*; found NoneType None"),
    ({"model": 123}, "found int 123"),
    ({"model": ""}, "found ''"),
    ({"model": b"default"}, "found bytes b'default'"),
    ({"options_file": 1, "weight_file": "w"}, "options_file must be a path .*; found int 1"),
    ({"threads": 0}, "ELMoEmbeddings: threads 0: expected a positive whole number"),
    ({"threads": "2"}, "threads '2'"),
])
def test_constructor_arguments_of_the_wrong_type_are_named(kwargs, says):
    from elmo.errors import InputError

    with pytest.raises(InputError, match=says):
        ELMoEmbeddings(**kwargs)


def test_an_unknown_name_is_printed_with_its_control_characters_escaped():
    with pytest.raises(ModelFileError) as caught:
        ELMoEmbeddings("bad\x00\x1b[31m\nname")
    message = str(caught.value)
    assert message.startswith("bad\\x00\\x1b[31m\\nname: unknown ELMo model; known names: default")
    assert not any(c in message for c in "\x00\x1b\n")


def test_every_elmo_error_escapes_control_characters():
    from elmo.errors import InputError, OutputError

    assert str(InputError("a\x00b\x1bc\nd\re\tf\x7fg\x9bh")) == "a\\x00b\\x1bc\\nd\\re\tf\\x7fg\\x9bh"  # tab kept
    assert str(OutputError(28, "No space left\n", "out\x00")) == "[Errno 28] No space left\\n: 'out\\x00'"


def test_threads_set_torchs_pool(fixture_files, monkeypatch, one_thread):
    from elmo.integrations import common

    embedding = ELMoEmbeddings(options_file=fixture_files[0], weight_file=fixture_files[1])
    assert embedding.threads == 1  # the measured default
    monkeypatch.setattr(common, "usable_cpus", lambda: 2)
    embedding.threads = 8
    embedding.embed(Sentence("a b"))
    assert torch.get_num_threads() == 2  # never more than the process may use
