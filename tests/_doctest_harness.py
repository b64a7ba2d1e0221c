"""The machinery of ``tests/test_docs.py``: a Sybil parser for ``$ edgepe ...`` console blocks,
the matcher of their output, and a runner that executes a doc's commands in a scratch folder.

Kept apart from the test module so the lead (and tools) can reuse
it; the notation it implements is documented in ``tests/test_docs.py``'s docstring.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sybil import Example, Region, Sybil
from sybil.parsers.markdown import PythonCodeBlockParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, RawFencedCodeBlockLexer

REPO = Path(__file__).resolve().parents[1]
PROMPT = "$ "
CONTEXT_KEY = "__edgepe_doc_context__"  # the run's DocContext in the document's namespace
# What a console block's commands see: an 80-column terminal (the first hour), no colour.
COLUMNS = 80


# -- the notation -----------------------------------------------------------------------------

_TOKEN = re.compile(
    r"(?P<ellipsis>\.\.\.)"
    r"|~(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)"
    r"|(?P<spaces> +)"
    r"|(?P<rule>[━─═]+)"
)
_NUMBER = r"([-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|inf|nan)"


def _line_pattern(line: str) -> tuple[re.Pattern, list[float]]:
    parts, approx, at = [], [], 0
    for m in _TOKEN.finditer(line):
        parts.append(re.escape(line[at:m.start()]))
        if m.group("ellipsis"):
            parts.append(".*?")
        elif m.group("num") is not None:
            parts.append(_NUMBER)
            approx.append(float(m.group("num")))
        elif m.group("spaces"):
            parts.append(" +")
        else:
            parts.append(re.escape(m.group("rule")[0]) + "+")
        at = m.end()
    parts.append(re.escape(line[at:]))
    return re.compile("".join(parts)), approx


def _near(shown: float, got: str) -> bool:
    """``~shown`` matches a number of the same order: within a factor of 10 (``~0``: below
    1e-6 in magnitude), so a machine's rounding noise passes and a real change does not."""
    try:
        value = float(got.replace(",", ""))
    except ValueError:
        return False
    if shown == 0:
        return abs(value) < 1e-6
    return value != 0 and (value > 0) == (shown > 0) and 0.1 <= value / shown <= 10


def line_matches(expected: str, got: str) -> bool:
    expected, got = expected.rstrip(), got.rstrip()
    if expected == got:
        return True
    pattern, approx = _line_pattern(expected)
    m = pattern.fullmatch(got)
    if m is None:
        return False
    return all(_near(shown, value) for shown, value in zip(approx, m.groups(), strict=True))


def output_matches(expected: list[str], got: list[str]) -> bool:
    """``expected`` (a doc's lines, with the notation) against ``got``: a line that is only
    ``...`` stands for any number of lines (none included)."""
    expected = _trim(expected)
    got = _trim(got)
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(expected):
            ok = j == len(got)
        elif expected[i].strip() == "...":
            ok = any(match(i + 1, k) for k in range(j, len(got) + 1))
        else:
            ok = j < len(got) and line_matches(expected[i], got[j]) and match(i + 1, j + 1)
        memo[key] = ok
        return ok

    return match(0, 0)


def _trim(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


# -- the parser -------------------------------------------------------------------------------


@dataclass
class Command:
    line: int  # 1-based line of the ``$ `` in the document
    text: str  # without the prompt
    expected: list[str]
    start: int  # character offsets of the expected output in the document (for --update)
    end: int


@dataclass
class ConsoleBlock:
    commands: list[Command]


@dataclass
class Directive:
    action: str  # skip | slow
    reason: str


class ConsoleParser:
    """Fenced blocks (any info string) whose first line starts with ``$ ``: each ``$ `` line is a
    command, the lines up to the next one its output. ``<!-- doctest: skip REASON -->`` and
    ``<!-- doctest: slow REASON -->`` before a block (console or Python) take it out of the
    default run, saying why."""

    def __init__(self) -> None:
        self.fences = RawFencedCodeBlockLexer(
            info_pattern=re.compile(r"(?P<language>[^\n]*)\n"),
            mapping={"language": "language", "source": "source"},
        )
        self.directives = DirectiveInHTMLCommentLexer(directive="doctest", arguments=".+?")

    def __call__(self, document):
        for region in self.directives(document):
            action, _, reason = region.lexemes["arguments"].strip().partition(" ")
            if action not in ("skip", "slow", "requires") or not reason.strip():
                raise ValueError(f"{document.path}: '<!-- doctest: {action} ... -->' must be "
                                 "'skip REASON', 'slow REASON' or 'requires MODULE REASON'")
            yield Region(region.start, region.end, Directive(action, reason.strip()),
                         _directive)
        for region in self.fences(document):
            source = region.lexemes["source"]
            if region.lexemes["language"].strip() == "python" or not source.startswith(PROMPT):
                continue
            # where the source starts in the document: after the fence line
            offset = document.text.index("\n", region.start) + 1
            commands: list[Command] = []
            pos = 0
            for raw in source.splitlines(keepends=True):
                line_no = document.text.count("\n", 0, offset + pos) + 1
                if raw.startswith(PROMPT):
                    if commands:
                        commands[-1].end = offset + pos
                    commands.append(Command(line_no, raw[len(PROMPT):].rstrip("\n"), [],
                                            offset + pos + len(raw), offset + pos + len(raw)))
                else:
                    commands[-1].expected.append(raw.rstrip("\n"))
                pos += len(raw)
            commands[-1].end = offset + pos
            yield Region(region.start, region.end, ConsoleBlock(commands), _evaluate_console)


def _directive(example: Example) -> None:
    example.namespace[CONTEXT_KEY].pending = example.parsed


def make_sybil() -> Sybil:
    import doctest

    return Sybil(
        parsers=[ConsoleParser(),
                 PythonCodeBlockParser(doctest_optionflags=doctest.ELLIPSIS
                                       | doctest.NORMALIZE_WHITESPACE)],
        path=str(REPO),
    )


# -- running ----------------------------------------------------------------------------------


@dataclass
class DocContext:
    scratch: Path
    shims: Path
    slow: bool = False
    update: bool = False
    pending: Directive | None = None
    status: int = 0
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    replacements: list[tuple[int, int, str]] = field(default_factory=list)
    ran: int = 0


def where(example: Example, line: int | None = None) -> str:
    return f"{os.path.relpath(example.path, REPO)}:{line or example.line}"


def take_directive(example: Example) -> str | None:
    """The reason the example is left out of this run (a ``doctest:`` directive before it), or
    None to run it."""
    ctx: DocContext = example.namespace[CONTEXT_KEY]
    if isinstance(example.parsed, Directive):
        return None  # evaluating it sets ctx.pending for the next example
    directive, ctx.pending = ctx.pending, None
    if directive is None or (directive.action == "slow" and ctx.slow):
        return None
    if directive.action == "requires":
        import importlib.util

        module = directive.reason.split()[0]
        return None if importlib.util.find_spec(module) is not None else (
            f"requires {directive.reason} (not installed)")
    return f"{directive.action}: {directive.reason}"


def _evaluate_console(example: Example) -> None:
    ctx: DocContext = example.namespace[CONTEXT_KEY]
    for command in example.parsed.commands:
        code, output = run_command(command.text, ctx)
        ctx.status = code
        ctx.ran += 1
        got = output.splitlines()
        if output_matches(command.expected, got):
            continue
        shown, printed = _trim(command.expected), _trim(got)
        # lines that match under the notation (..., ~N) are shown as printed: the diff then
        # marks only what really differs
        shown = [printed[i] if i < len(printed) and line_matches(line, printed[i]) else line
                 for i, line in enumerate(shown)]
        diff = "\n".join(difflib.unified_diff(
            shown, printed, "the doc shows", "the command printed", lineterm="", n=2))
        ctx.failures.append(f"{where(example, command.line)}: $ {command.text}\n"
                            f"  (exit status {code})\n{diff}")
        if ctx.update:  # the new output, keeping the blank lines that separated the old one
            trailing = 0
            while trailing < len(command.expected) and not command.expected[-1 - trailing].strip():
                trailing += 1
            text = "".join(line + "\n" for line in _trim(got)) + "\n" * trailing
            ctx.replacements.append((command.start, command.end, text))


_PIPE_TAIL = re.compile(r"^(?P<cmd>.*?)\s*\|\s*(?P<tool>head|tail)\s+-(?P<n>\d+)\s*$")
_ECHO_EXIT = re.compile(r'^(?P<cmd>.*?)\s*;\s*echo\s+"exit \$\?"\s*$')


def run_command(text: str, ctx: DocContext) -> tuple[int, str]:
    """``(exit status, stdout and stderr as a terminal interleaves them)``. ``edgepe ...``
    (optionally ``| head -N``, ``| tail -N``, ``; echo "exit $?"``) and ``echo $?`` run in this
    process (torch imported once); anything else runs in bash, with ``edgepe`` and ``python``
    being this interpreter's."""
    line = _strip_comment(text)
    if line in ("echo $?", 'echo "$?"'):
        return 0, f"{ctx.status}\n"
    echo = _ECHO_EXIT.match(line)
    body = echo.group("cmd") if echo else line
    pipe = _PIPE_TAIL.match(body)
    body = pipe.group("cmd") if pipe else body
    words = shlex.split(body)
    # edgepe patch loads transformers (and torchao through it), whose loggers keep the stderr
    # they were first configured with: in this process that is a CliRunner stream closed after
    # the command, so patch runs in bash like any other program
    if (words and words[0] == "edgepe" and "patch" not in words[1:3]
            and not any(c in body for c in "|;&><`$")):
        code, output = _in_process(words[1:], ctx)
        if pipe:
            lines = output.splitlines(keepends=True)
            n = int(pipe.group("n"))
            output = "".join(lines[:n] if pipe.group("tool") == "head" else lines[-n:])
            code = 0
        if echo:
            output += f"exit {code}\n"
            code = 0
        return code, output
    return _in_bash(text, ctx)


def _strip_comment(text: str) -> str:
    """The command without a trailing ``# comment`` (a ``#`` after a space, outside quotes)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].strip()
    return text.strip()


def _in_process(args: list[str], ctx: DocContext) -> tuple[int, str]:
    from typer.testing import CliRunner

    from edgepe.cli import app

    runner = CliRunner()
    result = runner.invoke(app, args, env={"COLUMNS": str(COLUMNS), "NO_COLOR": "1",
                                           "TERM": "dumb"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(result.exception))
        return 3, result.output + f"\n[doc test: the command raised]\n{tb}"
    return result.exit_code, result.output


def _in_bash(text: str, ctx: DocContext) -> tuple[int, str]:
    env = {**os.environ, "PATH": f"{ctx.shims}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": str(COLUMNS), "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(["bash", "-c", text], cwd=ctx.scratch, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    return done.returncode, done.stdout


def make_shims(folder: Path) -> Path:
    """``edgepe`` and ``python`` on PATH for the bash-run commands: this interpreter's."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, run in (("edgepe", f'"{sys.executable}" -m edgepe "$@"'),
                      ("python", f'"{sys.executable}" "$@"')):
        shim = folder / name
        shim.write_text(f"#!/bin/sh\nexec {run}\n")
        shim.chmod(0o755)
    return folder


_FILE_HEAD = re.compile(r"# ([\w.-]+\.py)\s*\n")


def _file_block(example: Example) -> str | None:
    """``NAME.py`` when the example is a Python block whose first line is ``# NAME.py``: it is
    written into the scratch folder (for a later ``$ python NAME.py``), not run."""
    if not isinstance(example.parsed, str) or isinstance(example.parsed, (ConsoleBlock,
                                                                             Directive)):
        return None
    m = _FILE_HEAD.match(str(example.parsed))
    return m.group(1) if m else None


_HEADING = re.compile(r"#{1,2} ")
_FENCE = re.compile(r" {0,3}(```|~~~)")


def _section_starts(text: str) -> list[int]:
    """Character offsets of the doc's ``#`` and ``##`` headings (outside fenced blocks, where a
    ``# comment`` or a ``# NAME.py`` line is no heading)."""
    starts, fence, at = [], None, 0
    for line in text.splitlines(keepends=True):
        m = _FENCE.match(line)
        if m and (fence is None or m.group(1) == fence):
            fence = m.group(1) if fence is None else None
        elif fence is None and _HEADING.match(line):
            starts.append(at)
        at += len(line)
    return starts


def slow_sections(document) -> dict[int, int]:
    """``{section: offset of its last slow example}`` for each ``#``/``##`` section of the
    parsed ``document`` that holds a slow example (one after ``<!-- doctest: slow ... -->``);
    a section is numbered by how many headings start at or before it."""
    import bisect

    starts = _section_starts(document.text)
    last: dict[int, int] = {}
    pending = False
    for example in document.examples():
        if isinstance(example.parsed, Directive):
            pending = example.parsed.action == "slow"
            continue
        if pending:
            last[bisect.bisect_right(starts, example.start)] = example.start
        pending = False
    return last


def run_document(path: Path, scratch: Path, shims: Path, slow: bool = False,
                 update: bool = False, slow_sections_only: bool = False) -> DocContext:
    """Run every example of the doc at ``path`` in order, in ``scratch`` (the caller's cwd);
    failures are collected, not raised, so one run reports them all.

    ``slow_sections_only`` (with ``slow``): run only the ``#``/``##`` sections that hold a slow
    example, each from its heading up to its last slow example (the setup a slow example reads,
    a model saved, a program exported, comes earlier in its section). The rest of the doc is
    what the default run (``slow`` False) runs and checks already: run again here, it cost the
    README's slow test about a minute (a Hugging Face export, a LiteRT conversion)."""
    import bisect

    from sybil.example import SybilFailure

    document = make_sybil().parse(path)
    ctx = DocContext(scratch, shims, slow=slow, update=update)
    document.namespace[CONTEXT_KEY] = ctx
    document.namespace["__name__"] = "__doc__"
    sections = slow_sections(document) if slow_sections_only else {}
    starts = _section_starts(document.text)
    for example in document.examples():
        if slow_sections_only:
            last = sections.get(bisect.bisect_right(starts, example.start))
            if last is None or example.start > last:
                if not isinstance(example.parsed, Directive):
                    ctx.skipped.append(f"{where(example)}: no slow example after it in its "
                                       "section (the default run checks it)")
                continue
        reason = take_directive(example)
        if reason is not None:
            ctx.skipped.append(f"{where(example)}: {reason}")
            continue
        named = _file_block(example)
        if named is not None:  # a Python block headed "# NAME.py": the file a later command runs
            (scratch / named).write_text(str(example.parsed))
            continue
        try:
            example.evaluate()
        except SybilFailure as exc:
            ctx.failures.append(f"{where(example)}: {exc.result}")
        except Exception as exc:  # noqa: BLE001 - a Python example that raised: report it
            import traceback

            frames = [f for f in traceback.extract_tb(exc.__traceback__)
                      if f.filename == str(example.path)]
            line = frames[-1].lineno if frames else example.line
            ctx.failures.append(f"{where(example, line)}: the Python example raised "
                                f"{type(exc).__name__}: {exc}")
    if update and ctx.replacements:
        text = document.text  # the offsets are into the text that was parsed
        if path.read_text() != text:
            raise RuntimeError(f"{path} changed while its examples ran: not updated")
        for start, end, new in sorted(ctx.replacements, reverse=True):
            text = text[:start] + new + text[end:]
        path.write_text(text)
    return ctx
