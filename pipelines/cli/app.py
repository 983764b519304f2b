"""The `vlbench` application: the typer app every command family registers on, the options every command
takes, and `main`, which runs a command line and turns every failure into one line and an exit status."""

from __future__ import annotations

import gc
import sys

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Regenerate bias-aware vision-and-language benchmarks, publish them, score models.")


_whole_process = False  # set by main(): this process ends when its command does


def whole_process() -> bool:
    """Whether this process ends when its command does (the console script), not a caller's `main(argv)`."""
    return _whole_process


@app.callback()
def _every_command(
    allow_pickle_weights: bool = typer.Option(
        False, "--allow-pickle-weights",
        help="Load model folders that hold pickle weights only (*.bin, *.pt): unpickling can run code, so only "
             "for checkpoints you trust. Without it, vlbench reads safetensors weights only."),
):
    from core.model_files import allow_pickle_weights as allow

    allow(allow_pickle_weights)


def echo_err(message: str) -> None:
    """One line on stderr: what it holds from data (file names, records, a server's text) passes the sanitiser,
    so it cannot forge a second line, reorder the terminal's text or fail to print."""
    from core.sanitise import sanitise

    typer.echo(sanitise(message, _secrets(), None), err=True)


def _secrets(argv: list[str] | None = None) -> tuple[str, ...]:
    """The keys to mask: the key variables' values, and that of the variable a command line's --api-key-env
    names."""
    from core.sanitise import environment_secrets

    args = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    named = [b for a, b in zip(args, args[1:]) if a == "--api-key-env"]
    named += [a.partition("=")[2] for a in args if a.startswith("--api-key-env=")]
    return environment_secrets(named)


def fmt(value) -> str:
    """A metric as the commands print it: two decimals, '-' when undefined."""
    return "-" if value is None else f"{value:.2f}"


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every `finally` (staging folders, partial files)
    runs as it does for Ctrl-C."""


INTERRUPTED = 130  # the exit status of a run stopped by Ctrl-C (128 + SIGINT)


def _terminate(signum, frame):
    raise Terminated()


def _click_exceptions():
    """The command-line parser's exceptions: typer vendors click as `typer._click` in recent releases,
    older ones use click itself."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def _usage_line(exc) -> str:
    """A click usage error (bad option value, unknown option, missing option) as one line."""
    message = exc.format_message().replace("Value error, ", "")
    where = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) is not None else ""
    return f"error: {message}{where}"


def main(argv: list[str] | None = None) -> None:
    """The console script (argv None: the process ends with the command) or a caller's command line."""
    import signal
    import threading

    global _whole_process
    _whole_process = argv is None

    from core.errors import STOP_NOTES, VlbenchError, stopped_line
    from core.progress import quiet_library_bars
    from core.threads import choose_threads

    if argv is None:  # the console script's process is vlbench's: torch's threads chosen before it is loaded
        choose_threads()

    STOP_NOTES.clear()  # a command that ended before (a caller's in-process run) leaves nothing to say

    quiet_library_bars()
    click = _click_exceptions()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    streams = sys.stdout, sys.stderr
    secrets = _secrets(argv)
    if secrets:  # a key pasted into any flag (or echoed by a library) never reaches the terminal or a captured log
        from core.sanitise import MaskedStream

        sys.stdout, sys.stderr = MaskedStream(sys.stdout, secrets), MaskedStream(sys.stderr, secrets)
    try:
        code = app(args=argv, prog_name="vlbench", standalone_mode=False)
        if code == INTERRUPTED:  # typer turns Ctrl-C into this exit code, returned (no vlbench command exits so)
            raise KeyboardInterrupt
        if isinstance(code, int) and code:
            sys.exit(code)
        distributed = sys.modules.get("evaluator.models.distributed")  # imported only by commands that shard
        if distributed is not None:
            distributed.exit_after_group(0)
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help())
        sys.exit(2)
    except click.UsageError as exc:
        echo_err(_usage_line(exc))
        sys.exit(2)
    except click.ClickException as exc:
        echo_err(f"error: {exc.format_message()}")
        sys.exit(2)
    except typer.Abort:
        echo_err("error: interrupted; nothing half-written was left behind")
        sys.exit(INTERRUPTED)
    except VlbenchError as exc:
        echo_err(f"error: {exc}")
        sys.exit(2)
    except KeyboardInterrupt:
        echo_err(stopped_line(signal.SIGINT))
        sys.exit(INTERRUPTED)
    except Terminated:
        echo_err(stopped_line(signal.SIGTERM))
        sys.exit(143)
    except OSError as exc:  # the environment refused a read or write no command caught: one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        echo_err(f"error: {where}{exc.strerror or exc}; the command stopped")
        sys.exit(2)
    finally:
        sys.stdout, sys.stderr = streams
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if _whole_process:
            # What is still alive is left to the OS: the interpreter's final collections would scan it
            # all again (about 0.25 s once datasets and pandas are loaded).
            gc.freeze()

