"""The source code of the pinned engines (vLLM, SGLang), for checking job arguments without a GPU.

The engines the GPU images install cannot run on a CPU-only machine, but their PyPI source
distributions hold the code that parses every argument a job passes. :func:`source_tree` downloads
one (its URL from PyPI's simple index, else its JSON API), checks its SHA-256 against the pin
below, and unpacks it into a cache outside the repository (``$SPECREPRO_CACHE/sdists``, default
``~/.cache/specrepro/sdists``); later calls reuse the unpacked tree.
"""

from __future__ import annotations

import json
import os
import tarfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ...core.io import SpecReproError, atomic_path, sha256_file


@dataclass(frozen=True)
class Sdist:
    package: str
    version: str
    filename: str
    sha256: str


#: (package, version) -> the pinned source distribution (SHA-256 as PyPI lists it)
PINNED: dict[tuple[str, str], Sdist] = {
    s[:2]: Sdist(*s)
    for s in (
        ("vllm", "0.10.1.1", "vllm-0.10.1.1.tar.gz", "3099824ee4bdaa14c4c4f7178a092101a0ec206d4c9371edf295849b2b730a39"),
        ("vllm", "0.11.1", "vllm-0.11.1.tar.gz", "672af6f0a56117b9e84b8caacbfe437afba9f366cef8e524dcc5f3f03edd954e"),
        ("vllm", "0.34.0", "vllm-0.34.0.tar.gz", "fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113"),
        ("sglang", "0.5.9", "sglang-0.5.9.tar.gz", "11b1445bfb039c20217783850fda66a71b814391b2cf313f4e6cadc3b9fea41b"),
    )
}

PYPI_JSON = "https://pypi.org/pypi/{package}/{version}/json"
PYPI_SIMPLE = "https://pypi.org/simple/{package}/"


def cache_dir() -> Path:
    root = os.environ.get("SPECREPRO_CACHE") or str(Path.home() / ".cache" / "specrepro")
    return Path(root).expanduser() / "sdists"


def _sdist_url(package: str, version: str, filename: str) -> str:
    """The download URL of ``filename``: PyPI's simple index (PEP 691 JSON), else its JSON API.

    Some PyPI mirrors and proxies answer only the simple index (the per-version JSON API gives 404)."""
    errors = []
    simple = PYPI_SIMPLE.format(package=package)
    try:
        req = urllib.request.Request(simple, headers={"Accept": "application/vnd.pypi.simple.v1+json",
                                                      "User-Agent": "specrepro"})
        with urllib.request.urlopen(req, timeout=60) as r:
            for f in json.load(r).get("files", []):
                if f.get("filename") == filename:
                    return urllib.parse.urljoin(simple, f["url"])
        errors.append(f"{simple} lists no {filename}")
    except (OSError, ValueError) as exc:
        errors.append(f"{simple}: {exc}")
    api = PYPI_JSON.format(package=package, version=version)
    try:
        with urllib.request.urlopen(urllib.request.Request(api, headers={"User-Agent": "specrepro"}), timeout=60) as r:
            meta = json.load(r)
        for f in meta.get("urls", []):
            if f.get("filename") == filename:
                return urllib.parse.urljoin(api, f["url"])
        errors.append(f"{api} lists no {filename}")
    except (OSError, ValueError) as exc:
        errors.append(f"{api}: {exc}")
    raise SpecReproError(f"{package} {version}: no download URL of {filename} ({'; '.join(errors)}); "
                         f"put it in {cache_dir()} by hand")


def sdist_archive(package: str, version: str) -> Path:
    """The pinned sdist's archive in the cache, downloaded and checked on first use."""
    pin = PINNED.get((package, version))
    if pin is None:
        raise SpecReproError(f"{package} {version}: no pinned source distribution (add it to specrepro.engine.check.sources.PINNED)")
    path = cache_dir() / pin.filename
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        url = _sdist_url(package, version, pin.filename)
        with atomic_path(path) as tmp:
            try:
                urllib.request.urlretrieve(url, tmp)
            except OSError as exc:
                raise SpecReproError(f"download of {url} failed ({exc})") from None
            got = sha256_file(tmp)
            if got != pin.sha256:
                raise SpecReproError(f"{url}: SHA-256 {got} != pinned {pin.sha256}")
    elif sha256_file(path) != pin.sha256:
        raise SpecReproError(f"{path}: SHA-256 does not match the pin {pin.sha256} (delete it to download again)")
    return path


def source_tree(package: str, version: str) -> Path:
    """The unpacked source of a pinned engine (the directory holding its top-level package)."""
    root = cache_dir() / f"{package}-{version}"
    marker = root / ".specrepro-unpacked"
    if not marker.exists():
        archive = sdist_archive(package, version)
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith((".py", ".json", ".toml", ".txt", ".cfg"))]
            tar.extractall(cache_dir(), members=members, filter="data")
        marker.write_text(PINNED[(package, version)].sha256 + "\n")
    return root
