"""Models and datasets from the Hugging Face Hub at pinned revisions, and their manifests.

A manifest (``resources/models/<name>/manifest.json``, ``resources/datasets/<name>/manifest.json``)
says where an input came from and what its bytes are: ``{name, kind, source, repo, revision,
requested_revision, path, files: {relative path: sha256}, bytes}``. ``path`` is a directory (the
snapshot in the Hugging Face cache; for models it holds config.json and the weights). Models that
the pipeline builds itself (``source: build``) get the same manifest from the rule that builds them.

Every file is hashed and checked against the cache's own record of it (the blob name is the file's
LFS SHA-256, or its git blob SHA-1 for small files), so a damaged cache stops the run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .io import SpecReproError, read_json, sha256_file, write_json

TOKEN_HELP = "accept its licence on huggingface.co, create a token at https://huggingface.co/settings/tokens and export HF_TOKEN"


def _git_blob_sha1(path: Path) -> str:
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def hash_tree(root: str | os.PathLike) -> tuple[dict[str, str], int]:
    """``{relative path: sha256}`` and total bytes of every file under ``root``, verified where possible.

    In a Hugging Face snapshot each file links to ``blobs/<etag>``; the etag is the SHA-256 (LFS files)
    or the git blob SHA-1 (small files) of the content, and a mismatch means the cache is damaged.
    """
    root = Path(root)
    files: dict[str, str] = {}
    total = 0
    for p in sorted(root.rglob("*")):
        if not p.is_file() or ".cache" in p.relative_to(root).parts:
            continue
        rel = p.relative_to(root).as_posix()
        digest = sha256_file(p)
        etag = p.resolve().name if p.is_symlink() else ""
        bad = (len(etag) == 64 and etag != digest) or (len(etag) == 40 and etag != _git_blob_sha1(p))
        if bad:
            raise SpecReproError(
                f"{p}: content does not match the Hugging Face cache's checksum {etag} (damaged download): "
                f"delete {p.resolve()} and rerun"
            )
        files[rel] = digest
        total += p.stat().st_size
    if not files:
        raise SpecReproError(f"{root}: no files")
    return files, total


def _hub_error(exc: Exception, what: str, repo: str, revision: str | None, gated: bool, has_token: bool) -> SpecReproError:
    """One line for a failed Hub access: which input, why, and what to do."""
    from huggingface_hub import errors

    rev = revision or "main"
    if isinstance(exc, errors.GatedRepoError) or (gated and _status(exc) in (401, 403)):
        if has_token:
            return SpecReproError(f"{what}: the Hub rejected the token for gated repository {repo}: {TOKEN_HELP} (a token of an account that was granted access)")
        return SpecReproError(f"{what}: {repo} is gated and no token is set: {TOKEN_HELP}")
    if isinstance(exc, errors.RevisionNotFoundError):
        return SpecReproError(f"{what}: revision {rev} not found in {repo}: check the pinned revision in the config")
    if isinstance(exc, errors.RepositoryNotFoundError) or _status(exc) == 401:
        extra = "" if has_token else " (if it is private or gated, export HF_TOKEN)"
        return SpecReproError(f"{what}: repository {repo} not found on the Hub{extra}")
    if isinstance(exc, errors.LocalEntryNotFoundError):
        return SpecReproError(
            f"{what}: {repo}@{rev} is not in the cache and the Hub cannot be reached ({str(exc).splitlines()[-1][:120]}): "
            "check the network, or fill the cache on a machine that has one"
        )
    return SpecReproError(f"{what}: download of {repo}@{rev} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


def _status(exc: Exception) -> int | None:
    resp = getattr(exc, "response", None)
    return getattr(resp, "status_code", None)


def snapshot(
    repo: str,
    revision: str | None,
    cache_dir: str | os.PathLike,
    *,
    what: str,
    repo_type: str = "model",
    gated: bool = False,
    offline: bool = False,
    token: str | None = None,
    allow_patterns: Sequence[str] | None = None,
    endpoint: str | None = None,
    download: Callable[..., str] | None = None,
) -> Path:
    """The snapshot directory of ``repo`` at ``revision`` in ``cache_dir``, downloaded unless ``offline``.

    Offline, only the cache is read (``local_files_only``) and nothing touches the network; a miss is
    one line naming the input. Online, a gated repository without a token stops before any request.
    """
    if download is None:
        from huggingface_hub import snapshot_download as download
    if offline:
        try:
            return Path(download(repo, repo_type=repo_type, revision=revision, cache_dir=str(cache_dir),
                                 local_files_only=True, allow_patterns=allow_patterns))
        except Exception as exc:  # noqa: BLE001 - every miss becomes one line
            from huggingface_hub import errors

            if isinstance(exc, errors.LocalEntryNotFoundError) or isinstance(exc, errors.IncompleteSnapshotError):
                raise SpecReproError(
                    f"{what}: offline and {repo}@{revision or 'main'} is not (completely) in the cache {cache_dir}: "
                    "fill the cache on a machine with network (same config, offline: false) and copy it, or set offline: false"
                ) from None
            raise _hub_error(exc, what, repo, revision, gated, bool(token)) from None
    if gated and not token:
        raise SpecReproError(f"{what}: {repo} is gated and no token is set: {TOKEN_HELP}")
    try:
        return Path(download(repo, repo_type=repo_type, revision=revision, cache_dir=str(cache_dir),
                             token=token or False, allow_patterns=allow_patterns, endpoint=endpoint))
    except Exception as exc:  # noqa: BLE001
        raise _hub_error(exc, what, repo, revision, gated, bool(token)) from None


def revision_of(snapshot_dir: Path) -> str:
    """The commit SHA a cache snapshot directory stands for (its name)."""
    return snapshot_dir.name


def manifest(name: str, kind: str, source: str, path: Path, *, repo: str | None = None,
             revision: str | None = None, requested_revision: str | None = None, **extra: Any) -> dict:
    """The manifest of one input directory (hashes every file)."""
    files, total = hash_tree(path)
    return {
        "name": name, "kind": kind, "source": source, "repo": repo, "revision": revision,
        "requested_revision": requested_revision, "path": str(path), "files": files, "bytes": total, **extra,
    }


def fetch_model(name: str, hf: Mapping[str, Any], cache_dir: str, output: str, *, offline: bool = False,
                token: str | None = None, endpoint: str | None = None, download=None) -> dict:
    """Download (or find, offline) one model at its pinned revision and write its manifest to ``output``."""
    snap = snapshot(hf["repo"], hf.get("revision"), cache_dir, what=f"model {name}", gated=bool(hf.get("gated")),
                    offline=offline, token=token, endpoint=endpoint, download=download)
    if not (snap / "config.json").is_file():
        raise SpecReproError(f"model {name}: {hf['repo']} has no config.json at {snap}: is it a model repository?")
    kind = "drafter" if "/drafters/" in name else "model"
    m = manifest(name, kind, "hf", snap, repo=hf["repo"], revision=revision_of(snap),
                 requested_revision=hf.get("revision"))
    write_json(output, m)
    return m


def dataset_patterns(hf: Mapping[str, Any]) -> list[str] | None:
    """Which files of a dataset repository the run needs: the named file, else the whole snapshot."""
    return [hf["file"]] if hf.get("file") else None


def fetch_dataset(name: str, source: Mapping[str, Any], cache_dir: str, output: str, *, offline: bool = False,
                  token: str | None = None, endpoint: str | None = None, repo_root: str = ".",
                  sampling: Mapping[str, Any] | None = None, download=None) -> dict:
    """Obtain one dataset (a Hub repository at a pinned revision, or a prompts file) and write its manifest."""
    sampling = dict(sampling or {})
    if "prompts_file" in source:
        p = Path(repo_root) / source["prompts_file"]
        if not p.is_file():
            raise SpecReproError(f"dataset {name}: prompts file {p} not found")
        m = {"name": name, "kind": "dataset", "source": "file", "repo": None, "revision": None,
             "requested_revision": None, "path": str(p.parent), "files": {p.name: sha256_file(p)},
             "bytes": p.stat().st_size, **sampling}
        write_json(output, m)
        return m
    hf = source["hf"]
    snap = snapshot(hf["repo"], hf.get("revision"), cache_dir, what=f"dataset {name}", repo_type="dataset",
                    gated=bool(hf.get("gated")), offline=offline, token=token,
                    allow_patterns=dataset_patterns(hf), endpoint=endpoint, download=download)
    m = manifest(name, "dataset", "hf", snap, repo=hf["repo"], revision=revision_of(snap),
                 requested_revision=hf.get("revision"), subset=hf.get("subset"), split=hf.get("split"),
                 file=hf.get("file"), **sampling)
    write_json(output, m)
    return m


def tree_digest(files: Mapping[str, str]) -> str:
    """One SHA-256 over a manifest's ``{path: sha256}`` (sorted), to show a directory as one checksum."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def model_revision(m: Mapping[str, Any]) -> str:
    """The revision a model manifest records, else ``<source>:<tree digest>`` (a local or built model)."""
    return m.get("revision") or f"{m.get('source', 'local')}:{tree_digest(m.get('files') or {})[:16]}"


def run_manifest(paths: Sequence[str | os.PathLike]) -> dict:
    """``results/manifest.json``: every input of the run with its revision and checksum, one entry each.

    Reads model/dataset manifests (``files``) and released-trace records (``sha256``); a directory input
    is shown by :func:`tree_digest` of its files. Entries are sorted by kind and name.
    """
    entries = []
    for p in paths:
        rec = read_json(p)
        if "files" in rec:
            entries.append({
                "kind": rec.get("kind", "input"), "name": rec["name"], "source": rec["source"],
                "repo": rec.get("repo"), "revision": rec.get("revision"),
                "requested_revision": rec.get("requested_revision"),
                "sha256": tree_digest(rec["files"]), "files": len(rec["files"]), "bytes": rec.get("bytes"),
                "location": rec.get("path"),
            })
        else:  # a released-trace record written by fetch.fetch_verified
            entries.append({
                "kind": "trace", "name": rec["file"], "source": rec["source"], "repo": None,
                "revision": None, "requested_revision": None, "sha256": rec["sha256"], "files": 1,
                "bytes": None, "location": rec.get("url") if rec["source"] == "download" else rec["location"],
            })
    order = {"image": 0, "model": 1, "drafter": 2, "dataset": 3, "trace": 4}
    entries.sort(key=lambda e: (order.get(e["kind"], 9), e["name"]))
    return {"inputs": entries}


def hf_token(token_file: str | None) -> str | None:
    """The Hugging Face token: ``HF_TOKEN``, else what ``token_file`` holds (stripped) when it exists."""
    tok = os.environ.get("HF_TOKEN")
    if not tok and token_file and Path(token_file).is_file():
        tok = Path(token_file).read_text().strip() or None
    return tok


def config_view(model_dir: str | os.PathLike, changes: Mapping[str, Any], view_dir: str | os.PathLike) -> Path:
    """``view_dir``: a folder of links to every file of ``model_dir`` except ``config.json``, which is the model's
    with ``changes`` over it (the model served with a few config fields changed, its weights untouched). Made
    again when it exists (same content for the same arguments)."""
    src, view = Path(model_dir), Path(view_dir)
    cfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    view.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        link = view / f.name
        if f.name == "config.json":
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(f.resolve())
    tmp = view / "config.json.tmp"
    tmp.write_text(json.dumps({**cfg, **changes}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(view / "config.json")
    return view
