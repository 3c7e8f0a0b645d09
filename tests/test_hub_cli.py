"""`elmo models` and `elmo download` (thin commands over elmo.hub), and the generated table of docs/published-models.md."""

from __future__ import annotations

import json
import re

from conftest import REPO, load_script
from hub_server import serve
from test_hub_download import hub_env  # noqa: F401 (fixture)

from elmo.cli import main
from elmo.hub.catalog import published_models
from elmo.hub.fetch import fetch


def test_models_lists_every_catalog_model_and_the_bundled_ones(hub_env, capsys):  # noqa: F811
    assert main(["models"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert names == ["default", "default-document"] + [m.name for m in published_models()]
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == names
    original = next(r for r in rows if r["name"] == "original")
    assert original["vector_size"] == 1024 and original["cached"] == "" and original["download_size"] == 374_434_792 + 336


def test_download_by_url_prints_where_and_models_shows_cached(hub_env, capsys):  # noqa: F811
    with serve({"/a/vocab.txt": b"x" * 5000}) as server:
        url = server.url("/a/vocab.txt")
        assert main(["download", url]) == 0
        out = capsys.readouterr().out
        assert f"{url}: {fetch(url)}" in out and f"cache: {hub_env / 'elmo-cache'}" in out
        server.faults["/b.hdf5"] = "404"
        assert main(["download", server.url("/b.hdf5")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1:] == [f"elmo download: error: {server.url('/b.hdf5')}: HTTP 404 Not Found (no such file on the "
                            "server: check the URL)"], err


def test_download_of_an_unknown_name_says_where_names_are(hub_env, capsys):  # noqa: F811
    assert main(["download", "no-such-model"]) == 2
    assert "`elmo models` lists the names" in capsys.readouterr().err


def test_the_docs_table_is_the_generated_one():
    page = (REPO / "docs" / "published-models.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- published-models:start -->\n(.*?)<!-- published-models:end -->", page, re.S).group(1)
    assert found == load_script("scripts/published_models_table.py").markdown_table(), \
        "docs/published-models.md's table differs from the catalog: run python scripts/published_models_table.py and paste it"


def test_readme_python_api_snippet_runs_as_pasted_without_network(hub_env, tmp_path, monkeypatch):  # noqa: F811
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("the network was used")

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    snippet = re.search(r"## Python API\n\n```python\n(.*?)```", readme, re.S).group(1)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.chdir(tmp_path)
    exec(snippet, {})
    assert (tmp_path / "copy" / "weights.hdf5").is_file()


def test_a_reader_that_stops_early_is_not_an_error():
    """`elmo models | head -2`: the closed pipe ends the command quietly with 141 (128 + SIGPIPE), as a Unix tool's
    would, instead of "error: Broken pipe"."""
    import subprocess
    import sys
    from pathlib import Path

    from conftest import subprocess_env

    proc = subprocess.Popen([str(Path(sys.executable).parent / "elmo"), "models"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=subprocess_env())
    proc.stdout.close()  # before the command writes: its first write meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141, err
    assert err == b""
