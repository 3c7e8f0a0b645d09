"""Embedding with document context (#48): each direction reads the whole document in its own order,
from zero state; a sentence's vectors depend on its document alone."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import model_flags, subprocess_env

from elmo import Embedder
from elmo.cli import main as cli_main
from elmo.embed import documents as documents_module
from elmo.embed.corpus import make_plan, write_parts
from elmo.embed.output_file import OutputSpec
from elmo.errors import InputError
from elmo.model.int8 import Int8Unavailable
from elmo.models import resolve

ATOL = 1e-6
# Two float32 paths that sum in another order (chunked, batched, token by token) agree to an ulp or two of the
# value; the top layer reaches |x| ~ 10, where one float32 ulp is 9.5e-7 (1.4e-6 seen on an Intel Xeon).
RTOL = 2.5e-7
SIZES = [3, 1, 5, 2, 4, 1, 6, 3, 5]  # sentences per document: 30, the fixture's sentences in order
ELMO = str(Path(sys.executable).parent / "elmo")


@pytest.fixture(scope="module")
def sentences(fixture_sentences) -> list[list[str]]:
    return [s.split() for lst in fixture_sentences for s in lst]


@pytest.fixture(scope="module")
def docs(sentences) -> list[list[list[str]]]:
    out, start = [], 0
    for n in SIZES:
        out.append(sentences[start : start + n])
        start += n
    return out


def embed(emb: Embedder, documents, **kwargs) -> list[list[np.ndarray]]:
    """Per document, its sentences' arrays (embed_documents yields them flat, in order)."""
    flat = iter(list(emb.embed_documents(documents, **kwargs)))
    return [[next(flat) for _ in d] for d in documents]


def assert_same(got: list[list[np.ndarray]], want: list[list[np.ndarray]]) -> None:
    for g_doc, w_doc in zip(got, want, strict=True):
        for g, w in zip(g_doc, w_doc, strict=True):
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL)


def assert_ends_equal_sentence_mode(emb: Embedder, document: list[list[str]], atol: float = ATOL) -> None:
    """The first sentence's forward half and the last one's backward half are sentence mode's, every
    layer; the middle sentence differs in both halves, the first in its backward, the last in its forward."""
    doc = embed(emb, [document])[0]
    alone = list(emb.embed_sentences(document))
    half = alone[0].shape[-1] // 2
    np.testing.assert_allclose(doc[0][..., :half], alone[0][..., :half], atol=atol, rtol=0)
    np.testing.assert_allclose(doc[-1][..., half:], alone[-1][..., half:], atol=atol, rtol=0)
    for d, a in zip(doc, alone):
        np.testing.assert_allclose(d[0], a[0], atol=atol, rtol=0)  # the token layer has no context
    middle = len(document) // 2
    for k in range(1, doc[0].shape[0]):
        for d, a, part in ((doc[middle], alone[middle], slice(None, half)), (doc[middle], alone[middle], slice(half, None)),
                           (doc[0], alone[0], slice(half, None)), (doc[-1], alone[-1], slice(None, half))):
            assert np.abs(d[k][..., part] - a[k][..., part]).max() > 1e-3


def test_ends_equal_sentence_mode_and_the_rest_differs(embedder, docs, one_thread):
    assert_ends_equal_sentence_mode(embedder, docs[2])
    assert_ends_equal_sentence_mode(embedder, docs[6])


def test_ends_equal_sentence_mode_on_the_bundled_model(docs, one_thread):
    """At 1e-5: on this model's 1024-wide cells, float32 products of other shapes differ in the last bits,
    so sentence mode itself differs by up to 2.3e-6 between a sentence alone and in a batch (measured);
    a one-sentence document is a sentence alone to the bit."""
    emb = Embedder(resolve("default").load())
    assert_ends_equal_sentence_mode(emb, docs[2], atol=1e-5)
    assert np.array_equal(embed(emb, [docs[2][:1]])[0][0], emb.embed_sentence(docs[2][0]))


def test_a_one_sentence_document_is_sentence_mode(embedder, docs, one_thread):
    np.testing.assert_allclose(embed(embedder, [docs[1]])[0][0], embedder.embed_sentence(docs[1][0]), atol=ATOL, rtol=RTOL)


def reference(bilm, document: list[list[str]]) -> list[np.ndarray]:
    """Each direction run one token at a time over its explicitly built stream, the state carried:
    forward `<S> w1 .. wn` per sentence in order, backward `</S> wn .. w1` per sentence, last first."""
    def token(word: str) -> torch.Tensor:
        return bilm.char_encoder(bilm.batch_to_ids([[word]])[0])[0]

    def run(stack, stream) -> dict:
        states, found = None, {}
        for vector, key in stream:
            outputs, states = stack(vector.view(1, 1, -1), torch.tensor([1]), states)
            if key is not None:
                found[key] = [o[0, 0] for o in outputs]
        return found

    with torch.no_grad():
        bos, eos = bilm.boundary_vectors()
        forward = [(x, key) for s, words in enumerate(document)
                   for x, key in [(bos, None)] + [(token(w), (s, i)) for i, w in enumerate(words)]]
        backward = [(x, key) for s in reversed(range(len(document))) for x, key in
                    [(eos, None)] + [(token(document[s][i]), (s, i)) for i in reversed(range(len(document[s])))]]
        fwd, bwd = run(bilm.forward_lstm, forward), run(bilm.backward_lstm, backward)
        out = []
        for s, words in enumerate(document):
            layers = [torch.stack([torch.cat([token(w), token(w)]) for w in words])]
            for k in range(bilm.config.n_layers):
                layers.append(torch.stack([torch.cat([fwd[s, i][k], bwd[s, i][k]]) for i in range(len(words))]))
            out.append(torch.stack(layers).numpy())
    return out


def test_each_direction_reads_its_stream_as_a_reference_computes_it(embedder, docs, one_thread):
    for document in (docs[0], docs[6]):
        assert_same(embed(embedder, [document]), [reference(embedder.bilm, document)])


def test_same_vectors_alone_among_others_in_any_order_at_any_batch_size(embedder, docs, one_thread):
    alone = [embed(embedder, [d])[0] for d in docs]
    for batch_size in (1, 2, 7):
        assert_same(embed(embedder, docs, batch_size=batch_size), alone)
    order = list(range(len(docs)))
    random.Random(4).shuffle(order)
    assert_same(embed(embedder, [docs[i] for i in order], batch_size=3), [alone[i] for i in order])


def test_chunked_equals_unchunked(embedder, docs, one_thread):
    whole = embed(embedder, docs, chunk_steps=10_000)
    for chunk_steps in (1, 3, 7):
        assert_same(embed(embedder, docs, chunk_steps=chunk_steps), whole)


def test_layer_views_and_empty_sentences(embedder, docs, one_thread):
    full = embed(embedder, [docs[0]])[0]
    np.testing.assert_allclose(embed(embedder, [docs[0]], layers="top")[0][1], full[1][-1], atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(embed(embedder, [docs[0]], layers=[0, 2])[0][2], full[2][[0, 2]], atol=ATOL, rtol=RTOL)
    with_empty = embed(embedder, [[[], docs[0][0], [], *docs[0][1:], []]])[0]
    assert [a.shape[1] for a in with_empty] == [0, len(docs[0][0]), 0, *map(len, docs[0][1:]), 0]
    assert_same([[a for a in with_empty if a.shape[1]]], [full])  # an empty sentence adds nothing
    assert [a.shape for a in embedder.embed_documents([[[]], []])] == [(3, 0, 32)]


def test_int8_document_mode_runs_and_stays_batch_independent(allennlp_dir, docs, one_thread):
    try:
        emb = Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", int8=True)
    except Int8Unavailable as e:
        pytest.skip(f"no int8 kernel here: {e}")
    alone = [embed(emb, [d])[0] for d in docs[:4]]
    assert_same(embed(emb, docs[:4], batch_size=3, chunk_steps=5), alone)


def test_bf16_document_mode_runs(allennlp_dir, docs, one_thread):
    emb = Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", bf16=True)
    got = embed(emb, docs[:2])
    assert [a.shape[1] for d in got for a in d] == [len(s) for d in docs[:2] for s in d]
    assert all(a.dtype == np.float32 and np.isfinite(a).all() for d in got for a in d)


def test_manylangs_model_in_document_mode(one_thread):
    root = Path(__file__).parent / "fixtures" / "manylangs"
    emb = Embedder.from_model(root / "word_char")
    their = json.loads((root / "sentences.json").read_text(encoding="utf-8"))["sentences"]
    document = [their[0], their[1], their[4], their[8]]
    assert_ends_equal_sentence_mode(emb, document)
    assert_same(embed(emb, [document, document[1:]], batch_size=1, chunk_steps=2), embed(emb, [document, document[1:]]))


def test_refusals(allennlp_dir, embedder, docs):
    stateful = Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", stateful=True)
    with pytest.raises(InputError, match="stateless"):
        stateful.embed_documents(docs)
    with pytest.raises(InputError, match="document 0: expected a list of tokenized sentences"):
        list(embedder.embed_documents([["a", "b"]]))
    with pytest.raises(InputError, match="chunk_steps"):
        embedder.embed_documents(docs, chunk_steps=0)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def separated(tmp_path, sentences) -> tuple[Path, list[str]]:
    """Documents separated by blank lines and -DOCSTART- lines, the separators doubled here and there."""
    s = [" ".join(w) for w in sentences]
    lines = [s[0], s[1], "", "-DOCSTART-", "", s[2], s[3], s[4], "-DOCSTART-", s[5], "", s[6], s[7]]
    return write_lines(tmp_path / "in.txt", lines), lines


def test_embed_context_document_keys_per_line_and_separators(tmp_path, separated, allennlp_dir, embedder, sentences):
    path, lines = separated
    out = tmp_path / "out.hdf5"
    assert cli_main(["embed", str(path), str(out), *model_flags(allennlp_dir), "--context", "document"]) == 0
    documents = [sentences[0:2], sentences[2:5], sentences[5:6], sentences[6:8]]
    want = iter(a for d in embed(embedder, documents) for a in d)
    with h5py.File(out, "r") as f:
        assert sorted(k for k in f if k.isdigit()) == sorted(str(i) for i in range(len(lines)))
        for i, line in enumerate(lines):
            if documents_module.is_document_break(line):
                assert f[str(i)].shape == (3, 0, 32)
            else:
                np.testing.assert_allclose(f[str(i)][()], next(want), atol=ATOL, rtol=RTOL)


def test_parts_are_cut_between_documents_and_resume(tmp_path, separated, allennlp_dir, embedder, capsys):
    path, lines = separated
    out = str(tmp_path / "out.hdf5")
    spec = OutputSpec()
    plan = make_plan(embedder, str(path), out, spec, part_lines=2, use_sentence_keys=False, overwrite=False,
                     resume=False, context="document")
    assert plan.blocks == [(0, 2), (2, 4), (4, 8), (8, 10), (10, 13)]
    for start, _ in plan.blocks[1:]:
        assert documents_module.is_document_break(lines[start])

    class NoBar:
        def update(self, n=1):
            pass

    write_parts(embedder, plan, [0, 2], spec, batch_size=64, bar=NoBar())
    args = ["embed", str(path), out, *model_flags(allennlp_dir), "--part-lines", "2", "--resume"]
    assert cli_main(args) != 0  # parts of document mode are not taken for sentence mode's
    assert "context='document' there, None now" in capsys.readouterr().err
    assert cli_main(args + ["--context", "document"]) == 0
    whole = tmp_path / "whole.hdf5"
    assert cli_main(["embed", str(path), str(whole), *model_flags(allennlp_dir), "--context", "document"]) == 0
    with h5py.File(out, "r") as a, h5py.File(whole, "r") as b:
        assert sorted(a) == sorted(b)
        for key in a:
            if key.isdigit():
                np.testing.assert_allclose(a[key][()], b[key][()], atol=ATOL, rtol=RTOL)


def test_embed_refuses_document_context_with_stateful(tmp_path, separated, allennlp_dir, capsys):
    path, _ = separated
    assert cli_main(["embed", str(path), str(tmp_path / "o.hdf5"), *model_flags(allennlp_dir), "--context", "document",
                     "--stateful"]) != 0
    assert "--context document and --stateful exclude each other" in capsys.readouterr().err


def test_embed_refuses_a_document_that_is_too_long(tmp_path, allennlp_dir, monkeypatch, capsys):
    monkeypatch.setattr(documents_module, "MAX_DOCUMENT_LINES", 3)
    path = write_lines(tmp_path / "in.txt", ["a b", "c", "", "d", "e", "f", "g", "h"])
    assert cli_main(["embed", str(path), str(tmp_path / "o.hdf5"), *model_flags(allennlp_dir), "--context",
                     "document"]) != 0
    assert "in.txt, line 7: a document of more than 3 sentences" in capsys.readouterr().err
    with pytest.raises(InputError, match="x, line 6: a document of more than 3 sentences"):
        list(documents_module.line_documents(enumerate(["a", "", "b", "c", "d", "e"]), "x"))


@pytest.mark.slow  # torchrun
def test_two_ranks_under_torchrun_equal_one_process(tmp_path, sentences, allennlp_dir):
    rng = random.Random(0)
    lines = []
    for d in range(40):
        lines += [" ".join(sentences[rng.randrange(30)]) for _ in range(rng.randrange(1, 6))]
        lines.append("-DOCSTART-" if d % 3 == 0 else "")
    path = write_lines(tmp_path / "in.txt", lines)
    env = dict(subprocess_env(), OMP_NUM_THREADS="1")
    common = [str(path), *model_flags(allennlp_dir), "--context", "document", "--part-lines", "20"]
    one = tmp_path / "one.hdf5"
    subprocess.run([ELMO, "embed", common[0], str(one), *common[1:]], check=True, env=env, timeout=600,
                   stderr=subprocess.DEVNULL)
    two = tmp_path / "two.hdf5"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "--no-python", ELMO, "embed", common[0], str(two), *common[1:]],
                         env=env, timeout=600, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "cut between documents" in run.stderr
    with open(one, "rb") as a, open(two, "rb") as b:
        assert a.read() == b.read()  # byte for byte
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "one.hdf5", "two.hdf5"]


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP I-LOC
1996-08-22 CD I-NP O

The DT B-NP O
European NNP I-NP I-ORG
Commission NNP I-NP I-ORG
said VBD B-VP O
"""


def test_readers_keep_each_sentence_document(tmp_path):
    from elmo.tasks.readers import read_conll2003, read_conllu
    path = tmp_path / "ner.txt"
    path.write_text(CONLL, encoding="utf-8")
    assert [(e.tokens[0], e.document) for e in read_conll2003(path)] == [("EU", 0), ("Peter", 0), ("BRUSSELS", 1),
                                                                         ("The", 1)]
    rows = "1\tA\ta\tDET\tDT\t_\t0\troot\t_\t_\n"
    conllu = tmp_path / "ud.conllu"
    conllu.write_text(f"# newdoc id = a\n# sent_id = 1\n{rows}\n# sent_id = 2\n{rows}\n# newdoc id = b\n{rows}\n")
    assert [e.document for e in read_conllu(conllu)] == [0, 0, 1]
    plain = tmp_path / "plain.txt"
    plain.write_text(CONLL.replace("-DOCSTART- -X- -X- O\n\n", ""), encoding="utf-8")
    assert {e.document for e in read_conll2003(plain)} == {None}


def test_feature_cache_with_document_context(tmp_path, allennlp_dir, embedder, one_thread):
    from elmo.tasks.features import ElmoSpec, build_cache, document_ids, sentences_fingerprint
    from elmo.tasks.readers import read_conll2003
    path = tmp_path / "ner.txt"
    path.write_text(CONLL, encoding="utf-8")
    examples = read_conll2003(path)
    sentences = [e.tokens for e in examples]
    spec = ElmoSpec(str(allennlp_dir / "options.json"), str(allennlp_dir / "lm_weights.hdf5"))
    plain = build_cache(spec, sentences, tmp_path / "cache", "ner", embedder=embedder,
                        documents=document_ids(examples, "sentence", str(path)))
    assert Path(plain.path).name == f"ner.{spec.fingerprint()}.{sentences_fingerprint(sentences)}.hdf5"  # as before
    in_context = build_cache(spec, sentences, tmp_path / "cache", "ner", embedder=embedder,
                             documents=document_ids(examples, "document", str(path)))
    assert Path(in_context.path).name != Path(plain.path).name and ".document-" in in_context.path
    want = [a for d in embed(embedder, [sentences[:2], sentences[2:]]) for a in d]
    for i, w in enumerate(want):
        np.testing.assert_allclose(in_context[i], w, atol=ATOL, rtol=RTOL)
        np.testing.assert_allclose(plain[i], embedder.embed_sentence(sentences[i]), atol=ATOL, rtol=RTOL)
    with pytest.raises(InputError, match=r"plain\.txt: --context document needs data marked in documents"):
        document_ids(read_conll2003(write_lines(tmp_path / "plain.txt", CONLL.split("\n")[2:9])), "document",
                     str(tmp_path / "plain.txt"))


def test_task_train_with_document_context(tmp_path, allennlp_dir, capsys, one_thread):
    pytest.importorskip("seqeval", reason="span F1 needs the tasks extra (seqeval)")
    path = tmp_path / "ner.txt"
    path.write_text(CONLL, encoding="utf-8")
    files = ["--train", str(path), "--dev", str(path), "--test", str(path), "--cache-dir", str(tmp_path / "cache")]
    small = ["--epochs", "1", "--hidden", "8", "--char-filters", "4", "--batch-size", "2"]
    out = tmp_path / "m.json"
    assert cli_main(["task", "train", "ner", *files, *model_flags(allennlp_dir), *small, "--context", "document",
                     "--out", str(out)]) == 0
    assert json.loads(out.read_text())["context"] == "document"
    assert len(list((tmp_path / "cache").glob("*.document-*.hdf5"))) == 1  # the three splits are one file here
    assert cli_main(["task", "train", "ner", *files, "--model", "none", *small, "--context", "document"]) != 0
    assert "the static arm (--model none) has none" in capsys.readouterr().err


def test_probe_refuses_document_context_for_data_without_documents(tmp_path, allennlp_dir, capsys):
    conll2000 = write_lines(tmp_path / "pos.txt", ["The DT B-NP", "bank NN I-NP", "", "It PRP B-NP", "rose VBD B-VP"])
    assert cli_main(["probe", "pos", "--layer", "1", "--train", str(conll2000), "--test", str(conll2000),
                     *model_flags(allennlp_dir), "--cache-dir", str(tmp_path / "cache"), "--context", "document"]) != 0
    assert "pos.txt: --context document needs data marked in documents" in capsys.readouterr().err
