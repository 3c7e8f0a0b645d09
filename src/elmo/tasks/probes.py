"""The paper's layer analysis (section 5.3): what one frozen biLM layer knows on its own.

- POS: a linear classifier on one layer (syntax); the paper finds layer 1 > layer 2.
- WSD: 1-nearest-neighbour to sense centroids computed from SemCor (semantics), with WordNet's
  first sense for lemmas unseen in SemCor; the paper finds layer 2 > layer 1.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import h5py
import numpy as np
import torch
from tqdm import tqdm

from elmo.errors import InputError
from elmo.files.fileio import atomic_path
from elmo.files.hdf5_files import open_hdf5

from .features import ElmoSpec, bilm_token, build_cache, document_ids, sentences_fingerprint
from .metrics import accuracy
from .readers import read_task_file
from .wsd_data import first_sense_answers, read_gold_keys, read_raganato_xml, score_wsd, wordnet_senses


def _check_layer(layer: int, num_layers: int) -> None:
    if not 0 <= layer < num_layers:
        raise InputError(f"--layer {layer}: this biLM has layers 0..{num_layers - 1}")


def _layer_features(cache, layer: int) -> np.ndarray:
    return np.concatenate([cache.layer(i, layer) for i in range(len(cache))], axis=0)


def pos_probe(spec: ElmoSpec, layer: int, train: str, test: str, dev: str | None = None, cache_dir: str = "runs/cache",
              epochs: int = 10, lr: float = 5e-3, batch_size: int = 512, seed: int = 1, limit: int | None = None,
              progress: bool = True, context: str = "sentence") -> dict:
    """Linear softmax classifier on layer `layer` alone; the epoch is chosen on dev (the last 10% of
    train when no dev file is given, as CoNLL-2000 has none). `context` "document": features with
    document context (CoNLL-U files with `# newdoc` comments)."""
    started = time.time()
    _check_layer(layer, spec.num_layers())
    splits = {"train": read_task_file("pos", train, limit), "test": read_task_file("pos", test, limit)}
    if dev:
        splits["dev"] = read_task_file("pos", dev, limit)
    if not dev:
        cut = max(1, len(splits["train"]) // 10)
        splits["train"], splits["dev"] = splits["train"][:-cut], splits["train"][-cut:]
    tags = sorted({t for ex in splits.values() for e in ex for t in e.tags})
    index = {t: i for i, t in enumerate(tags)}
    embedder = spec.embedder()
    data = {}
    for name, examples in splits.items():
        source = {"train": train, "dev": dev or train, "test": test}[name]
        cache = build_cache(spec, [e.tokens for e in examples], cache_dir,
                            f"pos-{os.path.basename(source)}-{name}-{len(examples)}", embedder=embedder,
                            documents=document_ids(examples, context, source))
        _check_layer(layer, cache.num_layers)
        x = torch.from_numpy(_layer_features(cache, layer))
        y = torch.tensor([index[t] for e in examples for t in e.tags])
        data[name] = (x, y)
        cache.close()
    torch.manual_seed(seed)
    probe = torch.nn.Linear(data["train"][0].shape[1], len(tags))
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr)
    rng = random.Random(seed)
    x_train, y_train = data["train"]

    def acc(name: str) -> float:
        with torch.no_grad():
            x, y = data[name]
            return accuracy(y.tolist(), probe(x).argmax(-1).tolist())

    history, best, best_state = [], -1.0, None
    for epoch in range(1, epochs + 1):
        order = list(range(len(y_train)))
        rng.shuffle(order)
        total = 0.0
        for s in tqdm(range(0, len(order), batch_size), desc=f"pos probe layer {layer} epoch {epoch}", unit="batch",
                      disable=not progress, file=sys.stderr, dynamic_ncols=True):
            rows = torch.tensor(order[s : s + batch_size])
            loss = torch.nn.functional.cross_entropy(probe(x_train[rows]), y_train[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(rows)
        dev_acc = acc("dev")
        history.append({"epoch": epoch, "train_loss": total / len(order), "dev_accuracy": dev_acc})
        if dev_acc > best:
            best, best_state = dev_acc, {k: v.clone() for k, v in probe.state_dict().items()}
    probe.load_state_dict(best_state)
    return {"probe": "pos", "layer": layer, "elmo": spec.describe(), "files": {"train": train, "dev": dev, "test": test},
            "n_tokens": {k: len(v[1]) for k, v in data.items()}, "dev": {"accuracy": acc("dev")},
            "test": {"accuracy": acc("test")}, "history": history, "seed": seed,
            "seconds": round(time.time() - started, 1)}


def _instance_vectors(layers: np.ndarray, sentence) -> list[np.ndarray]:
    """(L+1, n, D) -> per instance the mean over its tokens, (L+1, D)."""
    return [layers[:, inst.start : inst.end].mean(axis=1) for inst in sentence.instances]


def sense_centroids(spec: ElmoSpec, sentences, gold: dict[str, set[str]], cache_dir: str,
                    progress: bool = True) -> tuple[list[str], np.ndarray]:
    """Mean biLM vector of every SemCor sense, all layers at once: (keys, (n_senses, L+1, D)).

    Streamed (a full token cache of SemCor would be ~10 GB at D=1024) and then cached in HDF5.
    """
    h = hashlib.sha256(sentences_fingerprint([s.tokens for s in sentences]).encode())
    for s in sentences:
        for inst in s.instances:
            h.update(f"{inst.id}:{inst.start}:{inst.end}:{' '.join(sorted(gold.get(inst.id, ())))}\n".encode())
    path = Path(cache_dir) / f"wsd-centroids.{spec.fingerprint()}.{h.hexdigest()[:16]}.hdf5"
    if path.exists():
        with open_hdf5(path, "probe cache", InputError) as f:
            return [k.decode() if isinstance(k, bytes) else k for k in f["keys"][()]], f["centroids"][()]
    missing = [i.id for s in sentences for i in s.instances if i.id not in gold]
    if missing:
        raise InputError(f"{len(missing)} training instances have no gold key (first: {missing[0]})")
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = defaultdict(int)
    embedder = spec.embedder()
    stream = embedder.embed_sentences([bilm_token(t) for t in s.tokens] for s in sentences)
    for sentence, layers in tqdm(zip(sentences, stream), total=len(sentences), desc="SemCor centroids", unit="sent",
                                 disable=not progress, file=sys.stderr, dynamic_ncols=True):
        for inst, vector in zip(sentence.instances, _instance_vectors(layers, sentence)):
            for key in gold[inst.id]:
                if key in sums:
                    sums[key] += vector
                else:
                    sums[key] = vector.astype(np.float64)
                counts[key] += 1
    keys = sorted(sums)
    centroids = np.stack([sums[k] / counts[k] for k in keys]).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("keys", data=np.array(keys, dtype=h5py.string_dtype("utf-8")))
        f.create_dataset("centroids", data=centroids)
    return keys, centroids


def wsd_probe(spec: ElmoSpec, layer: int, train_xml: str, train_keys: str, test_xml: str, test_keys: str,
              wordnet_dir: str, cache_dir: str = "runs/cache", limit: int | None = None, progress: bool = True) -> dict:
    """1-NN WSD with one layer: nearest SemCor sense centroid (cosine) among the lemma's WordNet senses
    seen in SemCor, else WordNet's first sense; scored with the framework's rules."""
    started = time.time()
    _check_layer(layer, spec.num_layers())
    index_sense = os.path.join(wordnet_dir, "index.sense")
    index_sense = index_sense if os.path.isfile(index_sense) else index_sense + ".gz"
    wordnet = wordnet_senses(os.path.abspath(index_sense))
    train_sentences = read_raganato_xml(train_xml, limit)
    test_sentences = read_raganato_xml(test_xml, limit)
    gold_test = read_gold_keys(test_keys)
    if limit:
        kept = {i.id for s in test_sentences for i in s.instances}
        gold_test = {k: v for k, v in gold_test.items() if k in kept}
    train_ids = {i.id for s in train_sentences for i in s.instances} if limit else None
    keys, centroids = sense_centroids(spec, train_sentences, read_gold_keys(train_keys, train_ids), cache_dir, progress)
    _check_layer(layer, centroids.shape[1])
    by_key = {k: i for i, k in enumerate(keys)}
    table = centroids[:, layer]
    table = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
    cache = build_cache(spec, [s.tokens for s in test_sentences], cache_dir,
                        f"wsd-{os.path.basename(test_xml)}-{len(test_sentences)}")
    answers, backoff, unknown = {}, 0, 0
    for i, sentence in enumerate(test_sentences):
        if not sentence.instances:
            continue
        layer_vectors = cache.layer(i, layer)  # (n, D)
        for inst in sentence.instances:
            candidates = [by_key[k] for k in wordnet.senses(inst.lemma, inst.pos) if k in by_key]
            if candidates:
                v = layer_vectors[inst.start : inst.end].mean(axis=0)
                sims = table[candidates] @ (v / max(float(np.linalg.norm(v)), 1e-12))
                answers[inst.id] = keys[candidates[int(np.argmax(sims))]]
            else:
                first = wordnet.first_sense(inst.lemma, inst.pos)
                if first is None:
                    unknown += 1
                    continue
                answers[inst.id] = first
                backoff += 1
    cache.close()
    result = {"probe": "wsd", "layer": layer,
              "first_sense_baseline": score_wsd(gold_test, first_sense_answers(test_sentences, wordnet))["f1"], "elmo": spec.describe(),
              "files": {"train_xml": train_xml, "train_keys": train_keys, "test_xml": test_xml, "test_keys": test_keys},
              "test": score_wsd(gold_test, answers), "n_first_sense_backoff": backoff, "n_unknown_lemma": unknown,
              "n_senses_in_training": len(keys), "seconds": round(time.time() - started, 1)}
    parts = sorted({i.split(".")[0] for i in gold_test if "." in i} - {""})
    parts = [p for p in parts if not re.fullmatch(r"d\d+", p)]  # set names (senseval2...), not doc ids
    if len(parts) > 1:
        result["test_by_set"] = {p: score_wsd({k: v for k, v in gold_test.items() if k.startswith(p + ".")},
                                              {k: v for k, v in answers.items() if k.startswith(p + ".")})
                                 for p in parts}
    return result
