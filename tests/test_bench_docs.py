"""The benchmark's figures in the docs are the latest generated ones: ``docs/bench.json`` is what
``scripts/bench.py`` last wrote, and every doc that quotes it (docs/readme/bench.md, the README's
"Benchmarks" section, docs/BENCHMARKS.md) must be what the script's own renderers make of that
file today. Regenerate them all with ``python scripts/bench.py --readme docs/readme/bench.md``
(minutes; then paste docs/readme/bench.md over the README's section), the figures of
``docs/plots`` with ``python scripts/regen_figures.py``.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from bench.report import markdown, readme_section  # noqa: E402

REPORT = json.loads((ROOT / "docs" / "bench.json").read_text())
HINT = "regenerate with: python scripts/bench.py --readme docs/readme/bench.md"


def _same(what: str, shown: str, generated: str) -> None:
    if shown.strip() == generated.strip():
        return
    diff = "\n".join(difflib.unified_diff(generated.strip().splitlines(),
                                          shown.strip().splitlines(),
                                          "rendered from docs/bench.json", what, lineterm="", n=1))
    pytest.fail(f"{what} does not quote docs/bench.json ({HINT}):\n{diff}", pytrace=False)


def test_readme_bench_page_quotes_the_latest_bench_json():
    _same("docs/readme/bench.md", (ROOT / "docs/readme/bench.md").read_text(),
          readme_section(REPORT, "BENCHMARKS.md"))


def test_readme_benchmarks_section_quotes_the_latest_bench_json():
    text = (ROOT / "README.md").read_text()
    start = text.index("## Benchmarks")
    end = text.find("\n## ", start + 1)
    generated = readme_section(REPORT, "BENCHMARKS.md").strip()
    section = text[start:end if end != -1 else None].strip()
    # the README adds one line after the generated part: the link to docs/BENCHMARKS.md
    _same("README.md's Benchmarks section", section[:len(generated)], generated)
    assert "[docs/BENCHMARKS.md](docs/BENCHMARKS.md)" in section[len(generated):]


def test_benchmarks_md_quotes_the_latest_bench_json():
    import bench_cortexm

    generated = markdown(REPORT) + bench_cortexm.markdown(REPORT["cortex_m"])
    if "executorch" in REPORT:
        import bench_pte

        generated += "\n## ExecuTorch\n\n" + bench_pte.markdown(REPORT["executorch"])
    _same("docs/BENCHMARKS.md", (ROOT / "docs/BENCHMARKS.md").read_text(), generated)


def test_the_plot_the_docs_show_is_the_one_bench_json_names():
    assert REPORT.get("plot") == "bench.png"
    assert (ROOT / "docs" / "bench.png").stat().st_size > 0


def test_docs_plots_holds_exactly_the_figures_regen_figures_makes():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "regen_figures.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
