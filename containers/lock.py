#!/usr/bin/env python3
"""Resolve an image's top-level requirements (``<image>.in``) into a hashed lock (``<image>.lock``).

Usage (from the repository root, with a Python of the image's version, here 3.12, and pip >= 26.0):

    python3.12 containers/lock.py containers/vllm-paper.in
    python3 containers/lock.py --sizes containers/vllm-paper.lock   # bytes its pins download (README's table)

The resolver is pip's own (``pip install --dry-run --report``) against PyPI alone (no pip configuration,
no other index) for the image's platform (Ubuntu 24.04: glibc 2.39, x86_64), limited to files uploaded
before the ``uploaded-prior-to`` date, so the lock holds what an installation on that day would have got.
Every pin carries the SHA-256 of the file the resolver picked (``--hash=sha256:...``), which the image
installs with ``--require-hashes``. A pin that cannot be hashed from here says why (``# unhashed: ...``);
the image installs those in a second, separate step. Directives in the ``.in`` file (comment lines):

    # uploaded-prior-to: 2025-08-21T00:00:00Z
    # override: torch==2.7.1+cu128 [from INDEX-URL] [-- REASON]
        replaces the resolver's pin; its hash comes from PyPI (or INDEX-URL); when INDEX-URL cannot be
        reached from the locking machine the pin stays unhashed, and says so. REASON goes into the pin's note
        (why the pin may differ from what a pinned package requires)
    # pip-check: vllm 0.34.0 has requirement flashinfer-python==0.7.3, but you have flashinfer-python 0.7.4.
        a line `pip check` prints for the installed lock (an override that breaks a requirement), copied into
        the lock's header; the image's build fails when `pip check` prints anything else
    # absent-here: NAME==VERSION [like NAME==OTHER]
        the index lacks NAME==VERSION although a pinned package requires exactly it; a metadata-only
        stand-in with OTHER's dependencies lets the resolution finish, and the pin stays unhashed.
        The lock fails when the index does hold NAME==VERSION (the directive is then wrong).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import base64
import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

INDEX = "https://pypi.org/simple"
# The images' platform tags, best first, as pip on Ubuntu 24.04 (glibc 2.39, x86_64) ranks them.
PLATFORMS = [f"manylinux_2_{m}_x86_64" for m in range(39, 16, -1)] + ["manylinux2014_x86_64"]
PLATFORMS += [f"manylinux_2_{m}_x86_64" for m in range(16, 11, -1)] + ["manylinux2010_x86_64"]
PLATFORMS += [f"manylinux_2_{m}_x86_64" for m in range(11, 4, -1)] + ["manylinux1_x86_64", "linux_x86_64", "any"]
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_in(text: str) -> tuple[list[str], dict]:
    """(top-level requirements, directives) of an ``.in`` file's text."""
    reqs, opts = [], {"override": [], "absent": [], "pip_check": [], "reasons": {}}
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"#\s*(uploaded-prior-to|override|absent-here|pip-check):\s*(.+)", line)
        if m:
            key, value = m.groups()
            value, _, reason = value.partition(" -- ")
            parts = value.split()
            if key == "uploaded-prior-to":
                opts["cutoff"] = value.strip()
            elif key == "pip-check":
                opts["pip_check"].append(m.group(2).strip())
            elif key == "override":
                opts["override"].append((parts[0], parts[2] if len(parts) == 3 and parts[1] == "from" else None))
                if reason.strip():
                    opts["reasons"][parts[0]] = reason.strip()
            else:
                opts["absent"].append((parts[0], parts[2] if len(parts) == 3 and parts[1] == "like" else None))
        elif line and not line.startswith("#"):
            reqs.append(line)
    return reqs, opts


def parse_lock(text: str) -> dict[str, dict]:
    """{name: {"version", "hashes", "note"}} of a lock's text, in file order."""
    pins = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        spec, _, note = line.partition("  # ")
        name, version = spec.split()[0].split("==")
        pins[name] = {"version": version, "hashes": HASH.findall(spec), "note": note or None}
    return pins


def pip_check_lines(text: str) -> list[str]:
    """The ``# pip-check:`` lines of a lock's header: what ``pip check`` prints for the installed lock."""
    return [m.group(1).strip() for m in re.finditer(r"^#\s*pip-check:\s*(.+)$", text, re.M)]


def render(in_name: str, python: str, cutoff: str | None, pins: dict[str, dict],
           pip_check: list[str] | None = None) -> str:
    """The lock's text: a header, then one line per pin in canonical-name order."""
    lines = [
        f"# Full lock of {in_name}, written by containers/lock.py with Python {python}; do not edit by hand.",
        f"# uploaded-prior-to: {cutoff or 'none'}",
        "# Every pin carries the SHA-256 of its file on PyPI (installed with --require-hashes) or says why not.",
    ]
    if pip_check:
        lines.append("# What `pip check` prints for this lock (the image's build fails on any other line):")
        lines += [f"# pip-check: {x}" for x in pip_check]
    for name in sorted(pins, key=canonical):
        p = pins[name]
        line = f"{name}=={p['version']}" + "".join(f" --hash=sha256:{h}" for h in p["hashes"])
        lines.append(line + (f"  # {p['note']}" if p.get("note") else ""))
    return "\n".join(lines) + "\n"


def simple_page(name: str, index: str = INDEX) -> dict:
    """Project ``name``'s page on a PEP 691 (JSON) simple index: its ``files`` and (PEP 700) ``versions``."""
    req = urllib.request.Request(f"{index}/{canonical(name)}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def has_version(name: str, version: str) -> bool:
    """Whether PyPI holds any file of NAME==VERSION."""
    return version in simple_page(name)["versions"]


def reachable(url: str) -> bool:
    host = urllib.parse.urlparse(url).hostname
    try:
        socket.create_connection((host, 443), timeout=10).close()
        return True
    except OSError:
        return False


def core_metadata(spec: str) -> str:
    """The METADATA of NAME==VERSION on PyPI (PEP 658 file, or read from the wheel)."""
    name, version = spec.split("==")
    for f in simple_page(name)["files"]:
        if f["filename"].endswith(".whl") and f"-{version}-" in f["filename"]:
            if f.get("core-metadata"):
                return urllib.request.urlopen(f["url"] + ".metadata", timeout=60).read().decode()
            data = urllib.request.urlopen(f["url"], timeout=600).read()
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                return z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    raise SystemExit(f"no wheel of {spec} on PyPI")


def stand_in_wheel(spec: str, like: str | None, folder: Path) -> None:
    """Write a metadata-only wheel NAME-VERSION-py3-none-any.whl into ``folder``."""
    name, version = spec.split("==")
    requires = []
    if like:
        requires = [ln for ln in core_metadata(like).splitlines() if ln.startswith(("Requires-Dist:", "Requires-Python:"))]
    dist = f"{canonical(name).replace('-', '_')}-{version}"
    meta = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *requires]) + "\n"
    files = {
        f"{dist}.dist-info/METADATA": meta,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: specrepro-lock\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},{len(t)}\n"
        for p, t in files.items()
    ) + f"{dist}.dist-info/RECORD,,\n"
    files[f"{dist}.dist-info/RECORD"] = record
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for p, t in files.items():
            z.writestr(zipfile.ZipInfo(p, (1980, 1, 1, 0, 0, 0)), t)
    (folder / f"{dist}-py3-none-any.whl").write_bytes(buf.getvalue())


def pip_report(reqs: list[str], cutoff: str | None, index: str = INDEX, no_deps: bool = False,
               find_links: Path | None = None) -> list[dict]:
    """pip's installation report (``install`` items) for ``reqs`` on the image's platform, from ``index`` alone."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
               "--index-url", index, "--report", str(tmp / "report.json"), "--only-binary=:all:",
               "--target", str(tmp / "t"), "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
               "--implementation", "cp"]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        if cutoff:
            cmd += ["--uploaded-prior-to", cutoff]
        if no_deps:
            cmd.append("--no-deps")
        if find_links:
            cmd += ["--find-links", str(find_links)]
        # no pip configuration of this machine (local mirrors, constraints): PyPI as everyone sees it
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        subprocess.run(cmd + reqs, check=True, env=env)
        return json.loads((tmp / "report.json").read_text())["install"]


def item_hash(item: dict) -> str:
    h = ((item.get("download_info") or {}).get("archive_info") or {}).get("hashes", {}).get("sha256")
    if not h:
        raise SystemExit(f"pip reported no sha256 for {item['metadata']['name']}: {item.get('download_info')}")
    return h


def resolve(reqs: list[str], opts: dict) -> dict[str, dict]:
    """{name: {"version", "hashes", "note"}}: pip's resolution with the .in's overrides and stand-ins."""
    for spec, _ in opts["absent"]:
        if has_version(*spec.split("==")):
            raise SystemExit(f"absent-here: {spec} is on PyPI now: remove the directive and lock again")
    with tempfile.TemporaryDirectory() as tmp:
        links = Path(tmp)
        for spec, like in opts["absent"]:
            stand_in_wheel(spec, like, links)
        items = pip_report(reqs, opts.get("cutoff"), find_links=links)
    absent = {canonical(s.split("==")[0]) for s, _ in opts["absent"]}
    pins = {}
    for i in items:
        name, version = i["metadata"]["name"], i["metadata"]["version"]
        if canonical(name) in absent:
            pins[name] = {"version": version, "hashes": [],
                          "note": "unhashed: absent from PyPI when locked, a pinned package requires exactly it (see .in)"}
        else:
            pins[name] = {"version": version, "hashes": [item_hash(i)], "note": None}
    by_index: dict[str, list[str]] = {}
    for spec, index in opts["override"]:
        name, version = spec.split("==")
        key = next((k for k in pins if canonical(k) == canonical(name)), name)
        chose = pins.pop(key, {}).get("version", "nothing")
        why = opts.get("reasons", {}).get(spec)
        pins[name] = {"version": version, "hashes": [],
                      "note": f"override (resolver chose {chose})" + (f": {why}" if why else "")}
        by_index.setdefault(index or INDEX, []).append(spec)
    for index, specs in by_index.items():
        if index != INDEX and not reachable(index):
            for spec in specs:
                pins[spec.split("==")[0]]["note"] += f"; unhashed: from {index}, not reachable when locked"
            continue
        cutoff = opts.get("cutoff") if index == INDEX else None
        for i in pip_report(specs, cutoff, index=index, no_deps=True):
            key = next(k for k in pins if canonical(k) == canonical(i["metadata"]["name"]))
            pins[key]["hashes"] = [item_hash(i)]
    return pins


def download_sizes(lock_text: str, index: str = INDEX) -> tuple[int, int, list[str]]:
    """(bytes, files) of the files a lock's hashed pins name on the index (PEP 700 ``size``), and the pins it could
    not size: unhashed ones (another index) and any whose file the index lists without a size."""
    pins = []
    for line in lock_text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            pins.append((line.split()[0], re.findall(r"--hash=sha256:([0-9a-f]{64})", line)))

    def size(pin):
        spec, hashes = pin
        if not hashes:
            return spec, None
        files = {f["hashes"].get("sha256"): f for f in simple_page(spec.split("==")[0], index)["files"]}
        f = next((files[h] for h in hashes if h in files), None)
        return spec, (int(f["size"]) if f is not None and f.get("size") is not None else None)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        sized = list(pool.map(size, pins))
    got = [n for _, n in sized if n is not None]
    return sum(got), len(got), [spec for spec, n in sized if n is None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("infile", type=Path, help="an image's .in file (or, with --sizes, its .lock)")
    ap.add_argument("--sizes", action="store_true",
                    help="print how many bytes of files the lock's pins download from the index, and what it cannot size")
    a = ap.parse_args()
    if a.sizes:
        total, files, missing = download_sizes(a.infile.read_text())
        print(f"{a.infile}: {total / 1e9:.2f} GB in {files} files from {INDEX}"
              + (f"; not sized: {', '.join(missing)}" if missing else ""))
        return
    reqs, opts = parse_in(a.infile.read_text())
    pins = resolve(reqs, opts)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    out = a.infile.with_suffix(".lock")
    text = render(a.infile.name, python, opts.get("cutoff"), pins, opts.get("pip_check"))
    tmp = out.with_suffix(".lock.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"{out}: {len(pins)} packages, {sum(1 for p in pins.values() if not p['hashes'])} unhashed")


if __name__ == "__main__":
    main()
