"""Write config/prompts/smollm/train.jsonl: the drafters' training prompts (never benchmarked).

Four workloads shaped like the benchmark's (code editing, summarising, open chat, grade-school math),
generated from templates with a fixed seed. Code and documents are taken from the source of this
Python's standard library (PSF License 2.0): small functions to edit and module docstrings to
summarise; the other summaries are fictional local news stories from sentence templates (the
benchmark's summaries are of news). Rerunning with another Python may change the text; the committed
file is the input.

    python tools/make_smollm_train_prompts.py  # rewrites the file
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from specrepro.core.prompts import TEMPLATES  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "config" / "prompts" / "smollm" / "train.jsonl"
PER_WORKLOAD = 40
SEED = 7

CODE_MODULES = ["textwrap", "shlex", "fnmatch", "colorsys", "calendar", "statistics", "string", "heapq", "bisect",
                "posixpath", "glob", "html", "base64", "quopri", "uu", "difflib", "gettext", "keyword", "netrc",
                "random", "copy", "filecmp", "mimetypes", "operator", "pprint", "reprlib", "tabnanny", "token"]
CODE_EDITS = [
    "Add a docstring that explains what the function does.", "Add type hints to the function signature.",
    "Rename the function to use a more descriptive name.", "Add a comment above every loop explaining it.",
    "Replace single-letter variable names with descriptive names.", "Make the function raise a TypeError for None input.",
    "Remove the docstring and any comments.", "Convert the function into a method of a new class called Helper.",
    "Add a print statement that logs the arguments at the start.", "Use f-strings wherever strings are formatted.",
]
DOC_MODULES = ["json", "csv", "textwrap", "argparse", "logging", "pathlib", "shutil", "tempfile", "heapq", "bisect",
               "fractions", "decimal", "statistics", "difflib", "sched", "queue", "threading", "subprocess", "socket",
               "zipfile", "tarfile", "gzip", "pickle", "shelve", "sqlite3", "uuid", "urllib.parse", "http.client",
               "email", "calendar", "datetime", "random", "secrets", "hashlib", "hmac", "unittest", "doctest", "pdb",
               "timeit", "trace", "inspect", "ast", "dis", "tokenize", "codecs", "locale", "gettext", "string"]
CHAT = [
    ("Explain {x} in simple words.", ["how a rainbow forms", "what inflation is", "how vaccines work", "what a blockchain is",
                                      "how airplanes stay in the air", "what photosynthesis is", "how the internet works",
                                      "why the sky is blue", "what a black hole is", "how batteries store energy"]),
    ("Give me some tips for {x}.", ["learning a new language", "sleeping better", "saving money", "public speaking",
                                   "keeping houseplants alive", "cooking rice", "writing a CV", "moving to a new city",
                                   "training a puppy", "reading more books"]),
    ("Write a short poem about {x}.", ["the first snow", "an old lighthouse", "a busy train station", "morning coffee",
                                      "a summer storm", "the moon over the sea", "a lost key", "autumn in the park"]),
    ("What are the pros and cons of {x}?", ["working from home", "electric cars", "living in a big city", "online classes",
                                            "owning a cat", "solar panels", "social media", "a four-day work week"]),
    ("How do I {x}?", ["fix a flat bicycle tyre", "make a budget for a month", "prepare for a job interview",
                       "start a vegetable garden", "clean a laptop keyboard", "plan a trip abroad", "learn to swim",
                       "back up the photos on my phone"]),
]
NAMES = ["Anna", "Ben", "Carla", "David", "Eva", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Leo"]
ITEMS = [("apples", "basket"), ("pencils", "box"), ("cookies", "jar"), ("marbles", "bag"), ("stickers", "sheet")]


def code_prompts(rng: random.Random) -> list[dict]:
    funcs = []
    for name in CODE_MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this Python lacks
            continue
        for fname, fn in sorted(vars(mod).items()):
            if inspect.isfunction(fn) and fn.__module__ == name and not fname.startswith("_"):
                try:
                    src = textwrap.dedent(inspect.getsource(fn))
                except (OSError, TypeError):
                    continue
                if 4 <= src.count("\n") <= 22:
                    funcs.append(src)
    picked = rng.sample(funcs, PER_WORKLOAD)
    return [TEMPLATES["instructcoder"]({"input": src, "instruction": rng.choice(CODE_EDITS)}) for src in picked]


TOWNS = ["Ashford", "Brookvale", "Cedar Falls", "Dunmore", "Elmstead", "Fairhaven", "Glenrock", "Harwick",
         "Ivybridge", "Kingsmere", "Larchmont", "Northwick", "Oakridge", "Pinecrest", "Riverton", "Stonebury"]
PEOPLE = ["Maria Lopez", "James Okafor", "Sofia Novak", "Daniel Reyes", "Aisha Khan", "Peter Lindqvist",
          "Chen Wei", "Laura Bianchi", "Tom Hughes", "Nadia Petrova"]
FACILITIES = [("library", "students and families"), ("swimming pool", "schools and local clubs"),
              ("bus station", "commuters"), ("health centre", "older residents"), ("cycle path", "cyclists and walkers"),
              ("community garden", "families"), ("skate park", "teenagers"), ("fire station", "the northern villages")]
GROUPS = [("volunteers", "planted", "trees along the river"), ("students", "collected", "kilograms of litter from the beach"),
          ("farmers", "harvested", "tonnes of apples"), ("nurses", "gave", "flu vaccinations"),
          ("runners", "raised", "thousand dollars for the children's hospital"),
          ("birdwatchers", "counted", "pairs of nesting swans")]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
SEASONS = ["spring", "summer", "autumn", "winter"]


def news_article(rng: random.Random) -> str:
    """A short fictional local news story (CNN/DailyMail-shaped) from sentence templates; its wording is
    not the benchmark's (config/prompts/smollm/cnn.jsonl)."""
    town, who, title = rng.choice(TOWNS), rng.choice(PEOPLE), rng.choice(["Mayor", "Councillor", "Director"])
    day, season, year = rng.choice(DAYS), rng.choice(SEASONS), rng.randint(1990, 2015)
    if rng.random() < 0.5:
        fac, users = rng.choice(FACILITIES)
        s = [f"Residents of {town} can use a new {fac} from {day}, the local council said in a statement.",
             f"Building the {fac} took {rng.randint(8, 30)} months and cost {rng.randint(2, 40) / 2:g} million dollars,"
             f" part of it paid by a national grant.",
             f"{title} {who} told reporters that {users} had asked for it for more than {rng.randint(3, 12)} years.",
             f"Some neighbours had opposed the plan because of traffic, but a survey found that most people supported it.",
             f"The old {fac} will be turned into {rng.choice(['flats', 'a museum', 'offices', 'a youth club'])}.",
             f"An opening party with music and free food is planned for {rng.choice(DAYS)} evening."]
    else:
        grp, verb, obj = rng.choice(GROUPS)
        n = rng.randint(120, 900)
        s = [f"{grp.capitalize()} from {town} have {verb} {n} {obj} since the start of {season}, more than in any"
             f" earlier year.",
             f"The group started in {year} with just {rng.randint(3, 12)} members and now has more than {rng.randint(40, 200)}.",
             f"{who}, one of the organisers, thanked local businesses for lending tools and vans.",
             f"Experts from the university said projects like this one help both people and nature.",
             f"New members can sign up at the town hall or on the group's website.",
             f"The next big event is planned for {rng.choice(SEASONS)}, when they hope to pass {n + rng.randint(50, 300)}."]
    return " ".join(s[:rng.randint(4, 6)])


def doc_prompts(rng: random.Random) -> list[str]:
    """Summaries: fictional local news stories (the benchmark's are news too) and module docstrings."""
    news = [TEMPLATES["cnn"]({"article": news_article(rng)}) for _ in range(PER_WORKLOAD - 10)]
    docs = []
    for name in DOC_MODULES:
        try:
            doc = inspect.getdoc(importlib.import_module(name)) or ""
        except Exception:  # noqa: BLE001
            continue
        words = " ".join(doc.split()).split(" ")
        if len(words) >= 40:
            docs.append(" ".join(words[:140]))
    picked = rng.sample(docs, min(10, len(docs)))
    return news + [TEMPLATES["cnn"]({"article": d}) for d in picked]


def chat_prompts(rng: random.Random) -> list[str]:
    all_ = [t.format(x=x) for t, xs in CHAT for x in xs]
    return rng.sample(all_, PER_WORKLOAD)


def math_prompts(rng: random.Random) -> list[str]:
    out = []
    for i in range(PER_WORKLOAD):
        n, (item, cont) = rng.choice(NAMES), rng.choice(ITEMS)
        a, b, c = rng.randint(3, 12), rng.randint(4, 15), rng.randint(2, 30)
        kind = i % 4
        if kind == 0:
            q = f"{n} has {a} {cont}s with {b} {item} in each {cont}. {n} gives away {c} {item}. How many {item} are left?"
        elif kind == 1:
            q = f"{n} saves {a} dollars every week. After {b} weeks, {n} spends {c} dollars on a gift. How much money is left?"
        elif kind == 2:
            q = f"A shop sells {item} for {a} dollars per {cont}. {n} buys {b} {cont}s and pays with {a * b + c} dollars. How much change does {n} get?"
        else:
            q = f"{n} walks {a} kilometres on Monday and twice as far on Tuesday. On Wednesday {n} walks {c} kilometres. How far does {n} walk in total?"
        out.append(TEMPLATES["gsm8k"]({"question": q}))
    return out


def main() -> None:
    rng = random.Random(SEED)
    rows = []
    for workload, fn in (("code", code_prompts), ("summary", doc_prompts), ("chat", chat_prompts), ("math", math_prompts)):
        for i, text in enumerate(fn(rng), 1):
            rows.append({"id": f"train-{workload}-{i:02d}", "workload": workload, "prompt": text})
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{OUT}: {len(rows)} prompts", file=sys.stderr)


if __name__ == "__main__":
    main()
