"""scripts/get_test_data.py against a server on 127.0.0.1 (tests/hub_server.py): pinned sha256 checked,
files written under their ../shared paths by rename, one line per refusal; no network."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ALLENNLP, REPO, load_script, need, subprocess_env
from hub_server import serve

get_test_data = load_script("scripts/get_test_data.py")
TEXT, OTHER = b"the cat sat\n" * 50, b"(3 (2 a) (4 b))\n"
ORIGIN = "https://example.org/pinned/commit"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def a_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("trees/dev.txt", OTHER)
    return buffer.getvalue()


def manifest(tmp_path: Path) -> Path:
    """Four entries, one per way a file is made, and one whose pinned sha256 the server's bytes miss."""
    gz = get_test_data.gzip_bytes(TEXT)
    files = [
        {"path": "fixtures/m/options.json", "url": f"{ORIGIN}/options.json", "make": "copy", "sha256": sha(TEXT)},
        {"path": "data/c/eng.testb.gz", "url": f"{ORIGIN}/eng.testb", "make": "gzip", "sha256": sha(gz),
         "content_sha256": sha(TEXT)},
        {"path": "data/s/trees/dev.txt", "url": f"{ORIGIN}/trees.zip", "make": "unzip", "member": "trees/dev.txt",
         "sha256": sha(OTHER), "archive_sha256": sha(a_zip())},
        {"path": "data/bad/file.txt", "url": f"{ORIGIN}/bad.txt", "make": "copy", "sha256": sha(b"what was pinned")},
    ]
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"files": files, "unavailable": [{"path": "data/built", "why": "made by a tool"}]}))
    return path


@pytest.fixture
def server():
    served = {"/example.org/pinned/commit/options.json": TEXT, "/example.org/pinned/commit/eng.testb": TEXT,
              "/example.org/pinned/commit/trees.zip": a_zip(), "/example.org/pinned/commit/bad.txt": b"tampered"}
    with serve(served) as s:
        yield s


def test_fills_a_shared_shaped_folder_and_refuses_a_wrong_hash_in_one_line(tmp_path, server, capsys):
    dest = tmp_path / "shared"
    argv = ["--manifest", str(manifest(tmp_path)), "--dest", str(dest), "--base-url", server.url("")]
    assert get_test_data.main(argv) == 1  # the tampered file
    out, err = capsys.readouterr()
    assert (dest / "fixtures/m/options.json").read_bytes() == TEXT
    assert gzip.decompress((dest / "data/c/eng.testb.gz").read_bytes()) == TEXT
    assert (dest / "data/s/trees/dev.txt").read_bytes() == OTHER
    assert not (dest / "data/bad").exists() or not any((dest / "data/bad").iterdir())  # no file, no temporary
    assert err.strip().splitlines() == [
        f"get_test_data: error: data/bad/file.txt: {server.url('/example.org/pinned/commit/bad.txt')}: sha256 "
        f"{sha(b'tampered')}, expected {sha(b'what was pinned')}; nothing written"]
    assert "missing  data/built: made by a tool; the tests that need it skip" in out
    server.files["/example.org/pinned/commit/bad.txt"] = b"what was pinned"
    assert get_test_data.main(argv) == 0
    out = capsys.readouterr().out
    assert "ok       fixtures/m/options.json (already there)" in out and "fetched  data/bad/file.txt" in out
    assert server.gets["/example.org/pinned/commit/options.json"] == 1  # kept, not fetched again


def test_a_missing_file_on_the_server_and_a_bad_archive_are_one_line_each(tmp_path, server, capsys):
    server.faults["/example.org/pinned/commit/options.json"] = "404"
    server.files["/example.org/pinned/commit/trees.zip"] = b"not a zip"
    argv = ["--manifest", str(manifest(tmp_path)), "--dest", str(tmp_path / "d"), "--base-url", server.url(""),
            "--only", "fixtures/m", "data/s"]
    assert get_test_data.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "fixtures/m/options.json" in err[0] and "HTTP 404" in err[0]
    assert "data/s/trees/dev.txt" in err[1] and "sha256" in err[1]  # the archive's own pin catches it first


def test_the_manifest_pins_every_file_to_a_fixed_commit_or_release():
    entries = json.loads((REPO / "scripts/test_data.json").read_text())["files"]
    assert len({e["path"] for e in entries}) == len(entries) > 50
    for e in entries:
        assert len(e["sha256"]) == 64 and e["make"] in ("copy", "gzip", "unzip", "untar+gzip"), e
        if e["url"].startswith("https://raw.githubusercontent.com/"):
            assert len(e["url"].split("/")[5]) == 40, e["url"]  # a full commit id, not a branch


@pytest.mark.slow
def test_a_fresh_folder_from_the_server_makes_the_golden_output_tests_run(tmp_path):
    """Both fixtures served at their pinned raw URLs (copies of ../shared's files) fill a fresh folder whose
    files are byte-identical to ../shared's, and the golden-output tests run on it, none skipped."""
    need(ALLENNLP)
    entries = [e for e in json.loads((REPO / "scripts/test_data.json").read_text())["files"]
               if e["path"].startswith("fixtures/")]
    served = {"/" + e["url"].split("://", 1)[1]: (ALLENNLP.parent.parent / e["path"]).read_bytes() for e in entries}
    dest = tmp_path / "shared"
    with serve(served) as server:
        assert get_test_data.main(["--dest", str(dest), "--base-url", server.url(""),
                                   "--only", "fixtures"]) == 0
    for e in entries:
        assert (dest / e["path"]).read_bytes() == (ALLENNLP.parent.parent / e["path"]).read_bytes()
    result = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", "-rs",
                             str(REPO / "tests/test_golden_outputs.py")],
                            capture_output=True, text=True, env={**subprocess_env(), "ELMO_SHARED": str(dest)})
    assert result.returncode == 0 and " passed" in result.stdout and "skipped" not in result.stdout, result.stdout
