"""Regenerate the figures the docs show, into the tracked ``docs/plots/`` (the one command that
writes there: the docs' own examples write to the git-ignored ``plots/``)::

    python scripts/regen_figures.py            # every figure in FIGURES
    python scripts/regen_figures.py --check    # exit 1 when one is missing or not in FIGURES

Each figure is an ``edgepe plot`` command run in this process; the quant-error figure needs an
int8 artifact, exported first into a temporary folder. The benchmark's figures (``docs/bench.json``,
``docs/bench.png``, ``docs/BENCHMARKS.md``, ``docs/readme/bench.md``) come from
``scripts/bench.py --readme docs/readme/bench.md`` (``tests/test_bench_docs.py`` checks the docs
quote its latest output). ``scripts/`` is never imported by the package.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLOTS = ROOT / "docs" / "plots"
# file name -> the edgepe plot arguments (before --out); "{int8}" is the int8 artifact's path.
FIGURES = {
    "binary-heatmap-L64.png": ["--scheme", "binary", "--max-len", "64"],
    "gray-heatmap-L64.png": ["--scheme", "gray", "--max-len", "64"],
    "hamming-binary-vs-gray-L64.png": ["--scheme", "gray", "--max-len", "64", "--kind", "hamming"],
    "hamming-binary-vs-gray-L64.svg": ["--scheme", "gray", "--max-len", "64", "--kind", "hamming"],
    "sinusoidal-similarity-L128.png": ["--scheme", "sinusoidal", "--max-len", "128", "--kind",
                                       "similarity"],
    "binary-int8-quant-error-L64.png": ["--kind", "quant-error", "--artifact", "{int8}"],
}
INT8 = ["export", "--scheme", "binary", "--max-len", "64", "--d-model", "16", "--quantize",
        "int8", "--no-verify", "-q"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only check that docs/plots holds exactly these figures")
    args = parser.parse_args(argv)
    present = {p.name for p in PLOTS.iterdir()} if PLOTS.is_dir() else set()
    if args.check:
        wrong = sorted(present ^ set(FIGURES))
        for name in wrong:
            print(f"docs/plots/{name}: " + ("not made by this script" if name in present
                                            else "missing"))
        return 1 if wrong else 0
    sys.path.insert(0, str(ROOT))
    from typer.testing import CliRunner

    from edgepe.cli import app

    runner = CliRunner()
    PLOTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        int8 = str(Path(tmp) / "binary-int8.onnx")
        done = runner.invoke(app, [*INT8, "--out", int8])
        if done.exit_code:
            print(done.output, file=sys.stderr)
            return done.exit_code
        for name, plot in FIGURES.items():
            argv = ["plot", *[a.replace("{int8}", int8) for a in plot], "--out", str(PLOTS / name)]
            done = runner.invoke(app, argv)
            print(done.output.strip().replace(str(ROOT) + "/", ""))
            if done.exit_code:
                return done.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
