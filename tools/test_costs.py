"""Measure the test suite file by file (one pytest process per file, so a shared machine is never asked for the
whole suite at once), and sum what the fast and the full loop cost.

    python tools/test_costs.py run  --out costs/ [--lock /tmp/heavy.lock] [--marker "not slow"] [FILES...]
    python tools/test_costs.py sum  costs/

``run`` writes ``<out>/<file>.jsonl`` (every test's wall and CPU seconds, from ``tests/_markers.py``'s
``--cost-report``), ``<out>/<file>.log`` (pytest's output with ``--durations``) and ``<out>/<file>.meta.json``
(the file's wall time, exit status and the load average before and after). The budget check is off while
measuring (``fast_cpu_budget`` raised), the marker checks stay on. ``sum`` prints per file and in total the
wall seconds of the whole file and of its fast part (tests not marked slow, with the fixtures they set up).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(files: list[Path], out: Path, lock: str | None, marker: str | None, extra: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        stem = f.stem
        report = out / f"{stem}.jsonl"
        report.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pytest", str(f), "-q", "-p", "no:cacheprovider", "--durations=0",
               "--durations-min=0.5", "-o", "fast_cpu_budget=1e9", "--cost-report", str(report), *extra]
        if marker:
            cmd += ["-m", marker]
        if lock:
            cmd = ["flock", lock, "nice", "-n", "5", *cmd]
        before, t0 = load(), time.time()
        with open(out / f"{stem}.log", "w") as log:
            rc = subprocess.call(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        meta = {"file": str(f), "rc": rc, "wall_incl_lock_wait": round(time.time() - t0, 1), "load_before": before,
                "load_after": load(), "started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0))}
        tail = (out / f"{stem}.log").read_text().strip().splitlines()[-1:]
        meta["summary"] = tail[0] if tail else ""
        (out / f"{stem}.meta.json").write_text(json.dumps(meta, indent=1))
        print(json.dumps(meta), flush=True)


def summarise(out: Path) -> None:
    total = {"all_wall": 0.0, "all_cpu": 0.0, "fast_wall": 0.0, "fast_cpu": 0.0, "n": 0, "fast_n": 0}
    print(f"{'file':34} {'tests':>5} {'wall s':>8} {'cpu s':>8} | {'fast':>5} {'wall s':>8} {'cpu s':>8}")
    for report in sorted(out.glob("*.jsonl")):
        rows = [json.loads(x) for x in report.read_text().splitlines() if x.strip()]
        fixtures: dict[str, dict] = {}
        fast_fixtures: dict[str, dict] = {}
        w = c = fw = fc = 0.0
        nf = 0
        for r in rows:
            slow = "slow" in r["marks"]
            w, c = w + r["wall"], c + r["cpu"]
            if not slow:
                fw, fc, nf = fw + r["wall"], fc + r["cpu"], nf + 1
            for name, fx in r["fixtures"].items():
                fixtures[name] = fx
                if not slow:
                    fast_fixtures[name] = fx
        w += sum(x["wall"] for x in fixtures.values())
        c += sum(x["cpu"] for x in fixtures.values())
        fw += sum(x["wall"] for x in fast_fixtures.values())
        fc += sum(x["cpu"] for x in fast_fixtures.values())
        print(f"{report.stem:34} {len(rows):5d} {w:8.1f} {c:8.1f} | {nf:5d} {fw:8.1f} {fc:8.1f}")
        for k, v in (("all_wall", w), ("all_cpu", c), ("fast_wall", fw), ("fast_cpu", fc), ("n", len(rows)),
                     ("fast_n", nf)):
            total[k] += v
    print(f"{'total':34} {total['n']:5d} {total['all_wall']:8.1f} {total['all_cpu']:8.1f} | {total['fast_n']:5d} "
          f"{total['fast_wall']:8.1f} {total['fast_cpu']:8.1f}")
    print("(test time only: add about 4 s of collection per pytest process; a module fixture is counted once)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("files", nargs="*", type=Path)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--lock", help="flock this file around each pytest process (e.g. /tmp/heavy.lock)")
    r.add_argument("--marker", help="pytest -m expression")
    r.add_argument("--pytest-arg", action="append", default=[])
    s = sub.add_parser("sum")
    s.add_argument("out", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        files = a.files or sorted((REPO / "tests").glob("test_*.py"))
        run(files, a.out, a.lock, a.marker, a.pytest_arg)
    else:
        summarise(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
