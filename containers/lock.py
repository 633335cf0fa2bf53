#!/usr/bin/env python3
"""Resolve an image's top-level requirements (``<image>.in``) into a full lock (``<image>.lock``).

Usage (from the repository root, with a Python of the image's version, here 3.12):

    python3.12 containers/lock.py containers/vllm-paper.in

The resolver is pip's own (``pip install --dry-run --report``) for the image's platform, limited to
files uploaded before the ``uploaded-prior-to`` date, so the lock holds what an installation on that
day would have got. Directives in the ``.in`` file (comment lines):

    # uploaded-prior-to: 2025-08-21T00:00:00Z
    # override: torch==2.7.1+cu128      replaces the resolver's pin (a build from another index)
    # absent-here: NAME==VERSION [like NAME==OTHER]
        the index this lock was made from lacks NAME==VERSION (a partial mirror); a metadata-only
        stand-in with OTHER's dependencies lets the resolution finish. The image build installs
        the real file, and ``pip check`` there catches a wrong dependency guess.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

PLATFORMS = [f"manylinux_2_{m}_x86_64" for m in (39, 35, 34, 31, 28, 27, 24, 17, 5)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64", "any"]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_in(path: Path) -> tuple[list[str], dict]:
    reqs, opts = [], {"override": [], "absent": []}
    for line in path.read_text().splitlines():
        line = line.strip()
        m = re.match(r"#\s*(uploaded-prior-to|override|absent-here):\s*(.+)", line)
        if m:
            key, value = m.groups()
            if key == "uploaded-prior-to":
                opts["cutoff"] = value.strip()
            elif key == "override":
                opts["override"].append(value.strip())
            else:
                parts = value.split()
                opts["absent"].append((parts[0], parts[2] if len(parts) == 3 and parts[1] == "like" else None))
        elif line and not line.startswith("#"):
            reqs.append(line)
    return reqs, opts


def core_metadata(spec: str) -> str:
    """The METADATA of NAME==VERSION from PyPI's JSON simple API (PEP 691 / PEP 658)."""
    name, version = spec.split("==")
    req = urllib.request.Request(
        f"https://pypi.org/simple/{canonical(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
    for f in files:
        if f["filename"].endswith(".whl") and f"-{version}-" in f["filename"]:
            if f.get("core-metadata"):
                return urllib.request.urlopen(f["url"] + ".metadata", timeout=60).read().decode()
            # no separate metadata file: read METADATA from the wheel itself
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


def resolve(reqs: list[str], opts: dict) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        links = tmp / "stand-ins"
        links.mkdir()
        for spec, like in opts["absent"]:
            stand_in_wheel(spec, like, links)
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(tmp / "report.json"), "--only-binary=:all:", "--target", str(tmp / "t"),
               "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
               "--implementation", "cp", "--find-links", str(links)]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        if "cutoff" in opts:
            cmd += ["--uploaded-prior-to", opts["cutoff"]]
        subprocess.run(cmd + reqs, check=True)
        report = json.loads((tmp / "report.json").read_text())
    return {i["metadata"]["name"]: i["metadata"]["version"] for i in report["install"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("infile", type=Path)
    a = ap.parse_args()
    reqs, opts = parse_in(a.infile)
    pins = resolve(reqs, opts)
    notes = {}
    for spec in opts["override"]:
        name, version = spec.split("==")
        key = next((k for k in pins if canonical(k) == canonical(name)), name)
        notes[canonical(name)] = f"override (resolver chose {pins.get(key, 'nothing')})"
        pins.pop(key, None)
        pins[name] = version
    for spec, _ in opts["absent"]:
        notes[canonical(spec.split("==")[0])] = "absent from the index the lock was made from (see .in)"
    lines = [
        f"# Full lock of {a.infile.name}, written by containers/lock.py with Python "
        f"{sys.version_info.major}.{sys.version_info.minor}; do not edit by hand.",
        f"# uploaded-prior-to: {opts.get('cutoff', 'none')}",
    ]
    for name in sorted(pins, key=canonical):
        note = notes.get(canonical(name))
        lines.append(f"{name}=={pins[name]}" + (f"  # {note}" if note else ""))
    out = a.infile.with_suffix(".lock")
    out.write_text("\n".join(lines) + "\n")
    print(f"{out}: {len(pins)} packages")


if __name__ == "__main__":
    main()
