"""The lab's JSON endpoints, in process, on the tiny fixture biLM and a small real reference set.

Numbers are checked against an independent computation with the library's public API (Embedder,
ScalarMix, numpy softmax), not against the lab's own helpers.
"""

from __future__ import annotations

import asyncio
import json
import re
import types

import numpy as np
import pytest
from test_lab_support import (
    BANK,
    SIZE,
    fixture_files,
    need_data,
    need_module,
    shared_cache,
    write_results,
    write_test_softmax,
)

from elmo import ScalarMix, batch_to_ids, load_bilm
from elmo.cli.lab import SIZES
from elmo.lab import LabModels, ReferenceSpec, build_reference
from elmo.lab.inputs import Limits, tokenize
from elmo.model.chars import token_to_ids

need_module("starlette")
need_module("httpx2")
from starlette.testclient import TestClient  # noqa: E402

from elmo.lab.app import create_app  # noqa: E402

LAB_URL = "http://127.0.0.1:8765"  # the lab answers only to requests that name it (Host header)


class CapitalisedTagger:
    """A stand-in with the tagger interface (not a model): capitalised words are B-MISC."""

    def __init__(self, with_parts: bool):
        self.with_parts = with_parts

    def predict(self, tokens):
        return ["B-MISC" if t[:1].isupper() else "O" for t in tokens]

    def layer_weights(self):
        return {"input": {"weights": [0.1, 0.2, 0.7], "gamma": 2.0}, "output": None}

    def input_parts(self, tokens):
        if not self.with_parts:
            return {}
        return {"word": np.full((len(tokens), 5), 0.5), "elmo": np.ones((len(tokens), 32))}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    options, weights = fixture_files()
    folder = tmp_path_factory.mktemp("lab")
    vocab, softmax = write_test_softmax(folder)
    return types.SimpleNamespace(options=options, weights=weights, vocab=vocab, softmax=softmax, folder=folder)


@pytest.fixture(scope="module")
def lab(files, tmp_path_factory):
    data = need_data()
    models = LabModels.load(options=str(files.options), weights=str(files.weights), vocab=str(files.vocab),
                            softmax=str(files.softmax), results=str(write_results(files.folder / "r.json")),
                            data_dir=data)
    ref = build_reference(models.bilm, data, ReferenceSpec(*SIZES[SIZE]), shared_cache(tmp_path_factory),
                          log=lambda m: None)
    return models, ref


@pytest.fixture(scope="module")
def client(lab):
    return TestClient(create_app(*lab, Limits(max_body_bytes=4096, max_tokens=30, max_sentences=5)), base_url=LAB_URL)


def bank_vectors(embedder):
    arrays = list(embedder.embed_sentences([tokenize(s["text"]) for s in BANK["sentences"]]))
    return np.stack([a[:, tokenize(s["text"]).index("bank")] for a, s in zip(arrays, BANK["sentences"])])  # (4, L+1, D)


def cos_dist(a, b):
    return 1 - a @ b / np.linalg.norm(a) / np.linalg.norm(b)


def test_page_and_static_files_are_served_with_no_outside_links(client):
    page = client.get("/")
    assert page.status_code == 200 and "ELMo lab" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    scripts = ["main", "common", "p1", "p2", "p3", "p4", "p5", "p6", "p7"]
    names = ["index.html", "lab.css"] + [f"{n}.js" for n in scripts]
    for name in names:
        text = client.get(f"/static/{name}").text
        assert text, name
        outside = re.findall(r"(?:https?:)?//[\w.-]+\.\w+[^\s\"']*", text.replace("http://www.w3.org/2000/svg", ""))
        assert not [u for u in outside if not u.startswith("// ")], (name, outside)


def test_info_describes_model_and_reference(client):
    info = client.get("/api/info").json()
    assert info["layers"] == 3 and info["dim"] == 32 and info["lm"]["available"]
    assert set(info["reference"]["sources"]) == {"wiki", "ewt", "semcor"} and info["reference"]["tokens"] > 500
    assert "bank" in info["examples"]


def test_panel1_static_is_one_point_and_senses_part_in_layer_2(client, embedder):
    r = client.post("/api/contextual", json={**BANK, "layer": 2}).json()
    v = bank_vectors(embedder)
    assert r["static"]["points"] == 1 and r["static"]["spread"] == 0.0
    between = np.mean([cos_dist(v[a, 2], v[b, 2]) for a in (0, 1) for b in (2, 3)])
    assert r["distances"][2]["between"] == pytest.approx(between, abs=1e-4)
    assert r["distances"][2]["between"] > 0.01  # measurably apart, while layer 0 is one point
    assert r["distances"][0] == {"layer": 0, "mean": 0.0, "between": 0.0, "within": 0.0}
    assert len(r["occurrences"]) == 4 and all(len(o["neighbours"]) == 5 for o in r["occurrences"])
    kinds = [p["kind"] for p in r["plot"]["points"]]
    assert kinds.count("static") == 1 and kinds.count("context") == 4


def test_panel1_paragraph_option_reads_it_before_each_sentence(client, embedder):
    """With a paragraph, each occurrence's vectors are recomputed with the paragraph as the start of its
    document (Embedder.embed_documents): only the forward halves change, the token layer never."""
    paragraph = "The town lies on a wide river . Fishermen moor their boats there ."
    r = client.post("/api/contextual", json={**BANK, "layer": 2, "paragraph": paragraph}).json()
    p = r["paragraph"]
    assert p["sentences"] == 2 and p["tokens"] == 14 and len(p["occurrences"]) == 4
    alone = bank_vectors(embedder)
    for k, (o, s) in enumerate(zip(p["occurrences"], BANK["sentences"])):
        tokens = tokenize(s["text"])
        document = [tokenize("The town lies on a wide river ."), tokenize("Fishermen moor their boats there ."), tokens]
        after = list(embedder.embed_documents([document]))[-1][:, tokens.index("bank")]
        for j in range(3):
            assert o["cosine"][j] == pytest.approx(1 - cos_dist(after[j], alone[k, j]), abs=1e-4)
            assert o["forward_cosine"][j] == pytest.approx(1 - cos_dist(after[j, :16], alone[k, j, :16]), abs=1e-4)
        np.testing.assert_allclose(after[:, 16:], alone[k, :, 16:], atol=1e-6)  # the backward halves
        assert o["cosine"][0] == pytest.approx(1.0) and o["cosine"][2] < 0.9999
        assert len(o["neighbours"]) == 5 and 0 <= o["new_neighbours"] <= 5
    assert client.post("/api/contextual", json={**BANK, "layer": 2}).json()["paragraph"] is None
    bad = client.post("/api/contextual", json={**BANK, "paragraph": "word " * 31 + "."})
    assert bad.status_code == 413 and "paragraph sentence 1 has 32 tokens" in bad.json()["error"]


def test_panel2_builds_a_token_stage_by_stage(client, embedder):
    sentence = "She went to the bank ."
    r = client.post("/api/build", json={"sentence": sentence, "index": 4}).json()
    assert r["token"] == "bank" and [c["id"] for c in r["chars"]] == token_to_ids("bank")[:6]
    assert r["padding"] == 44 and r["layer0_matches"]
    layers = embedder.embed_sentence(tokenize(sentence))[:, 4]
    by_name = {s["stage"].split(" (")[0]: s for s in r["stages"]}
    assert by_name["layer 1 forward"]["norm"] == pytest.approx(np.linalg.norm(layers[1, :16]), abs=1e-3)
    assert by_name["layer 2 backward"]["norm"] == pytest.approx(np.linalg.norm(layers[2, 16:]), abs=1e-3)
    widths = dict(((w, n) for w, n in [(1, 4), (2, 8), (3, 16), (4, 32), (5, 64)]))
    assert all(len(f["ngram"]) <= f["width"] and f["width"] in widths for f in r["filters"])
    assert r["stages"][0]["neighbours"][0]["token"] in ("bank", "banks")
    assert all(len(s["neighbours"]) == 5 for s in r["stages"])  # every stage has its neighbours


def test_panel3_mix_matches_scalar_mix(client, embedder):
    w, gamma = [0.3, -0.5, 1.2], 1.5
    r = client.post("/api/mix", json={**BANK, "scalar_parameters": w, "gamma": gamma}).json()
    v = bank_vectors(embedder)
    mix = ScalarMix(3, initial_scalar_parameters=w)
    mix.gamma.data.fill_(gamma)
    import torch
    mixed = mix([torch.from_numpy(v[:, j]) for j in range(3)]).detach().numpy()
    assert r["weights"] == pytest.approx(mix.weights().detach().numpy(), abs=1e-4)
    assert r["occurrences"][0]["norm"] == pytest.approx(np.linalg.norm(mixed[0]), abs=1e-3)
    assert r["similarity"][0][2] == pytest.approx(1 - cos_dist(mixed[0], mixed[2]), abs=1e-4)
    zero = client.post("/api/mix", json={**BANK, "scalar_parameters": w, "gamma": 0}).json()
    assert zero["occurrences"][0]["norm"] == 0.0


def test_panel4_without_taggers_shows_elmo_part_and_why(client, embedder):
    r = client.post("/api/tag", json={"sentence": "John lives in Paris ."}).json()
    assert r["taggers"] == [] and r["why"].startswith("not available yet")
    equal = embedder.embed_sentence(tokenize("John lives in Paris ."))[:, 0].mean(0)
    assert r["rows"][0]["elmo"]["norm"] == pytest.approx(np.linalg.norm(equal), abs=1e-3)
    assert r["rows"][0]["word"] is None and r["rows"][0]["tags"] == {}


def test_panel4_and_3_with_task_models(lab, files, monkeypatch, tmp_path):
    import elmo.lab.task_models
    monkeypatch.setattr(elmo.lab.task_models, "load_tagger", lambda path: CapitalisedTagger("parts" in str(path)))
    pos_mix = {"scalar_mix": {"input": {"weights": [0.6, 0.3, 0.1], "gamma": 0.5}}}
    (tmp_path / "pos.json").write_text(json.dumps(pos_mix))
    with_tasks = LabModels.load(options=str(files.options), weights=str(files.weights), ner="ner-parts",
                                ner_baseline="ner-base", presets=[("POS", str(tmp_path / "pos.json"))])
    client = TestClient(create_app(with_tasks, lab[1]), base_url=LAB_URL)
    info = client.get("/api/info").json()
    assert [p["name"] for p in info["presets"]] == ["NER", "POS"] and info["taggers"]["why"] == ""
    r = client.post("/api/tag", json={"sentence": "John lives in Paris ."}).json()
    assert r["rows"][0]["tags"] == {"baseline": "B-MISC", "elmo": "B-MISC"}
    assert r["rows"][1]["word"]["dim"] == 5 and r["rows"][1]["elmo"]["norm"] == pytest.approx(np.sqrt(32), abs=1e-3)
    assert r["mix"]["source"] == "as the NER tagger computes it"


def test_panel5_layers_purity_and_points(client):
    r = client.get("/api/layers").json()
    pos = r["pos"]
    assert len(pos["purity"]) == 3 and all(0 < p <= 1 for p in pos["purity"])
    assert len(pos["layers"][1]["x"]) == len(pos["tokens"]) == len(pos["labels"]) >= 60
    assert set(r["senses"]) == {"bank", "plant", "interest", "state", "power", "table", "paper", "play"}
    assert len(r["sense_purity"]) == 3 and r["sense_majority"] == 0.5  # two senses, as many occurrences each


def test_panel6_predictions_match_numpy(client, files):
    import h5py
    import torch
    r = client.post("/api/directions", json={"sentence": "The cat sat ."}).json()
    bilm = load_bilm(files.options, files.weights)
    with torch.no_grad():
        top = bilm(batch_to_ids([["The", "cat", "sat", "."]])).layers[-1][0].numpy()
    with h5py.File(files.softmax) as f:
        W, b = f["W"][...], f["b"][...]
    vocab = files.vocab.read_text().split()
    for k, row in enumerate(r["rows"]):
        fwd, bwd = top[k, :16] @ W.T + b, top[k + 2, 16:] @ W.T + b  # left context / right context
        assert row["forward"]["top"][0]["word"] == vocab[int(fwd.argmax())]
        assert row["backward"]["top"][0]["word"] == vocab[int(bwd.argmax())]
        p = np.exp(fwd - fwd.max()) / np.exp(fwd - fwd.max()).sum()
        assert row["forward"]["target_p"] == pytest.approx(p[vocab.index(row["token"])], abs=1e-6)


def test_panel6_without_softmax_says_why(lab):
    models, ref = lab
    client = TestClient(create_app(LabModels(models.bilm, "no-lm"), ref), base_url=LAB_URL)
    r = client.post("/api/directions", json={"sentence": "The cat sat ."}).json()
    assert r["available"] is False and r["why"].startswith("not available yet")


def test_panel7_results_beside_the_paper(client):
    rows = {r["name"]: r for r in client.get("/api/results").json()["rows"]}
    assert rows["NER"]["ours"]["elmo"] == 84.0 and rows["NER"]["paper"]["elmo"] == 92.22
    assert rows["SQuAD"]["why"].startswith("not run")


@pytest.mark.parametrize("path, body, status, message", [
    ("/api/tag", "x" * 5000, 413, "at most 4096"),
    ("/api/tag", {"sentence": "word " * 31}, 413, "31 tokens; the lab takes at most 30"),
    ("/api/tag", {"sentence": "y" * 700}, 413, "700 characters"),
    ("/api/contextual", {**BANK, "sentences": BANK["sentences"] * 2}, 413, "at most 5"),
    ("/api/tag", "{not json", 400, "not valid JSON"),
    ("/api/tag", [1, 2], 400, "JSON object"),
    ("/api/tag", {}, 400, "missing field 'sentence'"),
    ("/api/tag", {"sentence": 5}, 400, "must be str or list"),
    ("/api/tag", {"sentence": "   "}, 400, "empty"),
    ("/api/build", {"sentence": "a b", "index": 9}, 400, "outside the sentence"),
    ("/api/contextual", {**BANK, "word": "river"}, 400, "sentence 2 does not contain the word 'river'"),
    ("/api/contextual", {**BANK, "word": "two words"}, 400, "one word"),
    ("/api/contextual", {**BANK, "layer": 0}, 400, "between 1 and 2"),
    ("/api/mix", {**BANK, "scalar_parameters": [0, 0], "gamma": 1}, 400, "list of 3 numbers"),
    ("/api/mix", {**BANK, "scalar_parameters": [0, 0, 0], "gamma": -1}, 400, "between 0 and 100"),
    ("/api/mix", {**BANK, "scalar_parameters": [0, 0, 0], "gamma": True}, 400, "wrong type"),
    ("/api/tag", '{"sentence": "\\ud800"}', 400, "lone surrogate ('\\ud800')"),  # fault 4 of #28
    ("/api/tag", "[" * 4000, 400, "nested too deeply"),
])
def test_bad_input_gets_a_4xx_with_a_message(client, path, body, status, message):
    data = body if isinstance(body, str) else json.dumps(body)
    r = client.post(path, content=data.encode(), headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


def test_only_json_is_taken_and_only_for_this_host(client):
    """A cross-site page can send text/plain without a preflight, and DNS rebinding sends another Host."""
    r = client.post("/api/tag", content=b'{"sentence": "a b"}', headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "must be sent as application/json, found text/plain" in r.json()["error"]
    for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example"):
        r = client.get("/api/info", headers={"host": host})
        assert r.status_code == 403 and f"Host {host!r} is not this lab" in r.json()["error"]
    for host in ("127.0.0.1:8765", "localhost", "[::1]:8765"):
        assert client.get("/api/info", headers={"host": host}).status_code == 200


def test_a_body_shorter_than_its_content_length_is_a_408(lab):
    app = create_app(*lab, Limits(body_seconds=0.2))
    scope = {"type": "http", "method": "POST", "path": "/api/tag", "raw_path": b"/api/tag", "query_string": b"",
             "root_path": "", "scheme": "http", "http_version": "1.1", "server": ("127.0.0.1", 8765),
             "client": ("127.0.0.1", 50000), "headers": [(b"host", b"127.0.0.1:8765"), (b"content-length", b"100"),
                                                         (b"content-type", b"application/json")]}
    first, sent = [True], []

    async def receive():
        if first.pop() if first else False:
            return {"type": "http.request", "body": b'{"sent', "more_body": True}
        await asyncio.sleep(3600)  # the client never sends the rest

    async def send(message):
        sent.append(message)

    asyncio.run(asyncio.wait_for(app(scope, receive, send), 30))
    assert sent[0]["status"] == 408
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert "did not arrive within 0.2 s (Content-Length 100)" in body["error"]


def test_unknown_paths_and_methods_are_json_errors(client):
    assert client.get("/api/nothing").status_code == 404 and "error" in client.get("/api/nothing").json()
    r = client.get("/api/tag")
    assert r.status_code == 405 and "GET /api/tag" in r.json()["error"]


def test_cli_errors_are_one_clear_line(files, capsys, monkeypatch, tmp_path):
    import elmo.models
    from elmo.cli import main

    model = ["--options", str(files.options), "--weights", str(files.weights), "--no-browser"]
    assert main(["lab", *model, "--preset", "no-equals-sign"]) == 2
    assert "expected NAME=PATH" in capsys.readouterr().err
    assert main(["lab", *model, "--port", "70000"]) == 2
    assert "between 0 and 65535" in capsys.readouterr().err
    assert main(["lab", "--options", str(files.options), "--no-browser"]) == 2
    assert "--options and --weights go together" in capsys.readouterr().err
    monkeypatch.setattr(elmo.models, "BUNDLED_DIR", tmp_path / "no-bundled-models")  # an installation without them
    assert main(["lab", "--no-browser"]) == 2
    err = capsys.readouterr().err
    assert "none in this installation" in err and "give --model DIR, or --options and --weights" in err
