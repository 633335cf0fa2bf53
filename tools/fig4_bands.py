"""Write the bands of the registry's time-share claims (Fig. 4, the draft-to-target forward ratios) from the rule of
specrepro.analysis.claims.band_from_spread: the paper's rounding plus the spread of its 500-request measurement.

    python tools/fig4_bands.py --traces ../shared/traces/llama3.1-8B-H100 [--write]

Per claim: ``tolerance_from`` (resolution kept from the registry, else 0.05 = half the last digit Fig. 4 prints;
spread from the released traces through the simulator's cost model, specrepro.analysis.sizing.claim_spread; requests =
config/paper.yaml's profiling.num_requests, the paper's 500) and ``tolerance: {abs: <band>}``. Without --write it
prints the table. n-gram drafting shares are upper bounds (their lookup runs on the host CPU).
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import yaml

from specrepro.analysis import sizing
from specrepro.analysis.claims import band_from_spread, load_claims

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "paper" / "claims.yaml"
#: claims whose band the rule sets: Fig. 4's time shares and the draft-to-target forward ratio of the text
IDS = re.compile(r"^(F4-(?!sampling-max$).*|F1-text-draft-fwd-8b)$")


def rows(traces):
    cfg = sizing.load_config(REPO / "config" / "paper.yaml")
    proxy = sizing.trace_proxy(cfg, sizing.released_trace_files(cfg, [traces]))
    raw = REGISTRY.read_text(encoding="utf-8")
    resolution = {e["id"]: e["tolerance_from"]["resolution"] for e in yaml.safe_load(raw)["claims"] if e.get("tolerance_from")}
    with tempfile.TemporaryDirectory() as tmp:  # the bands as they stand may not match their rule yet
        plain = Path(tmp) / "claims.yaml"
        plain.write_text(re.sub(r"(?m)^  tolerance_from:\n(    .*\n)+", "", raw), encoding="utf-8")
        claims = load_claims(plain)
    n = int(cfg["profiling"]["num_requests"])
    for c in claims:
        if not IDS.match(c.id) or c.evidence != "engine":
            continue
        res = resolution.get(c.id, 0.05)
        sp = sizing.claim_spread(c, claims, cfg, proxy)
        s = float(f"{sp.spread:.3g}")
        yield c, res, s, n, band_from_spread(res, s, n), sp.source


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", required=True)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    text = REGISTRY.read_text(encoding="utf-8")
    for c, res, s, n, tol, src in rows(a.traces):
        print(f"{c.id:48} {c.kind:6} v={c.value:<6g} r={res:<5g} s={s:<7g} n={n} tol={tol:g}  ({src})")
        start = text.index(f"- id: {c.id}\n")
        end = text.find("\n- id: ", start + 1)
        end = len(text) if end < 0 else end + 1
        block = text[start:end]
        block = re.sub(r"(?m)^  tolerance:\n(    (abs|rel): .*\n)+", "", block)
        block = re.sub(r"(?m)^  tolerance_from:\n(    .*\n)+", "", block)
        new = (f"  tolerance:\n    abs: {tol:g}\n  tolerance_from:\n    resolution: {res:g}\n    spread: {s:g}\n"
               f"    requests: {n}\n")
        block = re.sub(r"(?m)^(  source: .*\n)", lambda m: m.group(1) + new, block, count=1)
        text = text[:start] + block + text[end:]
    if a.write:
        REGISTRY.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
