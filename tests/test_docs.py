"""The docs are tested: every example in README.md, models/README.md and docs/**/*.md runs as
written, in a scratch folder, and prints what the doc shows.

What runs (parsed with Sybil, https://sybil.readthedocs.io; the console parser is ours,
``tests._doctest_harness.py``):

- a fenced block whose first line starts with ``$ `` is a console session: each ``$ command``
  runs (``edgepe ...`` in this process, anything else in bash with ``edgepe`` and ``python``
  being this interpreter's), and the lines up to the next ``$ `` are the output it must print,
  stdout and stderr interleaved as on a terminal of 80 columns. ``echo $?`` shows the exit
  status of the command before it.
- a ```` ```python ```` block runs in the doc's namespace (one per doc, in order); one that starts
  with ``>>>`` is a doctest (ELLIPSIS, NORMALIZE_WHITESPACE); one whose first line is
  ``# NAME.py`` is not run but written to the scratch folder as NAME.py, for a ``$ python
  NAME.py`` after it.
- Each doc runs in its own empty scratch folder (``tmp_path``), the commands' cwd: an example's
  inputs come from earlier blocks of the same doc or from a script in ``scripts/`` (reachable
  as ``scripts/`` in the scratch folder, a link to the repository's). Nothing is written into
  the repository.

The notation for what truly varies, in the output a doc shows:

- ``...`` on a line of its own: any number of lines (none included), for excerpts.
- ``...`` inside a line: any text on that line (a temporary path, a time, a hash that changes
  with every build).
- ``~1.19e-07``: a number of the same order as the one shown, within a factor of 10 (``~0``:
  below 1e-6), for figures that depend on the machine (float rounding of a runtime's kernels).
- runs of spaces, and of a table's rule characters (``━``, ``─``), match runs of any length:
  tables realign when a cell's width changes. Trailing spaces and blank lines at either end of
  an output are ignored. Everything else is compared exactly.

Left out of a run, always with a reason in the doc: ``<!-- doctest: skip REASON -->`` before a
block (it needs what the suite cannot have: a GPU, an install), ``<!-- doctest: slow REASON -->``
(it takes minutes: the full benchmark); slow blocks run with ``pytest -m slow``, in a run of
the doc's sections (``#``, ``##`` headings) that hold one, each up to its last slow block: what a
slow block reads (a model saved, a program exported) is made earlier in its own section, and the
rest of the doc is the default run's.
``<!-- doctest: requires MODULE REASON -->`` runs the next block only where MODULE is installed
(``executorch``: the optional ``[executorch]`` extra), and says so when it is not.

A failure names the doc and line of the command, the command, its exit status and a diff of
what the doc shows against what the command printed. ``EDGEPE_DOCS_UPDATE=1 pytest
tests/test_docs.py`` writes what the commands print into the docs instead (review the diff:
notation on a changed output is replaced by the literal output).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests._doctest_harness import REPO, make_shims, make_sybil, run_document

DOCS = [REPO / "README.md", REPO / "models" / "README.md",
        *sorted((REPO / "docs").rglob("*.md"))]
UPDATE = os.environ.get("EDGEPE_DOCS_UPDATE") == "1"


def _has_slow(path: Path) -> bool:
    return "<!-- doctest: slow" in path.read_text()


def _run(doc: Path, tmp_path: Path, monkeypatch, slow: bool) -> None:
    scratch = tmp_path / "clone"
    scratch.mkdir()
    (scratch / "scripts").symlink_to(REPO / "scripts")
    monkeypatch.chdir(scratch)
    ctx = run_document(doc, scratch, make_shims(tmp_path / "bin"), slow=slow, update=UPDATE,
                       slow_sections_only=slow)
    ctx.failures += _not_ignored(doc, scratch)
    if ctx.failures:
        pytest.fail(f"{len(ctx.failures)} example(s) of {doc.relative_to(REPO)} do not do what "
                    "the doc shows:\n\n" + "\n\n".join(ctx.failures), pytrace=False)


def _not_ignored(doc: Path, scratch: Path) -> list[str]:
    """What the doc's commands wrote, as paths of a clone, that git would not ignore: run in the
    repository, they would dirty the work tree (or write into a tracked file)."""
    written = sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*")
                     if p.is_file() and not p.relative_to(scratch).parts[0] == "scripts")
    if not written:
        return []
    done = subprocess.run(["git", "-C", str(REPO), "check-ignore", "--no-index", "--stdin"],
                          input="\n".join(written), capture_output=True, text=True, timeout=60)
    ignored = set(done.stdout.split())
    return [f"{doc.relative_to(REPO)}: its commands write {path}, which .gitignore does not "
            "ignore (a doc's outputs must not dirty a clone)"
            for path in written if path not in ignored]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_doc_examples_run_as_written(doc, tmp_path, monkeypatch):
    _run(doc, tmp_path, monkeypatch, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("doc", [d for d in DOCS if _has_slow(d)],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_doc_examples_including_the_slow_ones(doc, tmp_path, monkeypatch):
    """The slow examples, each after the examples of its section before it (their setup); the
    sections without one, and what follows a section's last, are the default run's."""
    _run(doc, tmp_path, monkeypatch, slow=True)


def test_every_doc_is_collected_and_parsed():
    """The list of docs is the files on disk (a new doc is tested without a change here), and
    each parses: a malformed directive fails here, naming the doc."""
    assert REPO / "docs" / "readme" / "quant.md" in DOCS
    sybil = make_sybil()
    for doc in DOCS:
        list(sybil.parse(doc).examples())


def test_the_slow_run_takes_the_sections_that_hold_a_slow_block_up_to_their_last(tmp_path):
    """``pytest -m slow``'s doc run: a section's blocks up to its last slow block (its setup
    included), nothing of a section without one nor after that block; a ``#`` line inside a
    fence is no heading."""
    fence = "```"
    slow = "<!-- doctest: slow a reason -->\n"
    doc = tmp_path / "doc.md"
    doc.write_text("\n".join([
        "# Title", f"{fence}\n$ touch intro\n{fence}",
        "## A", f"{fence}\n$ touch a-setup\n{fence}", slow + f"{fence}\n$ touch a-slow\n{fence}",
        f"{fence}\n$ touch a-after\n{fence}",
        "## B", f"{fence}\n$ touch b\n{fence}",
        "## C", f"{fence}python\n# c.py\nprint('c')\n{fence}",
        f"{fence}\n$ touch c-setup\n{fence}", slow + f"{fence}\n$ touch c-slow\n{fence}",
        "### C.1", slow + f"{fence}\n$ touch c1-slow\n{fence}", ""]))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shims = make_shims(tmp_path / "bin")
    ctx = run_document(doc, scratch, shims, slow=True, slow_sections_only=True)
    assert ctx.failures == []
    assert sorted(p.name for p in scratch.iterdir()) == [
        "a-setup", "a-slow", "c-setup", "c-slow", "c.py", "c1-slow"]
    everything = tmp_path / "everything"
    everything.mkdir()
    run_document(doc, everything, shims, slow=True)
    assert len(list(everything.iterdir())) == 9
