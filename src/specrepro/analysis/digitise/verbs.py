"""The ``digitise`` verb (``add_cli(sub)``): the digitiser's modules (numpy, pandas, matplotlib, PIL) load only when
it runs, so the CLI's start-up does not pay for them."""

from __future__ import annotations


def add_cli(sub) -> None:
    p = sub.add_parser("digitise", help="read the paper's figure images (markers, bars) independently")
    p.add_argument("--figures", required=True, help="folder with the paper's paper-fig<N>.png images")
    p.add_argument("--sha256", nargs="+", required=True, metavar="FILE=HEX",
                   help="images to read, each with its SHA-256 (only figures with a layout in FIGURES)")
    p.add_argument("--traceset", default="", help="trace set named in the simulator figures' metric keys")
    p.add_argument("-o", "--output", required=True, help="readings (CSV, one row per marker or bar)")

    def run(a):
        import re
        import sys

        from ...core.io import SpecReproError, write_csv
        from .agreement import verify_images
        from .layouts import FIGURES
        from .read import digitise_figures

        want = {}
        for item in a.sha256:
            name, sep, hexd = item.partition("=")
            if not sep or not re.fullmatch(r"[0-9a-f]{64}", hexd):
                raise SpecReproError(f"--sha256 {item!r}: expected FILE=<64 hex digits>")
            want[name] = hexd
        by_file = {lay.file: key for key, lay in FIGURES.items()}
        unknown = sorted(set(want) - set(by_file))
        if unknown:
            raise SpecReproError(f"no layout for {', '.join(unknown)} (known: {', '.join(sorted(by_file))})")
        verify_images(a.figures, want)
        names = [key for key, lay in FIGURES.items() if lay.file in want]
        df = digitise_figures(a.figures, names, a.traceset)
        write_csv(a.output, df, float_format="%.6g")
        for fig, g in df.groupby("figure", sort=False):
            print(f"{fig}: {int(g['read'].notna().sum())} markers/bars read, {int(g['readable'].sum())} readable",
                  file=sys.stderr)

    p.set_defaults(func=run)
