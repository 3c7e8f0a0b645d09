"""The lab finds the shared data and the results from flags, environment or the current folder, never
from where the package is installed (site-packages has no ../shared)."""

from conftest import DATA, need

from elmo.lab.corpora import find_data_dir
from elmo.lab.results import find_results, shown_path


def test_data_and_results_come_from_flags_environment_or_the_current_folder(tmp_path, monkeypatch):
    need(DATA)
    for name in ("ELMO_DATA", "ELMO_SHARED", "ELMO_RESULTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # not a checkout: nothing to find
    assert find_data_dir() is None and find_results() is None
    monkeypatch.setenv("ELMO_SHARED", str(DATA.parent))
    assert find_data_dir() == DATA
    assert find_data_dir(tmp_path) == tmp_path  # --data wins
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results.md").write_text("# results\n")
    assert find_results() == tmp_path / "docs" / "results.md"
    assert shown_path(find_results()) == "docs/results.md"
    monkeypatch.setenv("ELMO_RESULTS", str(tmp_path / "mine.json"))
    assert find_results() == tmp_path / "mine.json"
