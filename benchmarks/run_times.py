#!/usr/bin/env python3
"""Where a Snakemake run's time went, from its log: wall time, job time per rule, the longest jobs.

    python benchmarks/run_times.py [RUN_DIR | LOG] [--cores 2] [--budget-min 25] [--top 10]

RUN_DIR is the run's working directory (its newest ``.snakemake/log/*.snakemake.log`` is read); the default is the
current directory. A job's time is from its start line to its "Finished jobid" line (the log's timestamps have
whole seconds). "Job time / cores" is the least wall time those jobs can take on that many cores: when the wall time
is close to it the run is bound by the machine, and only less work (or a faster machine) shortens it.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import re
import sys
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3}\s+\d+ [\d:]+ \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\S+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
LOGFILE = re.compile(r"^\s+log: (\S+)")
FINISHED = re.compile(r"^Finished jobid: (\d+)")


def parse(lines) -> tuple[list[dict], dt.datetime | None, dt.datetime | None]:
    """Finished jobs (rule, log, start, seconds) and the log's first and last timestamps."""
    now = first = None
    pending: dict | None = None
    started: dict[int, dict] = {}
    jobs = []
    for line in lines:
        line = line.rstrip("\n")
        m = STAMP.match(line)
        if m:
            now = dt.datetime.strptime(re.sub(r"\s+", " ", m.group(1)), "%a %b %d %H:%M:%S %Y")
            first = first or now
            continue
        m = RULE.match(line)
        if m:
            pending = {"rule": m.group(1), "log": ""}
            continue
        m = LOGFILE.match(line)
        if m and pending is not None:
            pending["log"] = m.group(1).rstrip(",")
            continue
        m = JOBID.match(line)
        if m and pending is not None:
            started[int(m.group(1))] = {**pending, "start": now}
            pending = None
            continue
        m = FINISHED.match(line)
        if m and int(m.group(1)) in started and now is not None:
            job = started.pop(int(m.group(1)))
            jobs.append({**job, "seconds": (now - job["start"]).total_seconds()})
    return jobs, first, now


def newest_log(path: Path) -> Path:
    if path.is_file():
        return path
    logs = sorted((path / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        sys.exit(f"run_times: no Snakemake log under {path / '.snakemake' / 'log'}: pass the run's directory or a log")
    return logs[-1]


def minutes(s: float) -> str:
    return f"{int(s // 60)} min {int(round(s % 60))} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default=".", help="the run's directory or one Snakemake log")
    ap.add_argument("--cores", type=int, default=2, help="the cores the run had (default 2, the CPU run's)")
    ap.add_argument("--budget-min", type=float, default=25.0, help="the wall-time budget in minutes (default 25)")
    ap.add_argument("--top", type=int, default=10, help="how many of the longest jobs to list")
    a = ap.parse_args()
    log = newest_log(Path(a.run))
    jobs, first, last = parse(log.open(encoding="utf-8", errors="replace"))
    if not jobs or first is None or last is None:
        sys.exit(f"run_times: {log}: no finished job in this log")
    wall = (last - first).total_seconds()
    total = sum(j["seconds"] for j in jobs if j["rule"] != "all")
    print(f"log: {log}")
    print(f"wall time {minutes(wall)} ({wall:.0f} s), budget {a.budget_min:g} min: "
          f"{'within' if wall <= 60 * a.budget_min else 'over'}")
    print(f"jobs finished {len(jobs)}, job time {total:.0f} s; job time / {a.cores} cores = {minutes(total / a.cores)} "
          f"({100 * total / a.cores / wall:.0f} % of the wall time)")
    by_rule: dict[str, list[float]] = collections.defaultdict(list)
    for j in jobs:
        by_rule[j["rule"]].append(j["seconds"])
    print(f"\n{'rule':32s} {'jobs':>5s} {'seconds':>8s} {'share':>6s} {'longest':>8s}")
    for rule, ds in sorted(by_rule.items(), key=lambda kv: -sum(kv[1])):
        if rule == "all":
            continue
        print(f"{rule:32s} {len(ds):5d} {sum(ds):8.0f} {100 * sum(ds) / max(total, 1):5.1f}% {max(ds):8.0f}")
    print(f"\nlongest {a.top} jobs:")
    for j in sorted(jobs, key=lambda j: -j["seconds"])[: a.top]:
        print(f"{j['seconds']:6.0f} s  {j['start']:%H:%M:%S}  {j['rule']:24s} {j['log']}")


if __name__ == "__main__":
    main()
