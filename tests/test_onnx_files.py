"""The exported ONNX file says what it is and refuses what it cannot compute: metadata_props, external data past
the 2 GB limit (a small threshold here), negative ids refused inside the graph, the check against PyTorch after
export (and --no-check), right padding refused otherwise in BiLM.forward, the torch-free char ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, make_config, subprocess_env

from elmo import Embedder
from elmo.cli import main
from elmo.errors import InputError, OutputError
from elmo.formats.fingerprints import model_fingerprint
from elmo.model.bilm import BiLM
from elmo.model.chars import batch_to_ids

ort = pytest.importorskip("onnxruntime", reason="the onnx extra: pip install 'elmo-bilm[onnx]'")
onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install 'elmo-bilm[onnx]'")

from elmo.formats import onnx_files  # noqa: E402  (needs onnx)
from elmo.formats.onnx_export import export_onnx  # noqa: E402

MANYLANGS = Path(__file__).parent / "fixtures" / "manylangs"
SENTENCES = [["The", "bank", "raised", "rates", "."], ["Hello"], ["ünïcödé", "x" * 70]]


def random_bilm() -> BiLM:
    torch.manual_seed(0)
    return BiLM(make_config())


def run_graph(path: Path, ids: np.ndarray):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"char_ids": ids})


def props(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


def test_the_file_says_what_it_is(tmp_path, one_thread):
    import elmo

    bilm = random_bilm()
    export_onnx(bilm, tmp_path / "m.onnx", reference="https://example.org/models/tiny.tar.gz")
    model = onnx.load(str(tmp_path / "m.onnx"))
    meta = props(tmp_path / "m.onnx")
    assert model.producer_name == "elmo" and model.producer_version == elmo.__version__
    assert meta["elmo.model"] == "https://example.org/models/tiny.tar.gz"
    assert meta["elmo.weights_sha256"] == model_fingerprint(bilm)
    assert json.loads(meta["elmo.options"]) == bilm.config.to_options()
    assert (meta["elmo.layers"], meta["elmo.dim"]) == (str(bilm.num_layers), str(bilm.output_dim()))
    assert "elmo_char_ids.batch_to_ids" in meta["elmo.input.char_ids"] and "right" in meta["elmo.input.padding"]
    assert meta["elmo.version"] == elmo.__version__ and meta["elmo.precision"] == "float32" and "elmo.int8" not in meta


def test_int8_keeps_the_producer_and_says_how_it_was_quantized(tmp_path, one_thread):
    export_onnx(random_bilm(), tmp_path / "m.onnx", int8=True, reference=str(tmp_path))
    model = onnx.load(str(tmp_path / "m.onnx"))
    meta = props(tmp_path / "m.onnx")
    assert model.producer_name == "elmo" and meta["elmo.precision"] == "int8"
    assert json.loads(meta["elmo.int8"])["reduce_range"] is True
    assert meta["elmo.model"] == f"{tmp_path.name} (a local model folder or file)"  # no path of this machine


def test_a_manylangs_file_names_the_lexicon_it_needs(tmp_path, one_thread):
    embedder = Embedder.from_model(MANYLANGS / "word_char")
    export_onnx(embedder.bilm, tmp_path / "m.onnx")
    convention = props(tmp_path / "m.onnx")["elmo.input.char_ids"]
    assert "word.dic and char.dic" in convention and "ELMoForManyLangs" in convention


def test_tensors_past_the_threshold_go_to_external_data(tmp_path, one_thread):
    """The 2 GB limit, tested with a threshold of 1 kB: the tensors in OUT.onnx.data, read by ONNX Runtime from
    any working directory; a later export under the threshold removes the stale data file."""
    embedder = Embedder(random_bilm())
    out = tmp_path / "m.onnx"
    export_onnx(embedder.bilm, out, external_data_threshold=1000)
    inline = tmp_path / "inline" / "m.onnx"
    inline.parent.mkdir()
    export_onnx(embedder.bilm, inline)
    data = tmp_path / "m.onnx.data"
    assert out.stat().st_size + data.stat().st_size >= inline.stat().st_size > out.stat().st_size + data.stat().st_size // 2
    assert data.stat().st_mode == out.stat().st_mode  # not private: the usual mode, as the graph's file
    inline.unlink()
    inline.parent.rmdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]  # no temporary left
    ids = batch_to_ids(SENTENCES).numpy()
    layers = run_graph(out, ids)[0]
    want = embedder.embed_batch(SENTENCES)
    for row, w in enumerate(want):
        np.testing.assert_allclose(layers[row, :, : w.shape[1]], w, atol=1e-5)
    export_onnx(embedder.bilm, out, int8=True, external_data_threshold=1000)  # int8 past the threshold too
    assert (tmp_path / "m.onnx.data").is_file() and run_graph(out, ids)[0].shape == layers.shape
    export_onnx(embedder.bilm, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_negative_ids_are_refused_inside_the_graph_as_ids_past_the_table_are(tmp_path):
    export_onnx(random_bilm(), tmp_path / "m.onnx", check=False)
    ids = batch_to_ids(SENTENCES).numpy()
    for bad in (-1, -262, 262):
        hostile = ids.copy()
        hostile[1, 0, 3] = bad
        with pytest.raises(Exception, match="out of (data )?bounds"):
            run_graph(tmp_path / "m.onnx", hostile)
    run_graph(tmp_path / "m.onnx", ids)  # the same ids, unchanged, run


def test_negative_word_ids_are_refused_in_a_manylangs_graph(tmp_path):
    embedder = Embedder.from_model(MANYLANGS / "word_only")
    export_onnx(embedder.bilm, tmp_path / "m.onnx", check=False)
    ids = embedder.bilm.batch_to_ids([["a", "b"]]).numpy()
    ids[0, 1, 0] = -1
    with pytest.raises(Exception, match="out of (data )?bounds"):
        run_graph(tmp_path / "m.onnx", ids)


def test_a_graph_that_differs_from_pytorch_is_refused_and_not_written(tmp_path, monkeypatch, capsys, one_thread):
    real = onnx_files.reference_layers
    monkeypatch.setattr(onnx_files, "reference_layers", lambda bilm, sentences: real(bilm, sentences) + 1e-2)
    with pytest.raises(OutputError, match="differ from the PyTorch model's"):
        export_onnx(random_bilm(), tmp_path / "m.onnx")
    assert list(tmp_path.iterdir()) == []
    model = str(MANYLANGS / "char_only")
    assert main(["export-onnx", model, str(tmp_path / "m.onnx")]) == 2
    assert "nothing was written" in capsys.readouterr().err and list(tmp_path.iterdir()) == []
    assert main(["export-onnx", model, str(tmp_path / "m.onnx"), "--no-check"]) == 0
    assert "checked" not in capsys.readouterr().err and (tmp_path / "m.onnx").is_file()


def test_the_cli_reports_the_check(tmp_path, capsys, one_thread):
    assert main(["export-onnx", str(MANYLANGS / "char_only"), str(tmp_path / "m.onnx")]) == 0
    assert "checked against PyTorch: largest difference" in capsys.readouterr().err


def test_export_onnx_never_writes_over_its_model(tmp_path, capsys):
    """The issue's case: `elmo export-onnx MODEL MODEL/weights.hdf5 --overwrite` destroyed the model (exit 0)."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(MANYLANGS / "char_only", model)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    for name in before:
        assert main(["export-onnx", str(model), str(model / name), "--overwrite"]) == 2
        assert "lies inside MODEL" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


@pytest.mark.parametrize("ids_rows", [[0, 1], [1, 0, 1]], ids=["left_padding", "hole"])
def test_bilm_forward_refuses_ids_that_are_not_right_padded(ids_rows):
    bilm = random_bilm().eval()
    ids = batch_to_ids([["a"] * len(ids_rows), ["b"]])
    for t, keep in enumerate(ids_rows):
        if not keep:
            ids[0, t] = 0
    with pytest.raises(InputError, match=r"char_ids: row 0 has padding \(ids all 0\) at token \d and a token after"):
        bilm(ids)
    vectors = torch.zeros(2, len(ids_rows), bilm.config.projection_dim)
    with pytest.raises(InputError, match="mask: row 0 has padding"):
        bilm(token_vectors=vectors, mask=(ids > 0).any(-1))


def test_char_ids_without_torch_match_elmo_batch_to_ids():
    """elmo_char_ids in a fresh interpreter loads no torch; its ids are elmo.batch_to_ids' on hostile tokens."""
    sentences = [["<S>", "</S>", "<s>", "x" * 49, "é" * 30, "日本", "\ud800lone", "", " ", "\x00"], [], ["a"]]
    code = ("import json, sys, elmo_char_ids\n"
            "ids = elmo_char_ids.batch_to_ids(json.loads(sys.stdin.read()))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "print(json.dumps([str(ids.dtype), ids.tolist()]))")
    env = {**subprocess_env(), "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(sentences), capture_output=True, text=True,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    dtype, ids = json.loads(done.stdout)
    assert dtype == "int64" and ids == batch_to_ids(sentences).tolist()


@pytest.mark.skipif(not os.environ.get("ELMO_OLD_ORT_PYTHON"), reason="set ELMO_OLD_ORT_PYTHON to the Python of a "
                    "virtualenv with an old onnxruntime (docs/serving.md: the oldest ONNX Runtime checked)")
def test_the_oldest_onnx_runtime_named_in_the_docs_runs_both_graphs(tmp_path, one_thread):
    embedder = Embedder(random_bilm())
    ids = batch_to_ids(SENTENCES).numpy()
    np.save(tmp_path / "ids.npy", ids)
    for int8 in (False, True):
        path = tmp_path / f"m{int(int8)}.onnx"
        export_onnx(embedder.bilm, path, int8=int8)
        code = ("import sys, numpy as np, onnxruntime as ort\n"
                "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
                "np.save(sys.argv[3], s.run(None, {'char_ids': np.load(sys.argv[2])})[0])\n"
                "print(ort.__version__)")
        done = subprocess.run([os.environ["ELMO_OLD_ORT_PYTHON"], "-c", code, str(path), str(tmp_path / "ids.npy"),
                               str(tmp_path / "out.npy")], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        np.testing.assert_allclose(np.load(tmp_path / "out.npy"), run_graph(path, ids)[0], atol=1e-5)


def node_with_onnxruntime() -> tuple[str, dict]:
    """node, and an environment in which `require("onnxruntime-node")` resolves (ELMO_ONNXRUNTIME_NODE_DIR: a
    folder whose node_modules holds it, installed as docs/serving.md says), or skip saying why."""
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    folder = os.environ.get("ELMO_ONNXRUNTIME_NODE_DIR", "")
    env = {**os.environ, "NODE_PATH": os.path.join(folder, "node_modules")} if folder else dict(os.environ)
    found = subprocess.run([node, "-e", "require.resolve('onnxruntime-node')"], env=env, capture_output=True,
                           check=False)
    if found.returncode:
        pytest.skip("onnxruntime-node is not installed: `npm install onnxruntime-node --onnxruntime-node-install=skip` "
                    "in a folder, and set ELMO_ONNXRUNTIME_NODE_DIR to it")
    return node, env


@pytest.mark.slow  # exports the bundled model and starts Node.js
def test_the_node_example_of_docs_serving(tmp_path, one_thread):
    """docs/serving.md's Node.js example, run as written: its ids (charIds) give the vectors Python's give."""
    import elmo_char_ids

    node, env = node_with_onnxruntime()
    text = (REPO / "docs" / "serving.md").read_text(encoding="utf-8")
    block = text.split("<!-- example: tested-by tests/test_onnx_files.py -->\n```js\n", 1)[1].split("```", 1)[0]
    (tmp_path / "example.js").write_text(block, encoding="utf-8")
    export_onnx(Embedder.from_model("default").bilm, tmp_path / "elmo.onnx")
    done = subprocess.run([node, "example.js"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout)
    sentences = [["The", "bank", "raised", "rates", "."], ["Hello"]]
    layers, mask = run_graph(tmp_path / "elmo.onnx", elmo_char_ids.batch_to_ids(sentences))
    assert printed["dims"] == list(layers.shape) and printed["mask"] == [int(m) for m in mask.reshape(-1)]
    np.testing.assert_allclose(printed["bank"], layers[0, -1, 1], atol=1e-6, rtol=0)
