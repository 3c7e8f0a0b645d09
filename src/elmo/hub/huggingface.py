"""`hf://OWNER/REPO[@REVISION][/PATH]`: a model in a Hugging Face Hub repository, through huggingface_hub.

The files come from huggingface_hub's own cache (HF_HOME, HF_HUB_CACHE), which it fills from the Hub
unless HF_HUB_OFFLINE=1; huggingface_hub is imported only when such a reference is used (`import elmo`
stays without it). PATH is the folder inside the repository that holds options.json + weights.hdf5
(the repository's root when absent), or, for `options_file=` / `weight_file=`, one file. A revision
is a branch, a tag or a commit hash; one with a "/" in it is written with %2F.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from elmo.errors import DownloadError, ModelFileError, ModelFileNotFound, OfflineError

from .reference_checks import check_reference_text, check_segments, control_character, shown

SCHEME = "hf://"
FORM = f"{SCHEME}OWNER/REPO[@REVISION][/PATH]"
REPO_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")  # huggingface_hub's validate_repo_id
REVISION_REFUSED = set(" ~^:?*[\\")  # what git refuses in a ref name (git check-ref-format), besides '..' and '@{'
MODEL_FILES = ("options.json", "weights.hdf5")
INSTALL_HINT = "install huggingface_hub (pip install 'elmo-bilm[hf]')"


def is_hf_reference(text: object) -> bool:
    return isinstance(text, str) and text.startswith(SCHEME)


@dataclass(frozen=True)
class HubReference:
    """A parsed `hf://` reference: repository id, revision (None: the default branch) and a path inside it."""

    repo_id: str
    revision: str | None
    path: str

    @classmethod
    def parse(cls, text: str) -> HubReference:
        """The parts of an hf:// reference, each checked as the Hub names things, before huggingface_hub sees it."""
        if not is_hf_reference(text):
            raise ModelFileError(f"{shown(text)}: not a Hugging Face reference (expected {FORM})")
        check_reference_text(text, FORM)
        parts = text[len(SCHEME):].split("/")
        if len(parts) < 2:
            raise ModelFileError(f"{text}: expected {FORM}, e.g. {SCHEME}someone/elmo-english or "
                                 f"{SCHEME}someone/models@v1.0/elmo/small")
        repo, at, revision = parts[1].partition("@")
        for what, name in (("owner", parts[0]), ("repository name", repo)):
            if not REPO_NAME.fullmatch(name) or "--" in name or ".." in name:
                raise ModelFileError(f"{text}: the {what} {name!r} is not a Hub name (letters, digits, '-', '_' "
                                     f"and '.', at most 96, no '--' or '..', not starting or ending with '-' or "
                                     f"'.'); expected {FORM}")
        check_segments(text, parts[2:], "the path inside the repository", FORM)
        if at:
            check_revision(text, unquote(revision))
        return cls(f"{parts[0]}/{repo}", unquote(revision) if at else None, "/".join(parts[2:]))

    def __str__(self) -> str:
        revision = f"@{self.revision}" if self.revision else ""
        return f"{SCHEME}{self.repo_id}{revision}" + (f"/{self.path}" if self.path else "")

    def file(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name


def check_revision(text: str, revision: str) -> None:
    """A branch, tag or commit as git allows its name (a "/" written %2F in the reference)."""
    bad = sorted(REVISION_REFUSED & set(revision))
    if (not revision or bad or control_character(revision) is not None or ".." in revision or "@{" in revision or "//" in revision
            or revision.startswith(("/", ".", "-")) or revision.endswith(("/", ".", ".lock"))):
        found = f" (it holds {', '.join(map(repr, bad))})" if bad else ""
        raise ModelFileError(f"{text}: the revision {revision!r} is not a branch, tag or commit name{found}; "
                             f"expected {FORM}")


def hf_model_dir(reference: str) -> Path:
    """The local folder (in huggingface_hub's cache) holding the model's options.json + weights.hdf5."""
    ref = HubReference.parse(reference)
    wanted = [ref.file(name) for name in MODEL_FILES]
    found = [_download(ref, name, wanted) for name in wanted]
    return found[0].parent


def hf_file(reference: str) -> Path:
    """One file: `hf://OWNER/REPO[@REVISION]/PATH/TO/FILE` -> its local path."""
    ref = HubReference.parse(reference)
    if not ref.path:
        raise ModelFileError(f"{reference}: names a repository, not a file; give the file's path inside it "
                             f"({SCHEME}OWNER/REPO/options.json), or pass the repository as the model")
    return _download(ref, ref.path, [ref.path])


def _hub():
    try:
        import huggingface_hub
    except ImportError as e:
        raise ModelFileError(f"{SCHEME} model references need huggingface_hub: {INSTALL_HINT}") from e
    return huggingface_hub


def _download(ref: HubReference, filename: str, wanted: list[str]) -> Path:
    """huggingface_hub's download of one file (from its cache first), its errors said in this package's terms;
    `wanted`: every file the reference needs, named in the command that fetches them elsewhere."""
    hub = _hub()
    from huggingface_hub import errors

    try:
        return Path(hub.hf_hub_download(ref.repo_id, filename, revision=ref.revision))
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled) as e:  # before EntryNotFoundError, its base
        raise _not_cached(ref, filename, wanted) from e
    except errors.RepositoryNotFoundError as e:
        raise DownloadError(str(ref), f"no repository {ref.repo_id} on the Hugging Face Hub (or it is private or "
                                      "gated: log in with `hf auth login` or set HF_TOKEN)") from e
    except errors.RevisionNotFoundError as e:
        raise DownloadError(str(ref), f"repository {ref.repo_id} has no revision {ref.revision!r}") from e
    except errors.EntryNotFoundError as e:
        raise ModelFileNotFound(f"{ref}: repository {ref.repo_id} has no file {filename} at revision "
                             f"{ref.revision or 'main'} (a model folder holds {' + '.join(MODEL_FILES)})") from e
    except errors.HFValidationError as e:
        raise ModelFileError(f"{ref}: not a valid repository id or revision ({e})") from e
    except OSError as e:  # HTTP and network failures (requests' errors are OSErrors)
        raise DownloadError(str(ref), f"could not fetch {filename}: {e}") from e


def _not_cached(ref: HubReference, filename: str, wanted: list[str]) -> DownloadError:
    """The file is in no local snapshot and the network was refused or unreachable: say which part is missing, and
    the one command that fetches every file the reference needs on a machine with network."""
    import shlex

    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    repo_dir = cache / f"models--{ref.repo_id.replace('/', '--')}"
    revision = ref.revision or "main"
    if not repo_dir.is_dir():
        what = f"repository {ref.repo_id} is not in the Hugging Face cache ({cache})"
    else:
        what = f"{filename} at revision {revision} is not in the cached copy of {ref.repo_id} ({repo_dir})"
    why = "HF_HUB_OFFLINE=1 forbids downloading it" if constants.HF_HUB_OFFLINE else "the Hub could not be reached"
    command = ["hf", "download", ref.repo_id, *wanted] + (["--revision", ref.revision] if ref.revision else [])
    hint = f"fetch them where there is network (`{shlex.join(command)}`) and copy HF_HOME here"
    error_type = OfflineError if constants.HF_HUB_OFFLINE else DownloadError
    return error_type(str(ref), f"{what}, and {why}; {hint}")
