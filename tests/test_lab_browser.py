"""End to end: start `elmo lab` as a user would, open the page in headless Chromium, check that every
panel shows numbers the model computes (recomputed here with the library), and optionally save a
screenshot of each panel.

Uses the system Chromium (Debian's `chromium`; $ELMO_LAB_CHROMIUM to point elsewhere) driven by
Playwright; skips only when no browser or no Playwright is installed. ELMO_LAB_SCREENSHOTS=1 writes
docs/lab/panel-N.png; ELMO_LAB_MODEL=DIR runs on another model (e.g. the bundled default) instead
of the fixture with its test-only softmax. Panel 4 runs two real NER taggers (with and without ELMo):
small ones trained here on a slice of CoNLL-2003, or the files in $ELMO_LAB_NER and
$ELMO_LAB_NER_BASELINE (e.g. the task grid's seed-1 taggers, for the screenshots); $ELMO_LAB_PRESETS
adds panel 3 presets (comma-separated NAME=PATH, as `elmo lab --preset`).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from test_lab_support import BANK, SIZE, fixture_files, need_data, need_module, shared_cache, write_test_softmax

from elmo import Embedder, ScalarMix, batch_to_ids, load_bilm
from elmo.lab.inputs import tokenize
from elmo.lab.lm_head import LMHead
from elmo.models import resolve

pytestmark = pytest.mark.slow  # drives Chromium against a live server
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def find_chromium() -> str:
    for candidate in (os.environ.get("ELMO_LAB_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.skip("no Chromium found: apt-get install -y chromium (or set ELMO_LAB_CHROMIUM)")


def elmo_command() -> list[str]:
    script = Path(sys.executable).with_name("elmo")
    if script.is_file():
        return [str(script)]
    return [shutil.which("elmo") or pytest.skip("the elmo command is not installed")]


def ner_taggers(folder: Path, model_args: list[str]) -> tuple[Path, Path]:
    """(tagger with ELMo, tagger without): from the environment, or trained here in a few seconds."""
    if os.environ.get("ELMO_LAB_NER") and os.environ.get("ELMO_LAB_NER_BASELINE"):
        return Path(os.environ["ELMO_LAB_NER"]), Path(os.environ["ELMO_LAB_NER_BASELINE"])
    need_module("gensim")
    need_module("seqeval")
    from conftest import DATA, need, train_small_vectors

    from elmo.cli import main
    conll = need(DATA / "conll2003")
    vectors = train_small_vectors(folder / "w2v.bin")
    files = ["--train", str(conll / "eng.train.gz"), "--dev", str(conll / "eng.testa.gz"),
             "--test", str(conll / "eng.testb.gz"), "--static", str(vectors), "--cache-dir", str(folder / "cache"),
             "--limit", "48", "--hidden", "16", "--char-filters", "8", "--batch-size", "8", "--epochs", "3",
             "--lr", "0.01", "--threads", "1"]
    with_elmo, without = folder / "ner-elmo.pt", folder / "ner-static.pt"
    elmo = model_args[:4] if model_args[0] == "--options" else ["--elmo", model_args[1]]
    for arm, path in ((elmo, with_elmo), (["--elmo", "none"], without)):
        assert main(["task", "train", "ner", *files, *arm, "--out", str(path.with_suffix(".json")),
                     "--save", str(path)]) == 0
    return with_elmo, without


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`elmo lab` on a free port; yields (url, options, weights, vocab, softmax)."""
    need_module("starlette")
    data = need_data()
    folder = tmp_path_factory.mktemp("lab-e2e")
    if os.environ.get("ELMO_LAB_MODEL"):
        files = resolve(os.environ["ELMO_LAB_MODEL"]).original_files()
        model_args = ["--model", os.environ["ELMO_LAB_MODEL"]]
        paths = (files.options_file, files.weight_file, files.vocab_file, files.softmax_file)
    else:
        options, weights = fixture_files()
        vocab, softmax = write_test_softmax(folder)
        model_args = ["--options", str(options), "--weights", str(weights), "--vocab", str(vocab),
                      "--softmax", str(softmax)]
        paths = (options, weights, vocab, softmax)
    taggers = ner_taggers(folder, model_args)
    log = open(folder / "stderr.txt", "w+")  # noqa: SIM115 (the server writes to it until teardown)
    presets = [a for item in os.environ.get("ELMO_LAB_PRESETS", "").split(",") if item for a in ("--preset", item)]
    proc = subprocess.Popen(elmo_command() + ["lab", *model_args, "--ner", str(taggers[0]),
                                              "--ner-baseline", str(taggers[1]), *presets, "--data", str(data), "--reference-size", SIZE,
                                              "--cache-dir", str(shared_cache(tmp_path_factory)), "--port", "0",
                                              "--no-browser"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    url, deadline = None, time.time() + 120
    while url is None and time.time() < deadline and proc.poll() is None:
        try:
            m = re.search(r"at (http://127\.0\.0\.1:\d+/)", lines.get(timeout=1))
            url = m.group(1) if m else None
        except queue.Empty:
            pass
    if url is None:
        proc.kill()
        log.seek(0)
        pytest.fail(f"elmo lab did not print its URL; stderr:\n{log.read()}")
    yield url, paths, taggers
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def page(server):
    sync_api = need_module("playwright.sync_api")
    executable = find_chromium()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        pg.goto(server[0])
        for n in range(1, 8):
            pg.wait_for_selector(f"#p{n}[data-state=ready]", timeout=60_000)
        pg.errors = errors
        yield pg
        browser.close()


def number(page, selector: str) -> float:
    return float(page.locator(selector).first.inner_text().split()[0])


def bank_layers(embedder) -> np.ndarray:
    arrays = list(embedder.embed_sentences([tokenize(s["text"]) for s in BANK["sentences"]]))
    return np.stack([a[:, tokenize(s["text"]).index("bank")] for a, s in zip(arrays, BANK["sentences"])])


def cos(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_every_panel_shows_model_numbers(server, page):
    url, (options, weights, vocab, softmax), (ner, ner_baseline) = server
    embedder = Embedder.from_files(options, weights)
    v = bank_layers(embedder)
    top = v.shape[1] - 1

    # 1: the static point is one point; the two senses of "bank" land apart in the top layer.
    assert page.locator("#p1-static-points").inner_text() == "1"
    assert number(page, "#p1-static-spread") == 0.0
    between = np.mean([1 - cos(v[a, top], v[b, top]) for a in (0, 1) for b in (2, 3)])
    assert number(page, "#p1-between") == pytest.approx(between, abs=2e-3) and between > 0.005
    assert page.locator("#p1-out svg circle.pt").count() >= 5

    # 2: "bank" taken apart: its character ids, then the norm of layer 1 forward.
    ids = [int(t) for t in page.locator("#p2-chars .char small").all_inner_texts()]
    from elmo.model.chars import token_to_ids
    assert ids == token_to_ids("bank")[:6]
    half = v.shape[2] // 2
    sentence = tokenize(BANK["sentences"][2]["text"])
    layer1 = embedder.embed_sentence(sentence)[1, sentence.index("bank")]
    norms = [float(t) for t in page.locator("#p2-out .stage .norm").all_inner_texts()]
    assert norms[-4] == pytest.approx(np.linalg.norm(layer1[:half]), abs=2e-3)

    # 3: the NER tagger's learned mix first; then equal weights, and the top-layer slider moved: the page
    # recomputes live.
    def across(w):
        s = ScalarMix(len(w), initial_scalar_parameters=w)
        import torch
        mixed = s([torch.from_numpy(v[:, j]) for j in range(len(w))]).detach().numpy()
        return np.mean([cos(mixed[a], mixed[b]) for a in (0, 1) for b in (2, 3)])

    from elmo.tasks import load_tagger
    learned = load_tagger(ner).layer_weights()["input"]["weights"]
    shown = [float(x) for x in page.locator("#p3-weights").inner_text().split(" · ")]
    assert shown == pytest.approx(learned, abs=1.5e-3)
    page.select_option("#p3-preset", label="equal weights (a shape, not learned)")
    need_module("playwright.sync_api").expect(page.locator("#p3-weights")).to_have_text(
        " · ".join(["0.333"] * 3), timeout=30_000)
    page.wait_for_selector("#p3[data-state=ready]")
    assert page.locator("#p3-weights").inner_text() == " · ".join(["0.333"] * 3)
    assert number(page, "#p3-across") == pytest.approx(across([0.0] * 3), abs=2e-3)
    page.locator("#p3-sliders input").nth(top).fill("3")
    need_module("playwright.sync_api").expect(page.locator("#p3-weights")).to_have_text(
        re.compile(r"^0\.045"), timeout=30_000)
    page.wait_for_selector("#p3[data-state=ready]")
    assert number(page, "#p3-across") == pytest.approx(across([0.0, 0.0, 3.0]), abs=2e-3)

    # 4: [x; ELMo] as the ELMo tagger computes it, and both taggers' predictions per token.
    tokens = tokenize(page.locator("#p4-sentence").input_value())
    rows = page.locator("#p4-rows tbody tr")
    assert rows.count() == len(tokens)
    with_elmo, without = load_tagger(ner), load_tagger(ner_baseline)
    parts = with_elmo.input_parts(tokens)
    first = rows.first.locator(".elmo-dim").inner_text()
    assert float(re.search(r"length ([\d.]+)", first).group(1)) == pytest.approx(
        np.linalg.norm(parts["elmo"][0]), abs=2e-3)
    cells = [row.locator("td").all_inner_texts() for row in rows.all()]
    assert [c[-2] for c in cells] == without.predict(tokens) and [c[-1] for c in cells] == with_elmo.predict(tokens)
    assert "not available yet" not in page.locator("#p4-out").inner_text()
    assert "null" not in page.locator("#p4-out").inner_text()

    # 5: cluster purity per layer, and the toggle to layer 2.
    import json
    import urllib.request
    layers = json.loads(urllib.request.urlopen(url + "api/layers").read())
    assert number(page, "#p5-purity") == pytest.approx(layers["pos"]["purity"][1], abs=1e-3)
    page.locator("#p5-layers button", has_text="layer 2").click()
    page.wait_for_selector("#p5[data-state=ready]")
    assert number(page, "#p5-purity") == pytest.approx(layers["pos"]["purity"][2], abs=1e-3)
    assert page.locator("#p5-out svg circle.pt").count() == len(layers["pos"]["tokens"])

    # 6: the forward LM's first guess for word 1 (from <S>), recomputed with numpy.
    import torch
    bilm = load_bilm(options, weights)
    words = tokenize(page.locator("#p6-sentence").input_value())
    with torch.no_grad():
        h = bilm(batch_to_ids([words])).layers[-1][0, 0, :half].numpy()
    head = LMHead.from_files(vocab, softmax, bilm.config.projection_dim)
    best = head.predict(h[None], [words[0]])[0]["top"][0]
    assert page.locator("#p6-first").inner_text() == f"{best['word']} {best['p']:.3f}"

    # 7: the paper's six benchmarks with computed error reductions; ours or why not.
    rows = page.locator("#p7-table tbody tr")
    assert rows.count() >= 6 and "24.9%" in rows.first.inner_text()
    cells = [row.locator("td").all_inner_texts() for row in rows.all()]
    assert all(c[2] == "–" or "→" in c[2] for c in cells)  # the paper's figures (none for our extra tasks)
    assert all("→" in c[4] or "not " in c[4] for c in cells)  # ours, or why not
    assert page.errors == []


def test_screenshots_of_each_panel(page):
    if not os.environ.get("ELMO_LAB_SCREENSHOTS"):
        pytest.skip("set ELMO_LAB_SCREENSHOTS=1 to write docs/lab/panel-N.png")
    out = REPO / "docs" / "lab"
    out.mkdir(parents=True, exist_ok=True)
    page.locator("#p5-layers button", has_text="layer 1").click()
    page.wait_for_selector("#p5[data-state=ready]")
    for n in range(1, 8):
        page.locator(f"#p{n}").screenshot(path=str(out / f"panel-{n}.png"))
    page.locator("header").screenshot(path=str(out / "header.png"))
    assert all((out / f"panel-{n}.png").stat().st_size > 1000 for n in range(1, 8))
