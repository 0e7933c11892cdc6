"""The ``localspec`` command: one module per subcommand, registered here."""

from __future__ import annotations

import sys

import typer

from localspec import __version__
from localspec.cli import batch as _batch
from localspec.cli import bench as _bench
from localspec.cli import chat as _chat
from localspec.cli import doctor as _doctor
from localspec.cli import embed as _embed
from localspec.cli import export as _export
from localspec.cli import info as _info
from localspec.cli import ls as _ls
from localspec.cli import pair as _pair
from localspec.cli import plan as _plan
from localspec.cli import profiles as _profiles
from localspec.cli import ps as _ps
from localspec.cli import pull as _pull
from localspec.cli import rm as _rm
from localspec.cli import run as _run
from localspec.cli import serve as _serve

app = typer.Typer(
    name="localspec",
    help="Run local LLMs on llama.cpp, with speculative decoding that always pays.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"localspec {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    pass


app.command("run", help=_run.HELP, epilog=_run.EPILOG)(_run.run)
app.command("chat", help=_chat.HELP, epilog=_chat.EPILOG)(_chat.chat)
app.command("batch", help=_batch.HELP, epilog=_batch.EPILOG)(_batch.batch)
app.command("serve", help=_serve.HELP, epilog=_serve.EPILOG)(_serve.serve)
app.command("ps", help=_ps.HELP, epilog=_ps.EPILOG)(_ps.ps)
app.command("embed", help=_embed.HELP, epilog=_embed.EPILOG)(_embed.embed)
app.command("bench", help=_bench.HELP, epilog=_bench.EPILOG)(_bench.bench)
app.command("plan", help=_plan.HELP, epilog=_plan.EPILOG)(_plan.plan_command)
app.command("pull", help=_pull.HELP, epilog=_pull.EPILOG)(_pull.pull)
app.command("ls", help=_ls.HELP, epilog=_ls.EPILOG)(_ls.ls)
app.command("rm", help=_rm.HELP, epilog=_rm.EPILOG)(_rm.rm)
app.command("info", help=_info.HELP, epilog=_info.EPILOG)(_info.info)
app.command("pair", help=_pair.HELP, epilog=_pair.EPILOG)(_pair.pair)
app.command("export", help=_export.HELP, epilog=_export.EPILOG)(_export.export)
app.add_typer(_profiles.app, name="profiles")
app.command("doctor", help=_doctor.HELP, epilog=_doctor.EPILOG)(_doctor.doctor)


def main() -> None:
    from localspec.cli._common import run_app

    sys.exit(run_app(app))
