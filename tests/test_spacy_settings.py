"""spaCy settings checked where they enter (the component's fixed mix finite, the layer's width against memory
before anything is allocated, model references of the wrong type named), the `threads` setting of the component
and the layer, and the biLM saved in the precision it was loaded in (the bundled model: float16, exactly the same
vectors after reload)."""

from __future__ import annotations

import io
import re

import h5py
import numpy as np
import pytest
import torch

spacy = pytest.importorskip("spacy", reason="needs spaCy v3 (pip install 'elmo-bilm[spacy]')")
from spacy.tokens import Doc  # noqa: E402

from elmo.errors import InputError, ModelFileError  # noqa: E402
from elmo.integrations import common  # noqa: E402
from elmo.integrations.spacy import ELMoComponent  # noqa: E402
from elmo.integrations.spacy_files import bilm_files, holds_float16, unpack_files  # noqa: E402
from elmo.integrations.spacy_layers import elmo_embed, elmo_mix  # noqa: E402
from elmo.model.threads import usable_cpus  # noqa: E402

WORDS = ["The", "bank", "raised", "rates", "."]


def blank(config: dict):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=config)
    return nlp


@pytest.mark.parametrize("layers, says", [
    ([1e39, 1, 1], "found 1e+39"),  # infinite in float32: NaN vectors before
    ([float("nan"), 1, 1], "found nan"),
    ([10**400, 1, 1], "within"),  # float() of it overflows: refused before it is converted
    ([True, 1, 1], "found True"),
    (["1", 1, 1], "found '1'"),
    ([], "list of weights"),
    (5, "found int 5"),
])
def test_a_fixed_mix_must_be_finite_numbers(relative_model_dir, layers, says):
    with pytest.raises(InputError, match=f"elmo component: layers.*{re.escape(says)}"):
        ELMoComponent(model=relative_model_dir, layers=layers)


def test_a_large_but_allowed_mix_gives_finite_vectors(relative_model_dir, one_thread):
    doc = blank({"model": relative_model_dir, "layers": [1e6, -1e6, 1]})(" ".join(WORDS))
    assert np.isfinite(doc.tensor).all() and doc.tensor.shape == (5, 32)


def test_a_width_too_big_for_memory_is_refused_before_allocation(relative_model_dir, one_thread):
    model = elmo_embed(2**26, relative_model_dir, dropout=0.0, cache_mb=0)
    with pytest.raises(InputError, match=r"width 67,108,864 makes an output layer of 67,108,864 x 3 x 32 weights, "
                                         r"[\d,.]+ GiB in training .* more than this machine's"):
        model.initialize(X=[Doc(spacy.blank("en").vocab, words=WORDS)])
    small = elmo_embed(8, relative_model_dir, dropout=0.0, cache_mb=0)
    small.initialize(X=[Doc(spacy.blank("en").vocab, words=WORDS)])  # an ordinary width still initializes
    assert small.predict([Doc(spacy.blank("en").vocab, words=WORDS)])[0].shape == (5, 8)


@pytest.mark.parametrize("model, found", [(None, "found NoneType None"), (123, "found int 123"), ("", "found ''"),
                                          ("  ", "found '  '")])
def test_model_references_of_the_wrong_type_are_named(model, found):
    with pytest.raises(InputError, match=f"elmo component: model must be a model reference .*; {found}"):
        ELMoComponent(model=model)
    with pytest.raises(InputError, match="elmo.ELMoEmbed.v1: model must be a model reference"):
        elmo_mix(model)


def test_an_unknown_name_is_printed_with_its_control_characters_escaped():
    with pytest.raises(ModelFileError) as caught:
        blank({"model": "bad\x00\x1b[31m\nname"})("a")
    message = str(caught.value)
    assert "bad\\x00\\x1b[31m\\nname: unknown ELMo model; known names: default" in message
    assert not any(c in message for c in "\x00\x1b\n")


@pytest.mark.parametrize("threads", [0, -1, True, "2", 1.5])
def test_threads_must_be_a_positive_whole_number(relative_model_dir, threads):
    with pytest.raises(InputError, match="elmo component: threads"):  # spaCy's config refuses the wrong types first
        ELMoComponent(model=relative_model_dir, threads=threads)
    with pytest.raises(InputError, match="elmo.ELMoEmbed.v1: threads"):
        elmo_mix(relative_model_dir, threads=threads)


def test_threads_from_a_config_are_checked(relative_model_dir):
    with pytest.raises(InputError, match="elmo component: threads 0: expected a positive whole number"):
        blank({"model": relative_model_dir, "threads": 0})


def test_threads_set_torchs_pool_within_the_cpus_the_process_may_use(relative_model_dir, monkeypatch, one_thread):
    assert blank({"model": relative_model_dir}).get_pipe("elmo").threads == 1  # the measured default
    monkeypatch.setattr(common, "usable_cpus", lambda: 2)
    blank({"model": relative_model_dir, "threads": 64})("a b")
    assert torch.get_num_threads() == 2  # never more than the process may use
    blank({"model": relative_model_dir, "threads": None})("a b")
    assert torch.get_num_threads() == 2  # null: all of them
    mix = elmo_mix(relative_model_dir, dropout=0.0, cache_mb=0, threads=1)
    mix.initialize()
    mix.predict([Doc(spacy.blank("en").vocab, words=WORDS)])
    assert torch.get_num_threads() == 1
    assert usable_cpus() >= 1


def test_the_bundled_model_is_saved_as_float16_and_reloads_to_the_same_vectors(tmp_path, one_thread):
    """The bundled model ships float16 weights: the saved pipeline carries them so (10.9 MB, not 21.7 MB)."""
    nlp = blank({"model": "default"})
    before = nlp(" ".join(WORDS))._.elmo
    assert holds_float16(nlp.get_pipe("elmo").bilm)
    nlp.to_disk(tmp_path / "pipeline")
    weights = tmp_path / "pipeline" / "elmo" / "weights.hdf5"
    with h5py.File(weights, "r") as f:
        assert {f[name].dtype for name in _datasets(f)} == {np.dtype("float16")}
    assert weights.stat().st_size < 11.5e6
    after = spacy.load(tmp_path / "pipeline")(" ".join(WORDS))._.elmo
    np.testing.assert_array_equal(after, before)
    files = unpack_files(nlp.get_pipe("elmo").to_bytes(), "test")  # the layer's attrs and to_bytes alike
    assert len(files["weights.hdf5"]) < 11.5e6


def test_a_float32_model_stays_float32(relative_model_dir, one_thread):
    component = ELMoComponent(model=relative_model_dir)
    assert not holds_float16(component.bilm)
    files = bilm_files(component.bilm, "test")
    with h5py.File(io.BytesIO(files["weights.hdf5"]), "r") as f:
        assert {f[name].dtype for name in _datasets(f)} == {np.dtype("float32")}


def _datasets(f: h5py.File) -> list[str]:
    names: list[str] = []
    f.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    return names


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_the_process_affinity_bounds_the_threads(relative_model_dir, one_thread):
    """Not the machine's count: a process allowed one CPU (taskset) runs the biLM on one thread, whatever is asked."""
    import os

    allowed = os.sched_getaffinity(0)
    nlp = blank({"model": relative_model_dir, "threads": None})
    try:
        os.sched_setaffinity(0, {min(allowed)})
        nlp("a b")
        assert torch.get_num_threads() == 1
    finally:
        os.sched_setaffinity(0, allowed)
