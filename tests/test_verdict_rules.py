"""Page 1 states the decision rules (as many as it names) with the counts under each, and the counts are what the rules applied give
(issue 24, item 1): recomputed from the claims table, each claim re-decided by the rule the page names for it."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
import yaml

from specrepro.analysis.claims import (INTERVAL, NOT_MEASURED, POINT, SAME_POINT, STATUSES, evaluate, load_claims,
                                       status_from_interval)
from specrepro.report import render

from conftest import REPO
from test_report import TEMPLATES, minimal

REGISTRY = REPO / "paper" / "claims.yaml"
#: the page's name of each rule -> the decided_on it must count, and whether it decides on the point
PAGE_RULES = {"Simulator fidelity": (SAME_POINT, True), "Statistically reproduced": (INTERVAL, False),
              "No interval": (POINT, True)}


def page_counts(tex: str) -> dict[str, dict[str, int]]:
    """The counts page 1 prints per rule: ``\\textbf{<rule>} {(}N claims: a reproduced[, b consistent ...], c not
    reproduced)``."""
    out = {}
    for name in PAGE_RULES:
        m = re.search(r"\\textbf\{" + name + r"(?: \([FI]\))?\}\s+\{\(\}(\d+) claims: (\d+) reproduced(?:, (\d+) consistent but not "
                      r"resolved)?, (\d+) not reproduced\)", tex.replace("\n", " "))
        if m:
            out[name] = {"total": int(m[1]), "reproduced": int(m[2]), "consistent": int(m[3] or 0),
                         "not reproduced": int(m[4])}
    return out


def _f(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v) else float(v)


def recount(table: pd.DataFrame, registry: dict) -> dict[str, dict[str, int]]:
    """Re-decide every decided claim of ``table`` by the rule page 1 names for its ``decided_on``; fail where the
    status in the table is not what that rule gives."""
    out = {name: {"total": 0, "reproduced": 0, "consistent": 0, "not reproduced": 0} for name in PAGE_RULES}
    for r in table.to_dict("records"):
        if r["status"] == NOT_MEASURED:
            continue
        name, (_, on_point) = next((n, v) for n, v in PAGE_RULES.items() if v[0] == r["decided_on"])
        c = registry[r["id"]]
        if on_point:
            other = (r["this_run_b"], None, None) if c.kind == "ordering" else None
            got = status_from_interval(c, r["this_run"], other=other)
        else:
            other = (r["this_run_b"], _f(r["ci_low_b"]), _f(r["ci_high_b"])) if c.kind == "ordering" else None
            got = status_from_interval(c, r["this_run"], _f(r["ci_low"]), _f(r["ci_high"]), other=other)
        assert got == r["status"], f"{r['id']}: page 1 says {name} decides it, which gives {got}, not {r['status']}"
        if name == "Simulator fidelity":
            assert c.evidence == "simulator", f"{r['id']}: decided as simulator fidelity but evidence {c.evidence}"
        out[name]["total"] += 1
        out[name][{STATUSES[0]: "reproduced", STATUSES[1]: "consistent", STATUSES[2]: "not reproduced"}[r["status"]]] += 1
    return out


NUMBER_WORDS = {"One": 1, "Two": 2, "Three": 3, "Four": 4}


def assert_rules_named_match_rules_listed(text: str, listed: int) -> None:
    """``<N> rules decide them`` names as many rules as the text then lists (issue 24: page 1 said "Two rules" and
    listed three where claims without an interval were decided)."""
    m = re.search(r"(\w+) rules? decides? (?:them|it)\b", text)
    assert m, "no '<N> rules decide' sentence"
    assert NUMBER_WORDS.get(m[1]) == listed, f"says {m[1]!r} rules decide, lists {listed}"


def check_page_one(table: pd.DataFrame, registry: dict) -> None:
    run_config, prov, _ = minimal("cpu")
    tex = render(TEMPLATES, run_config, prov, table, [], [])
    page1 = tex[:tex.index("\\clearpage")]
    want = {n: c for n, c in recount(table, registry).items() if c["total"] or n != "No interval"}
    assert page_counts(page1) == want
    assert_rules_named_match_rules_listed(page1, len(want))
    # the wording of each rule: fidelity on the point, statistics on the whole interval
    assert re.search(r"Simulator fidelity.*?\\emph\{point value\}", page1, re.S)
    assert re.search(r"Statistically reproduced.*?whole 95\\,\\% \\emph\{interval\} satisfies", page1, re.S)


def test_page_one_rules_match_the_rules_applied(tmp_path):
    """A synthetic registry where the point and the interval decide differently: each rule's count on page 1 is what
    that rule gives, so a page that named the interval rule for a point-decided claim (or the reverse) fails."""
    base = {"group": "Fig. 10: g", "statement": "s", "unit": "x", "source": "Fig. 10"}
    entries = [
        {**base, "id": "same", "value": 2.0, "tolerance": {"abs": 0.1}, "evidence": "simulator", "measured_by": "m.s"},
        {**base, "id": "iv", "value": 2.0, "tolerance": {"abs": 0.1}, "evidence": "simulator", "measured_by": "m.v"},
        {**base, "id": "iv2", "value": 2.0, "tolerance": {"abs": 0.5}, "evidence": "trace", "measured_by": "m.v"},
        {**base, "id": "cnt", "kind": "lower", "value": 3, "evidence": "trace", "measured_by": "m.c"},
        {**base, "id": "eng", "kind": "below-one", "value": 0.9, "evidence": "engine", "measured_by": "m.e"},
    ]
    reg = tmp_path / "claims.yaml"
    reg.write_text(yaml.safe_dump({"claims": entries}))
    metrics = {"m.s": 2.05, "m.s.ci_low": 1.8, "m.s.ci_high": 2.3, "m.s.n": 300, "m.s.same_sample": 1,
               "m.v": 2.05, "m.v.ci_low": 1.8, "m.v.ci_high": 2.3, "m.v.n": 300, "m.c": 5,
               "m.e": 0.9, "m.e.ci_low": 0.8, "m.e.ci_high": 0.95, "m.e.n": 10}
    claims = load_claims(reg)
    table = evaluate(claims, metrics, "cpu")
    registry = {c.id: c for c in claims}
    check_page_one(table, registry)
    counts = page_counts(render(TEMPLATES, *minimal("cpu")[:2], table, [], []))
    assert counts["Simulator fidelity"] == {"total": 1, "reproduced": 1, "consistent": 0, "not reproduced": 0}
    assert counts["Statistically reproduced"] == {"total": 2, "reproduced": 1, "consistent": 1, "not reproduced": 0}
    assert counts["No interval"]["total"] == 1
    # the same-sample claim's interval [1.8, 2.3] leaves its band [1.9, 2.1]: counted as an interval rule it would
    # be "consistent", so a page counting it there and the table disagree
    wrong = table.copy()
    wrong.loc[wrong["id"] == "same", "decided_on"] = INTERVAL
    with pytest.raises(AssertionError, match="page 1 says Statistically reproduced"):
        check_page_one(wrong, registry)
    # without a claim decided on a point of no interval, page 1 lists (and names) two rules
    two = table[table["decided_on"] != POINT]
    check_page_one(two, registry)
    assert "No interval" not in page_counts(render(TEMPLATES, *minimal("cpu")[:2], two, [], []))
    # the old page's "Two rules decide them" before three listed rules fails the count
    with pytest.raises(AssertionError, match="says 'Two' rules decide, lists 3"):
        assert_rules_named_match_rules_listed("Two rules decide them", len(counts))


def test_appendix_names_as_many_rules_as_it_lists():
    """The appendix's "How a claim is decided" names its rules (\\emph{...}:) and says how many there are."""
    run_config, prov, claims = minimal("cpu")
    tex = render(TEMPLATES, run_config, prov, claims, [], [])
    how = tex[tex.index("How a claim is decided"):]
    how = how[:how.index("Not measured}")]
    listed = re.findall(r"\\emph\{(Simulator fidelity|Statistically reproduced|No interval)\}:", how)
    assert listed == ["Simulator fidelity", "Statistically reproduced", "No interval"]
    assert_rules_named_match_rules_listed(how, len(listed))


@pytest.mark.skipif(not (REPO / "results" / "claims.csv").exists(), reason="no results/claims.csv (run the pipeline)")
def test_page_one_rules_on_this_runs_claims():
    """The same check on this checkout's own ``results/claims.csv``."""
    table = pd.read_csv(REPO / "results" / "claims.csv", keep_default_na=False, na_values=[""])
    check_page_one(table, {c.id: c for c in load_claims(REGISTRY)})
