"""A drop-in for AllenNLP's `Elmo`: its checkpoints load here and ours load there, and the behaviours
AllenNLP's own ELMo tests check hold here, on the shared fixtures.

Where each behaviour of AllenNLP's tests (v2.10.1 tests/modules/elmo_test.py and scalar_mix_test.py,
v0.9.0 allennlp/tests/commands/elmo_test.py) is tested in this package:

- stateful fixture values of the biLM: test_golden_outputs.py::test_stateful_top_layer_matches_original
- vocabulary cache equals the char CNN: test_golden_outputs.py::test_elmo_vocab_cache_matches_token_embeddings,
  and here with uncached words and with 4-D inputs
- Elmo output shapes, keep_sentence_boundaries, module=, 4-D input, requires_grad: here and test_elmo.py
- token layer against dump_token_embeddings: test_golden_outputs.py::test_token_layer_matches_dump_token_embeddings;
  the <S>/</S> vectors: here
- ScalarMix: test_scalar_mix.py
- v0.9.0 allennlp/tests/modules/elmo_test.py::test_elmo_bilm_can_cache_char_cnn_embeddings: ported here, its
  assertions unchanged (AllenNLP's `_ElmoBiLm` is `Elmo.bilm_outputs`; its vocabulary and indexers as they build them)
- the 0.9 command and ElmoEmbedder: here, test_embed_file.py, test_allennlp09_embedder.py,
  test_golden_outputs.py::test_elmo_embed_command_stateful_matches_fixture

The state_dict fixture (tests/fixtures/allennlp_state_dict) was saved by AllenNLP 2.10.1 itself;
`scripts/check_allennlp_state_dict.py` checks the other direction in AllenNLP's own venv.
"""

import json
import logging
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import assert_word_cache_matches, word_ids
from torch import nn

from elmo import Elmo, ElmoEmbedder, batch_to_ids, load_bilm, remove_sentence_boundaries
from elmo.cli import main as cli_main
from elmo.models import resolve

STATE = Path(__file__).resolve().parent / "fixtures" / "allennlp_state_dict"
MIXES = [([0.3, -1.0, 2.0], 1.7), ([-2.0, 1.0, 0.5], 0.4)]  # as make_fixture.py set them
TWO = [["The", "sentence", "."], ["ELMo", "helps", "disambiguate", "ELMo", "from", "Elmo", "."]]


@pytest.fixture(scope="module")
def allennlp_state() -> dict:
    return torch.load(STATE / "elmo_state_dict.pt", weights_only=True)


@pytest.fixture(scope="module")
def allennlp_outputs() -> tuple[list[list[str]], dict]:
    batch = json.loads((STATE / "batch.json").read_text())
    with np.load(STATE / "outputs.npz") as f:
        return batch, {k: f[k] for k in f.files}


@pytest.fixture
def files(allennlp_dir):
    return allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5"


def fresh_elmo(options, n: int = 2, **kwargs) -> Elmo:
    """An `Elmo` with random weights: everything it computes must come from the loaded state_dict."""
    torch.manual_seed(0)
    return Elmo(options, None, n, dropout=0.0, **kwargs)


def assert_reproduces(elmo: Elmo, allennlp_outputs) -> None:
    batch, expected = allennlp_outputs
    elmo.eval()
    with torch.no_grad():
        out = elmo(batch_to_ids(batch))
    assert torch.equal(out["mask"], torch.from_numpy(expected["mask"]))
    for k, rep in enumerate(out["elmo_representations"]):
        # The fixtures' criterion, numpy.allclose(atol=1e-6): the two implementations round differently
        # in float32 (max |diff| 9.5e-7 here with torch's default threads, 1.2e-6 with one thread).
        np.testing.assert_allclose(rep.numpy(), expected[f"representation_{k}"], atol=1e-6, rtol=1e-5)


# --- state_dicts -------------------------------------------------------------------------------

def test_allennlp_state_dict_loads_strictly_and_gives_allennlps_outputs(files, allennlp_state, allennlp_outputs):
    elmo = fresh_elmo(files[0])
    assert str(elmo.load_state_dict(allennlp_state, strict=True)) == "<All keys matched successfully>"
    assert [p.item() for p in elmo.scalar_mixes[1].scalar_parameters] == MIXES[1][0]
    assert_reproduces(elmo, allennlp_outputs)


def test_own_state_dict_has_allennlps_keys_order_and_values(files, allennlp_state):
    elmo = Elmo(*files, 2, dropout=0.0)
    with torch.no_grad():
        for mix, (weights, gamma) in zip(elmo.scalar_mixes, MIXES):
            for p, value in zip(mix.scalar_parameters, weights):
                p.fill_(value)
            mix.gamma.fill_(gamma)
    ours = elmo.state_dict()
    assert list(ours) == list(allennlp_state) and len(ours) == 41
    for key, value in allennlp_state.items():
        assert ours[key].shape == value.shape, key
        assert torch.equal(ours[key], value), key  # the same file read by both: the same bits


def test_state_dict_round_trip_keeps_the_model(files, allennlp_state, allennlp_outputs):
    first = fresh_elmo(files[0])
    first.load_state_dict(allennlp_state)
    second = fresh_elmo(files[0])
    second.load_state_dict(first.state_dict(), strict=True)
    for (name, a), (_, b) in zip(first.named_parameters(), second.named_parameters()):
        assert torch.equal(a, b), name
    again = second.state_dict()
    for key, value in allennlp_state.items():
        # AllenNLP folds the forget bias +1 into the bias; unfolding it is one float32 subtraction
        torch.testing.assert_close(again[key], value, atol=1e-7 if key.endswith("state_linearity.bias") else 0, rtol=0)
    assert_reproduces(second, allennlp_outputs)


class Tagger(nn.Module):
    """A task model as AllenNLP users write them: ELMo inside, under `self.elmo`."""

    def __init__(self, options):
        super().__init__()
        self.elmo = fresh_elmo(options)
        self.tags = nn.Linear(32, 5)

    def forward(self, ids):
        return self.tags(self.elmo(ids)["elmo_representations"][0])


def test_a_model_holding_elmo_loads_and_saves_allennlps_keys(files, allennlp_state, allennlp_outputs):
    checkpoint = {f"elmo.{k}": v for k, v in allennlp_state.items()}
    checkpoint.update({"tags.weight": torch.full((5, 32), 0.01), "tags.bias": torch.zeros(5)})
    tagger = Tagger(files[0])
    tagger.load_state_dict(checkpoint, strict=True)
    assert_reproduces(tagger.elmo, allennlp_outputs)
    saved = tagger.state_dict()
    assert list(saved) == list(checkpoint)
    Tagger(files[0]).load_state_dict(saved, strict=True)


def test_state_dicts_of_the_earlier_layout_still_load(files, allennlp_state, allennlp_outputs):
    """Before AllenNLP's layout: the biLM's own keys, mixes under `_scalar_mixes.k` with one (N,) tensor."""
    source = fresh_elmo(files[0])
    source.load_state_dict(allennlp_state)
    old = {f"_elmo_lstm.{k}": v for k, v in source.bilm.state_dict().items()}
    for k, mix in enumerate(source.scalar_mixes):
        old[f"_scalar_mixes.{k}.scalar_parameters"] = mix.raw_weights().detach()
        old[f"_scalar_mixes.{k}.gamma"] = mix.gamma.detach()
    elmo = fresh_elmo(files[0])
    elmo.load_state_dict(old, strict=True)
    assert_reproduces(elmo, allennlp_outputs)


def test_a_state_dict_of_another_model_names_allennlps_key_and_both_shapes(allennlp_state):
    other = fresh_elmo(resolve("default").original_files().options_file)
    with pytest.raises(RuntimeError, match=r"size mismatch for _elmo_lstm\._token_embedder\._char_embedding_weights: "
                                           r"copying a param with shape \(262, 4\)"):
        other.load_state_dict(allennlp_state)


def test_vocabulary_cache_is_allennlps_word_embedding(files):
    words = ["@@PADDING@@", "here", "is", "a", "vocab"]
    elmo = Elmo(*files, 1, dropout=0.0, vocab_to_cache=words)
    state = elmo.state_dict()
    assert state["_elmo_lstm._word_embedding.weight"].shape == (len(words), 16)
    again = fresh_elmo(files[0], 1, vocab_to_cache=["x"] * len(words))
    again.load_state_dict(state, strict=True)
    assert torch.equal(again.state_dict()["_elmo_lstm._word_embedding.weight"], state["_elmo_lstm._word_embedding.weight"])


# --- the behaviours AllenNLP's Elmo tests check --------------------------------------------------

def test_words_beyond_the_cache_fall_back_to_the_char_cnn(files):
    vocab = ["@@PADDING@@", "here", "is"]  # cached; "This", "OOV", "so", "this" get ids beyond it
    index = {w: i for i, w in enumerate(vocab + ["This", "OOV", "so", "this"])}
    sentences = [["This", "is", "OOV"], ["so", "is", "this", "here"]]
    elmo = Elmo(*files, 1, dropout=0.0, vocab_to_cache=vocab)
    ids = assert_word_cache_matches(elmo, sentences, index)
    with pytest.raises(ValueError, match="beyond the 3 cached ones, which need their character ids"):
        elmo(ids[:, :1], word_ids(sentences, index))


def test_cache_with_four_dimensional_inputs_equals_each_slice(files):
    sentences = [["This", "is", "a", "sentence"], ["Here", "'s", "one"], ["Another", "one"]]
    vocab = ["@@PADDING@@"] + sorted({w for s in sentences for w in s})
    elmo = Elmo(*files, 1, dropout=0.0, vocab_to_cache=vocab).eval()
    ids, words = batch_to_ids(sentences), word_ids(sentences, {w: i for i, w in enumerate(vocab)})
    with torch.no_grad():
        single = elmo(ids, words)["elmo_representations"][0]
        stacked = elmo(torch.stack([ids] * 4, dim=1), torch.stack([words] * 4, dim=1))
    assert stacked["elmo_representations"][0].shape == (3, 4, 4, 32) and stacked["mask"].shape == (3, 4, 4)
    for k in range(4):
        torch.testing.assert_close(stacked["elmo_representations"][0][:, k], single, atol=1e-6, rtol=0)


def test_two_representations_with_and_without_sentence_boundaries(files):
    ids = batch_to_ids(TWO)
    plain = Elmo(*files, 2, dropout=0.0)(ids)
    kept = Elmo(*files, 2, dropout=0.0, keep_sentence_boundaries=True)(ids)
    assert [tuple(r.shape) for r in plain["elmo_representations"]] == [(2, 7, 32)] * 2
    assert [tuple(r.shape) for r in kept["elmo_representations"]] == [(2, 9, 32)] * 2
    assert kept["mask"].sum(1).tolist() == [5, 9] and plain["mask"].sum(1).tolist() == [3, 7]
    for a, b in zip(plain["elmo_representations"], kept["elmo_representations"]):
        torch.testing.assert_close(a, remove_sentence_boundaries(b, kept["mask"])[0])


def test_a_given_bilm_module_replaces_the_files(files):
    ids = batch_to_ids(TWO)
    given = Elmo(None, None, 2, dropout=0.0, module=load_bilm(*files))(ids)
    loaded = Elmo(*files, 2, dropout=0.0)(ids)
    for a, b in zip(given["elmo_representations"], loaded["elmo_representations"]):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


class DictBiLM(nn.Module):
    """A module with AllenNLP's contract for `Elmo(module=...)`: a dict of activations and mask."""

    def __init__(self, bilm):
        super().__init__()
        self.bilm, self.num_layers = bilm, bilm.num_layers

    def forward(self, inputs, word_inputs=None):
        out = self.bilm(inputs)
        return {"activations": out.layers, "mask": out.mask}

    def get_output_dim(self):
        return self.bilm.output_dim()


def test_a_module_with_allennlps_contract_works_too(files):
    ids = batch_to_ids(TWO)
    elmo = Elmo(None, None, 2, dropout=0.0, module=DictBiLM(load_bilm(*files)))
    given = elmo(ids)
    loaded = Elmo(*files, 2, dropout=0.0)(ids)
    assert elmo.get_output_dim() == 32
    for a, b in zip(given["elmo_representations"], loaded["elmo_representations"]):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("requires_grad", [True, False])
def test_random_char_ids_reach_the_bilm_weights_only_when_asked(files, requires_grad):
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, 262, (3, 4, 50)))
    elmo = Elmo(*files, 1, requires_grad=requires_grad)
    elmo(ids)["elmo_representations"][0].sum().backward()
    grads = [p.grad for p in elmo.bilm.parameters()]
    assert all(g is not None for g in grads) if requires_grad else all(g is None for g in grads)


def test_sentence_marker_tokens_match_the_added_markers(files):
    """"<S>" and "</S>" as tokens get the markers' character ids, so the same token vector (up to
    float32 rounding: the markers are encoded in a separate call, about 2e-8 apart)."""
    bilm = load_bilm(*files)
    with torch.no_grad():
        out = bilm(batch_to_ids([["<S>", "</S>"]]))
    layer0 = out.layers[0][0]
    torch.testing.assert_close(layer0[1], layer0[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(layer0[2], layer0[3], atol=1e-6, rtol=0)


# --- v0.9.0 allennlp/tests/modules/elmo_test.py, ported -------------------------------------------

class _ElmoBiLm(Elmo):
    """AllenNLP's `_ElmoBiLm` as its tests build and call it: every layer with the markers, {'activations', 'mask'}."""

    def __init__(self, options_file, weight_file, vocab_to_cache=None):
        super().__init__(options_file, weight_file, 0, dropout=0.0, vocab_to_cache=vocab_to_cache, stateful=True)

    def forward(self, inputs, word_inputs=None):
        return self.bilm_outputs(inputs, word_inputs)


class _Vocabulary:
    """AllenNLP's `Vocabulary.from_instances` for one "tokens" namespace: padding, unknown, then the words by count
    (a stable sort: ties in the order first seen)."""

    def __init__(self, batch):
        counts = Counter(token for sentence in batch for token in sentence)
        self.tokens = ["@@PADDING@@", "@@UNKNOWN@@"] + [w for w, _ in sorted(counts.items(), key=lambda x: x[1],
                                                                              reverse=True)]

    def get_token_to_index_vocabulary(self, namespace):
        return {token: i for i, token in enumerate(self.tokens)}


class ElmoTestCase:
    """The fixture paths and helper of AllenNLP's ElmoTestCase, on ../shared's copy of its elmo fixtures."""

    def __init__(self, fixtures: Path):
        self.options_file = str(fixtures / "options.json")
        self.weight_file = str(fixtures / "lm_weights.hdf5")

    @staticmethod
    def get_vocab_and_both_elmo_indexed_ids(batch):
        """ELMoTokenCharactersIndexer's ids and SingleIdTokenIndexer's (padded with 0) of a batch, and its vocabulary."""
        vocab = _Vocabulary(batch)
        index = vocab.get_token_to_index_vocabulary("tokens")
        return vocab, {"character_ids": batch_to_ids(batch), "tokens": word_ids(batch, index)}

    def test_elmo_bilm_can_cache_char_cnn_embeddings(self):
        sentences = [["This", "is", "a", "sentence"],
                     ["Here", "'s", "one"],
                     ["Another", "one"]]
        vocab, tensor = self.get_vocab_and_both_elmo_indexed_ids(sentences)
        words_to_cache = list(vocab.get_token_to_index_vocabulary("tokens").keys())
        elmo_bilm = _ElmoBiLm(self.options_file, self.weight_file)
        elmo_bilm.eval()
        no_cache = elmo_bilm(tensor["character_ids"], tensor["character_ids"])

        # ELMo is stateful, so we need to actually re-initialise it for this comparison to work.
        elmo_bilm = _ElmoBiLm(self.options_file, self.weight_file, vocab_to_cache=words_to_cache)
        elmo_bilm.eval()
        cached = elmo_bilm(tensor["character_ids"], tensor["tokens"])

        np.testing.assert_array_almost_equal(no_cache["mask"].data.cpu().numpy(),
                                             cached["mask"].data.cpu().numpy())
        for activation_cached, activation in zip(cached["activations"], no_cache["activations"]):
            np.testing.assert_array_almost_equal(activation_cached.data.cpu().numpy(),
                                                 activation.data.cpu().numpy(), decimal=6)


def test_elmo_bilm_can_cache_char_cnn_embeddings(allennlp_dir, caplog):
    """AllenNLP's test passes the char ids as word ids to a model without a cache: ignored, with AllenNLP's warning."""
    with caplog.at_level(logging.WARNING, logger="elmo.allennlp.elmo_module"):
        ElmoTestCase(allennlp_dir).test_elmo_bilm_can_cache_char_cnn_embeddings()
    assert [r.getMessage() for r in caplog.records] == ["Word inputs were passed to ELMo but it does not have a "
                                                        "cached vocab."]


def test_word_ids_without_a_cache_are_ignored_and_checked_where_used(files, caplog):
    ids = batch_to_ids(TWO)
    plain = Elmo(*files, 1, dropout=0.0)
    with caplog.at_level(logging.WARNING, logger="elmo.allennlp.elmo_module"):
        ignored = plain(ids, "not even a tensor")["elmo_representations"][0]
    assert len(caplog.records) == 1
    torch.testing.assert_close(ignored, plain(ids)["elmo_representations"][0], atol=0, rtol=0)
    cached = Elmo(*files, 1, dropout=0.0, vocab_to_cache=["@@PADDING@@", "The"])
    with pytest.raises(ValueError, match=r"shape \(batch, tokens\) for inputs of shape \(2, 7, 50\), found \(2, 7, 50\)"):
        cached(ids, ids)
    with pytest.raises(ValueError, match="word_inputs hold word id -1; ids are 0"):
        cached(ids, -torch.ones(2, 7, dtype=torch.long))


# --- AllenNLP 0.9: ElmoEmbedder and the `allennlp elmo` command ---------------------------------

def test_embedder_handles_empty_sentences(files):
    embedder = ElmoEmbedder(*files)
    assert embedder.embed_sentence([]).shape == (3, 0, 32)  # 0.9 hard-coded (3, 0, 1024)
    got = list(embedder.embed_sentences([["This", "is", "a", "test"], []]))
    assert [a.shape for a in got] == [(3, 4, 32), (3, 0, 32)]


def test_stateful_embedder_reproduces_the_fixture_in_batches_of_three(files, allennlp_dir, fixture_sentences):
    lines = [fixture_sentences[k][i].split() for i in range(10) for k in range(3)]
    arrays = list(ElmoEmbedder(*files, stateful=True).embed_sentences(lines, batch_size=3))
    for line, arr in enumerate(arrays):
        i, k = divmod(line, 3)
        with h5py.File(allennlp_dir / f"lm_embeddings_{k}.hdf5", "r") as f:
            expected = np.concatenate(f[str(i)][()], axis=-1)
        np.testing.assert_allclose(arr[2], expected, atol=1e-6, rtol=1e-5)


SENTENCE = "Michael went to the store to buy some eggs ."


@pytest.mark.parametrize("flag", ["--all", "--top", "--average"])
def test_embed_command_output_formats_match_the_embedder(tmp_path, files, flag):
    src, out = tmp_path / "in.txt", tmp_path / "out.hdf5"
    src.write_text(SENTENCE, encoding="utf-8")
    assert cli_main(["embed", str(src), str(out), flag, "--options", str(files[0]), "--weights", str(files[1])]) == 0
    full = ElmoEmbedder(*files).embed_sentence(SENTENCE.split())
    expected = {"--all": full, "--top": full[2], "--average": full.mean(axis=0)}[flag]
    with h5py.File(out, "r") as f:
        assert set(f) == {"0", "sentence_to_index"}
        np.testing.assert_allclose(f["0"][()], expected, atol=1e-6, rtol=0)
        assert json.loads(f["sentence_to_index"][0]) == {SENTENCE: "0"}


@pytest.mark.parametrize("extra, keys", [
    ([], ["0", "1", "2", "sentence_to_index"]),
    (["--forget-sentences"], ["0", "1", "2"]),
])
def test_embed_command_batches_duplicates_and_forgetting(tmp_path, files, extra, keys):
    lines = [SENTENCE, "Joel rolled down the street on his skateboard .", SENTENCE]
    src, out = tmp_path / "in.txt", tmp_path / "out.hdf5"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli_main(["embed", str(src), str(out), "--all", "--options", str(files[0]), "--weights", str(files[1]),
                     *extra]) == 0
    with h5py.File(out, "r") as f:
        assert sorted(f) == keys
        assert [f[str(i)].shape for i in range(3)] == [(3, len(s.split()), 32) for s in lines]
    sentence_keys = tmp_path / "keys.hdf5"
    src.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    assert cli_main(["embed", str(src), str(sentence_keys), "--all", "--options", str(files[0]),
                     "--weights", str(files[1]), "--use-sentence-keys"]) == 0
    with h5py.File(sentence_keys, "r") as f:
        assert set(f) == set(lines[:2])


def test_embed_command_writes_empty_lines_as_empty_datasets(tmp_path, files):
    """0.9 refused blank lines (ConfigurationError); here they give (3, 0, D) datasets."""
    src, out = tmp_path / "in.txt", tmp_path / "out.hdf5"
    src.write_text("A\n\n\nB\n", encoding="utf-8")
    assert cli_main(["embed", str(src), str(out), "--all", "--options", str(files[0]), "--weights", str(files[1])]) == 0
    with h5py.File(out, "r") as f:
        assert [f[str(i)].shape for i in range(4)] == [(3, 1, 32), (3, 0, 32), (3, 0, 32), (3, 1, 32)]
