"""`elmo export-onnx`: the ONNX graph run by ONNX Runtime (CPU) against the `Embedder`, every layer, on the
fixtures, ManyLangs models, odd random architectures and the `original` shapes; int8 by its cosine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ALLENNLP, BILM_TF, make_config, need

from elmo import BiLMConfig, Embedder
from elmo.cli import main
from elmo.errors import InputError
from elmo.formats.onnx_export import export_onnx
from elmo.model.bilm import BiLM
from elmo.model.int8 import token_cosines

ort = pytest.importorskip("onnxruntime", reason="the onnx extra: pip install 'elmo-bilm[onnx]'")
pytest.importorskip("onnx", reason="the onnx extra: pip install 'elmo-bilm[onnx]'")

MANYLANGS = Path(__file__).parent / "fixtures" / "manylangs"
SENTENCES = [
    "The bank raised interest rates .".split(),
    "We sat on the bank of the river and watched the water for a long while".split(),
    ["a•", "ünïcödé", "x" * 70, "日本語"],
    ["one"],
]
SCALED_TOLERANCE = 1e-5  # of the largest magnitude in the reference layers


def session(path: Path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_layers(path: Path, embedder: Embedder, sentences: list[list[str]]) -> list[np.ndarray]:
    """Each sentence's (L+1, n, D) from the graph, run as one padded batch; checks the mask and padding."""
    ids = embedder.bilm.batch_to_ids(sentences).numpy()
    layers, mask = session(path).run(None, {"char_ids": ids})
    assert layers.shape == (len(sentences), embedder.bilm.num_layers, ids.shape[1], embedder.bilm.output_dim())
    assert mask.dtype == np.bool_ and mask.sum(1).tolist() == [len(s) for s in sentences]
    assert not layers[~mask.astype(bool)[:, None, :].repeat(layers.shape[1], 1)].any()  # zeros at padding
    return [layers[b, :, : len(s)] for b, s in enumerate(sentences)]


def assert_matches_embedder(embedder: Embedder, path: Path, sentences: list[list[str]]) -> None:
    want = embedder.embed_batch(sentences)
    got = onnx_layers(path, embedder, sentences)
    scale = max(float(np.abs(w).max(initial=0.0)) for w in want)
    worst = max(float(np.abs(g - w).max(initial=0.0)) for g, w in zip(got, want))
    assert worst <= SCALED_TOLERANCE * scale, (worst, scale)


def exported(bilm: BiLM, tmp_path: Path, name: str = "model.onnx", int8: bool = False) -> Path:
    export_onnx(bilm, tmp_path / name, int8=int8)
    return tmp_path / name


@pytest.mark.parametrize("fixture", [ALLENNLP, BILM_TF], ids=["allennlp_skip_on", "bilm_tf_skip_off"])
def test_fixture_models(fixture, tmp_path, one_thread):
    d = need(fixture)
    embedder = Embedder.from_files(d / "options.json", d / "lm_weights.hdf5")
    path = exported(embedder.bilm, tmp_path)
    sentences = [s.split() if isinstance(s, str) else s for s in json.loads((ALLENNLP / "sentences.json").read_text())[0]]
    assert_matches_embedder(embedder, path, SENTENCES + sentences)


def random_bilm(**overrides) -> BiLM:
    torch.manual_seed(len(overrides))
    return BiLM(make_config(**overrides))


ARCHITECTURES = {
    "skip_on": {},
    "skip_off": {"lstm.use_skip_connections": False},
    "tanh_no_highway": {"char_cnn.activation": "tanh", "char_cnn.n_highway": 0},
    "one_layer": {"lstm.n_layers": 1},
    "three_layers_no_clip": {"lstm.n_layers": 3, "lstm.cell_clip": None, "lstm.proj_clip": None},
    "no_projections": {"lstm.projection_dim": 24, "lstm.dim": 24, "char_cnn.filters": [[1, 10], [3, 14]]},
}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_random_architectures(arch, tmp_path, one_thread):
    embedder = Embedder(random_bilm(**ARCHITECTURES[arch]))
    assert_matches_embedder(embedder, exported(embedder.bilm, tmp_path), SENTENCES)


@pytest.mark.parametrize("model", ["char_only", "word_char", "word_only", "three_layers"])
def test_manylangs_models_with_their_own_ids(model, tmp_path, one_thread):
    embedder = Embedder.from_model(MANYLANGS / model)
    sentences = json.loads((MANYLANGS / "sentences.json").read_text(encoding="utf-8"))["sentences"]
    assert_matches_embedder(embedder, exported(embedder.bilm, tmp_path), sentences)


def test_a_sentence_gets_the_same_vectors_alone_and_in_any_batch(tmp_path, one_thread):
    embedder = Embedder(random_bilm())
    path = exported(embedder.bilm, tmp_path)
    together = onnx_layers(path, embedder, SENTENCES)
    for sentence, in_batch in zip(SENTENCES, together):
        alone = onnx_layers(path, embedder, [sentence])[0]
        np.testing.assert_allclose(alone, in_batch, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_original_shapes(tmp_path, one_thread):
    """The published ELMo's shapes (2x4096_512_2048cnn_2xhighway), random weights: 370 MB of graph."""
    from benchlib import options_for

    torch.manual_seed(0)
    embedder = Embedder(BiLM(BiLMConfig.from_options(options_for("original"))))
    assert_matches_embedder(embedder, exported(embedder.bilm, tmp_path), SENTENCES[:2])


def test_int8_vectors_are_close_to_float32(tmp_path, one_thread):
    """The bundled model: ONNX Runtime's int8 against the float32 graph, per token and layer."""
    embedder = Embedder.from_model("default")
    sentences = SENTENCES + [line.split() for line in (
        "Stocks fell sharply on Monday after the central bank said it would keep rates high .",
        "She plays the cello in a small orchestra that meets every Thursday evening .")]
    fp32 = onnx_layers(exported(embedder.bilm, tmp_path), embedder, sentences)
    int8 = onnx_layers(exported(embedder.bilm, tmp_path, "int8.onnx", int8=True), embedder, sentences)
    cosines = np.concatenate([token_cosines(f, i) for f, i in zip(fp32, int8)], axis=1)  # (L+1, tokens)
    assert cosines.mean(1).min() >= 0.999 and cosines.min() >= 0.99, cosines.mean(1)
    assert (tmp_path / "int8.onnx").stat().st_size < 0.5 * (tmp_path / "model.onnx").stat().st_size


def test_batches_without_tokens(tmp_path):
    """A batch of empty sentences (0 tokens) gives empty layers, as the Embedder does; empty rows beside others."""
    embedder = Embedder(random_bilm())
    path = exported(embedder.bilm, tmp_path)
    layers, mask = session(path).run(None, {"char_ids": np.zeros((2, 0, 50), np.int64)})
    assert layers.shape == (2, 3, 0, 16) and mask.shape == (2, 0)
    assert_matches_embedder(embedder, path, [[], ["one"], []])


def test_the_graph_carries_no_state(tmp_path):
    import onnx

    embedder = Embedder(random_bilm())
    model = onnx.load(exported(embedder.bilm, tmp_path))
    assert [i.name for i in model.graph.input] == ["char_ids"]
    assert [o.name for o in model.graph.output] == ["layers", "mask"]
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "tokens", 50]


def test_a_stateful_bilm_is_refused(tmp_path):
    bilm = random_bilm()
    bilm.stateful = True
    with pytest.raises(InputError, match="stateless"):
        export_onnx(bilm, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()


def test_a_bilm_loaded_for_int8_only_is_refused(tmp_path):
    """Its float32 weights were released (elmo.model.int8): the graph would read empty tensors."""
    from elmo.model.int8 import quantize_bilm

    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("int8 needs torch's fbgemm kernels, absent from this torch build")
    bilm = random_bilm()
    quantize_bilm(bilm, keep_float32=False)
    with pytest.raises(InputError, match="int8 inference only"):
        export_onnx(bilm, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()


def test_cli_writes_the_file_and_refuses_to_overwrite(tmp_path, capsys, one_thread):
    d = MANYLANGS / "word_char"  # a model directory, as `elmo embed --model` takes it
    out = tmp_path / "model.onnx"
    assert main(["export-onnx", str(d), str(out)]) == 0
    embedder = Embedder.from_model(d)
    assert f"float32, 3 layers of {embedder.bilm.output_dim()}" in capsys.readouterr().err
    assert_matches_embedder(embedder, out, SENTENCES[:2])
    assert main(["export-onnx", str(d), str(out)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert main(["export-onnx", str(tmp_path / "no-such-model"), str(tmp_path / "y.onnx")]) == 2
    assert "no-such-model" in capsys.readouterr().err and not (tmp_path / "y.onnx").exists()


def test_the_speed_benchmark_gives_every_engine_the_same_sorted_batches():
    from conftest import load_script

    bench = load_script("benchmarks/onnx_speed.py")
    batches = bench.sorted_batches(["a b", "a b c d", "a", "a b c"], 3)
    assert batches == [[["a", "b", "c", "d"], ["a", "b", "c"], ["a", "b"]], [["a"]]]
    rows = [{"shape": "small", "threads": 1, "engine": "ours fp32", "tokens_per_s": 1000.0, "process_s": 9.0,
             "load_s": 0.5, "peak_rss_mb": 400.0},
            {"shape": "small", "threads": 1, "engine": "onnxruntime fp32", "tokens_per_s": 500.0, "process_s": 12.0,
             "load_s": 0.4, "peak_rss_mb": 700.0, "onnx_mb": 54.4, "max_abs_diff": 4e-7, "cosine_mean": 1.0,
             "cosine_min": 0.99999}]
    table = bench.markdown_table({"rows": rows})
    assert "| small | 1 | onnxruntime fp32 | 500 | x0.50 | 12.0 | 0.4 | 700 | 54.4 | 4.0e-07 / 1.00000 / 0.99999 |" in table


def test_the_python_example_of_docs_serving(tmp_path, monkeypatch, capsys, one_thread):
    """docs/serving.md's ONNX Runtime example, run as written on the bundled model's graph."""
    from conftest import REPO

    text = (REPO / "docs" / "serving.md").read_text(encoding="utf-8")
    block = text.split("<!-- example: tested-by tests/test_onnx.py -->\n```python\n", 1)[1].split("```", 1)[0]
    export_onnx(Embedder.from_model("default").bilm, tmp_path / "elmo.onnx", reference="default")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "docs/serving.md", "exec"), scope)  # noqa: S102 (the page's own example)
    assert scope["vectors"].shape == (3, 5, 512) and scope["mean"].shape == (2, 5, 512)
    assert scope["mask"].sum(1).tolist() == [5, 1]
    assert "from elmo_char_ids import" in block and "from elmo " not in block  # the torch-free ids
    assert capsys.readouterr().out.strip() == "default"
