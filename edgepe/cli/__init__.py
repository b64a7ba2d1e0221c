"""The ``edgepe`` command line: a thin typer layer over the Python API (STYLE 10).

One module per command; each imports torch, onnx or onnxruntime inside its function, so
``edgepe --help`` stays light. Errors: an ``EdgepeError`` prints one line on stderr and exits
with its code (2 bad input, 1 failed verification); a usage error, the root's included, exits 2
the same way; a reader that leaves early (``| head -0``) ends the command quietly with 141, as a
shell reports a writer killed by SIGPIPE (never 1, which means a failed verification); anything
else is a bug, reported in one line (the traceback with ``--verbose``) with exit code 3.
"""

from __future__ import annotations

import shlex
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from edgepe.contract.errors import EdgepeError
from edgepe.contract.version import __version__

try:  # typer >= 0.2x vendors click privately; older releases depend on it.
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions

UsageError = click_exceptions.UsageError
# `edgepe` alone shows the help (exit 2), which click raises as a usage error: let it through.
NoArgsIsHelpError = getattr(click_exceptions, "NoArgsIsHelpError", ())

BUG_EXIT = 3
PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell shows for a writer whose reader left
REPORT_URL = "the edgepe issue tracker"
GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose")  # also taken after the command's name


class _Group(TyperGroup):
    """Renders every failure, the root's and each subcommand's, in one line (also under
    ``CliRunner``); takes the global flags after the command's name too; polishes the help."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for command in [self, *self.commands.values()]:
            for param in command.params:
                _polish(param)
            # --help is made per context, not kept in params
            command.get_help_option = lambda ctx, made=command.get_help_option: _polish(made(ctx))

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        # `edgepe export ... -q` means `edgepe -q export ...`: the root's options are flags, so
        # the first word that is not one names the command; its own options never take these.
        at = next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))
        end = args.index("--") if "--" in args[at:] else len(args)
        moved = [a for a in args[at:end] if a in GLOBAL_FLAGS]
        rest = [a for a in args[at:end] if a not in GLOBAL_FLAGS]
        return super().parse_args(ctx, [*moved, *args[:at], *rest, *args[end:]])

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except NoArgsIsHelpError:
            raise
        except UsageError as exc:  # `edgepe --bogus`: one line, like every other error
            typer.echo(error_line(f"{exc.format_message()} (see 'edgepe --help')"), err=True)
            raise typer.Exit(2) from None
        except BrokenPipeError:  # `edgepe --help | head -0`
            _reader_left()
        except SystemExit as exc:
            _reader_left_rich(exc)

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
            typer.echo(error_line(f"{message} (see '{command} --help')"), err=True)
            raise typer.Exit(2) from None
        except EdgepeError as exc:
            typer.echo(error_line(str(exc)), err=True)
            raise typer.Exit(exc.exit_code) from None
        except ModuleNotFoundError as exc:
            extra = optional_extra(exc.name or "")
            if extra is None:
                raise
            command = f"edgepe {protected[0]}" if protected else "edgepe"
            typer.echo(error_line(f"{command} needs {exc.name}, which is not installed; install "
                                  f"it with: pip install 'edgepe[{extra}]'"), err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            typer.echo("error: interrupted", err=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:
            _reader_left()  # `edgepe list | head -0`: the reader left. Not a bug
        except SystemExit as exc:
            _reader_left_rich(exc)
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


def error_line(message: str) -> str:
    """``error: message``, the message starting lower-case (``Unknown scheme`` and click's
    ``No such option`` alike) unless its first word is an acronym or a name (``ONNX``)."""
    head = message.split(" ", 1)[0]
    if head[:1].isupper() and head[1:2].islower():
        message = message[0].lower() + message[1:]
    return f"error: {message}"


def optional_extra(module: str) -> str | None:
    """The extra of edgepe's metadata that installs ``module`` (``matplotlib`` -> ``plot``), or
    ``None`` when it is no optional dependency; extras are read from the installed package, so
    a new extra needs no change here (``dev`` is not for users)."""
    from importlib import metadata

    try:
        requires = metadata.requires("edgepe") or []
    except metadata.PackageNotFoundError:  # pragma: no cover - edgepe runs from a checkout
        return None
    wanted = module.split(".")[0].replace("-", "_").lower()
    for line in requires:
        spec, _, marker = line.partition(";")
        name = spec.strip().split("[")[0]
        for sep in "<>=!~ ":
            name = name.split(sep)[0]
        extra = marker.split("extra ==")[-1].strip().strip("'\"") if "extra ==" in marker else ""
        if extra and extra != "dev" and name.replace("-", "_").lower() == wanted:
            return extra
    return None


def _reader_left():
    """End quietly with ``PIPE_EXIT``: nothing more reaches the closed pipe (click's wrapper
    silences the final flush), and nothing is said (the reader chose to stop reading)."""
    try:  # typer >= 0.2x vendors click privately; older releases depend on it.
        from typer._click.utils import PacifyFlushWrapper
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click.utils import PacifyFlushWrapper

    sys.stdout = PacifyFlushWrapper(sys.stdout)
    sys.stderr = PacifyFlushWrapper(sys.stderr)
    raise typer.Exit(PIPE_EXIT) from None


def _reader_left_rich(exc: SystemExit):
    """rich's console turns a broken pipe into ``SystemExit(1)``, the code of a failed
    verification: make it ``PIPE_EXIT``; any other exit goes on as it was."""
    if isinstance(exc.__context__, BrokenPipeError):
        _reader_left()
    raise exc


def _polish(param):
    """Help as users read it: a flag shows no ``<bool>`` (it takes no value), and an argument
    shows its name as ``PATH`` in the usage line (typer 0.29 writes ``{path}``). Returns
    ``param``."""
    if param is None:
        return None
    if getattr(param, "is_flag", False) and param.metavar is None:
        param.metavar = ""
    if param.param_type_name == "argument":
        name = (param.metavar or param.name).upper()
        piece = name if param.required else f"[{name}]"
        param.get_usage_pieces = lambda ctx, piece=piece: [piece]
    return param


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


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"edgepe {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    ctx: typer.Context,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="More output; tracebacks for internal errors.")
    ] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Only errors (also after the command's name).")] = False,
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print edgepe's version and exit.")] = False,
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
from edgepe.cli import patch_cmd  # noqa: E402

app.command("patch")(patch_cmd.command)


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())
