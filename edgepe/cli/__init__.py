"""The ``edgepe`` command line: a thin typer layer over the Python API (STYLE 10).

One module per command; each imports torch, onnx or onnxruntime inside its function, so
``edgepe --help`` stays light. Errors: an ``EdgepeError`` prints one line on stderr and exits
with its code (2 bad input, 1 failed verification); a usage error exits 2 the same way; anything
else is a bug, reported in one line (the traceback with ``--verbose``) with exit code 3.
"""

from __future__ import annotations

import shlex
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x vendors click privately; older releases depend on it.
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import UsageError

from edgepe import __version__
from edgepe.errors import EdgepeError

BUG_EXIT = 3
REPORT_URL = "the edgepe issue tracker"


class _Group(TyperGroup):
    """Renders every failure of a subcommand in one line (also under ``CliRunner``)."""

    def invoke(self, ctx: typer.Context):
        # the subcommand and its arguments (click keeps the name in ``_protected_args`` since 8.2)
        protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])
        argv = [*protected, *ctx.args]
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except UsageError as exc:
            command = f"edgepe {exc.ctx.info_name}" if exc.ctx and exc.ctx.parent else "edgepe"
            message = exc.format_message() + _given(exc, argv)
            typer.echo(f"error: {message} (see '{command} --help')", err=True)
            raise typer.Exit(2) from None
        except EdgepeError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("error: interrupted", err=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:
            # `edgepe list | head`: the reader left. Not a bug; typer's main() handles EPIPE
            # quietly (silences the final flush, exits 1), as it does for `--help | head`.
            raise
        except Exception as exc:  # noqa: BLE001 - a bug: say so, briefly
            verbose = (ctx.obj or {}).get("verbose")
            if verbose:
                import traceback

                traceback.print_exc()
            rerun = shlex.join(["edgepe", "--verbose", *argv])
            typer.echo(
                f"internal error: {type(exc).__name__}: {exc}. This is a bug in edgepe "
                f"{__version__}; please report it to {REPORT_URL} with "
                + ("the traceback above." if verbose else f"the output of: {rerun}"),
                err=True,
            )
            raise typer.Exit(BUG_EXIT) from None


def _given(exc: UsageError, argv: list[str]) -> str:
    """`` (got 'abc')``: the value a bad option was given, which typer's message leaves out."""
    for opt in getattr(getattr(exc, "param", None), "opts", None) or ():
        for i, arg in enumerate(argv):
            if arg == opt and i + 1 < len(argv):
                return f" (got {argv[i + 1]!r})"
            if arg.startswith(opt + "="):
                return f" (got {arg.split('=', 1)[1]!r})"
    return ""


app = typer.Typer(
    cls=_Group,
    name="edgepe",
    help="Positional encodings for small devices: export, verify, inspect and run them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _options(
    ctx: typer.Context,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="More output; tracebacks for internal errors.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only errors.")] = False,
) -> None:
    ctx.obj = {"verbose": verbose, "quiet": quiet and not verbose}


# The commands, one module each.
from edgepe.cli import list_cmd  # noqa: E402

app.command("list")(list_cmd.command)
from edgepe.cli import export_cmd, inspect_cmd  # noqa: E402

app.command("export")(export_cmd.command)
app.command("inspect")(inspect_cmd.command)
from edgepe.cli import run_cmd  # noqa: E402

app.command("run")(run_cmd.command)
from edgepe.cli import plot_cmd  # noqa: E402

app.command("plot")(plot_cmd.command)
from edgepe.cli import verify_cmd  # noqa: E402

app.command("verify")(verify_cmd.command)
from edgepe.cli import graft_cmd  # noqa: E402

app.command("graft")(graft_cmd.command)


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())
