"""Archive extraction refuses hostile archives and writes nothing outside its folder."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from elmo.errors import ModelFileError
from elmo.files.layout import model_dir_in
from elmo.hub.archives import extract_archive


def make_tar(path, members: list[tuple[str, bytes | None, bytes]], mode: str = "w:gz"):
    """members: (name, data or None, type); type tarfile.SYMTYPE etc. for links."""
    with tarfile.open(path, mode) as t:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE or kind == tarfile.LNKTYPE:
                info.linkname = "/etc/passwd"
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return path


def make_zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


MODEL = [("m/options.json", b"{}", tarfile.REGTYPE), ("m/weights.hdf5", b"w", tarfile.REGTYPE)]


@pytest.mark.parametrize("mode,suffix", [("w:gz", ".tar.gz"), ("w:xz", ".tar.xz"), ("w:bz2", ".tar.bz2")])
def test_tar_archives_unpack_and_the_model_folder_is_found(tmp_path, mode, suffix):
    archive = make_tar(tmp_path / ("a" + suffix), MODEL, mode)
    out = extract_archive(archive, tmp_path / "out")
    assert model_dir_in(out, str(archive)) == out / "m"
    assert (out / "m" / "weights.hdf5").read_bytes() == b"w"


def test_zip_archive_unpacks(tmp_path):
    archive = make_zip(tmp_path / "a.zip", {"options.json": b"{}", "weights.hdf5": b"w"})
    out = extract_archive(archive, tmp_path / "out")
    assert model_dir_in(out, str(archive)) == out


@pytest.mark.parametrize("name,message", [("/abs/options.json", "absolute path"), ("../evil.json", r"outside .*\(\.\.\)"),
                                          ("m/../../evil.json", r"\.\.")])
def test_escaping_names_are_refused(tmp_path, name, message):
    for archive in (make_tar(tmp_path / "a.tar.gz", [(name, b"x", tarfile.REGTYPE)]), make_zip(tmp_path / "a.zip", {name: b"x"})):
        with pytest.raises(ModelFileError, match=message):
            extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar.gz", "a.zip"]  # no temporary folder left


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE])
def test_links_and_special_files_are_refused(tmp_path, kind):
    archive = make_tar(tmp_path / "a.tar.gz", [*MODEL, ("m/link", b"" if kind not in (tarfile.SYMTYPE, tarfile.LNKTYPE) else None, kind)])
    with pytest.raises(ModelFileError, match="link or special file"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_zip_symlink_is_refused(tmp_path):
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as z:
        info = zipfile.ZipInfo("m/link")
        info.external_attr = 0o120777 << 16
        z.writestr(info, "/etc/passwd")
    with pytest.raises(ModelFileError, match="link or special file"):
        extract_archive(archive, tmp_path / "out")


def test_a_size_bomb_is_refused(tmp_path):
    zeros = b"\0" * (4 << 20)  # compresses to a few KB
    for archive in (make_zip(tmp_path / "bomb.zip", {"a.bin": zeros}),
                    make_tar(tmp_path / "bomb.tar.xz", [("a.bin", zeros, tarfile.REGTYPE)], "w:xz")):
        with pytest.raises(ModelFileError, match="unpacks to more than 1048576 bytes"):
            extract_archive(archive, tmp_path / "out", max_bytes=1 << 20)
        assert not (tmp_path / "out").exists()


def test_a_zip_that_lies_about_its_sizes_is_stopped_while_writing(tmp_path):
    archive = make_zip(tmp_path / "liar.zip", {"a.bin": b"\0" * (2 << 20)})
    raw = bytearray(archive.read_bytes())
    # shrink the declared uncompressed size in the central directory (offset 24 of the record)
    at = raw.rfind(b"PK\x01\x02")
    raw[at + 24:at + 28] = (10).to_bytes(4, "little")
    archive.write_bytes(bytes(raw))
    with pytest.raises((ModelFileError, zipfile.BadZipFile)):
        extract_archive(archive, tmp_path / "out", max_bytes=1 << 20)
    assert not (tmp_path / "out").exists()


def test_not_an_archive_and_no_model_inside(tmp_path):
    (tmp_path / "x.zip").write_bytes(b"not an archive")
    with pytest.raises(ModelFileError, match="not a zip or tar archive"):
        extract_archive(tmp_path / "x.zip", tmp_path / "out")
    out = extract_archive(make_zip(tmp_path / "a.zip", {"readme.txt": b"hi"}), tmp_path / "out")
    with pytest.raises(ModelFileError, match="holds no model directory"):
        model_dir_in(out, "http://x/a.zip")
