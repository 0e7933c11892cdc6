"""``localspec serve``: an OpenAI-compatible server on the engine's KV slots."""

from __future__ import annotations

import os
import signal
import threading
import time
from enum import Enum
from typing import Optional

import typer

from localspec.cli._common import (
    MODEL_HELP,
    CtxSize,
    Draft,
    DraftGpuLayers,
    DraftMax,
    DraftMin,
    DraftPMin,
    FrequencyPenalty,
    GpuLayers,
    KvType,
    MaxTokens,
    MinP,
    NgramMax,
    NgramMin,
    Offline,
    PresencePenalty,
    RepeatPenalty,
    Seed,
    Slots,
    Spec,
    Temperature,
    Threads,
    TopK,
    TopP,
    Verbose,
    settings_from_context,
    user_errors,
    PromptCache,
    PromptCacheSize,
)
from localspec.cli.completion import complete_model
from localspec.defaults import DEFAULTS as D
from localspec.outputs import terminal

HELP = ("Serve models over an OpenAI-compatible HTTP API (chat, completions, embeddings, Responses, Messages): with no "
        "MODEL every cached GGUF and profile, each loaded on its first request.")
EPILOG = (
    "Examples:  localspec serve  ·  localspec serve model.gguf  ·  localspec serve qwen2.5-coder-1.5b --slots 4 "
    "--port 8000  ·  localspec serve --max-memory 8GiB --keep-alive 10m  ·  "
    "LOCALSPEC_API_KEY=secret localspec serve model.gguf --host 0.0.0.0"
)
DEFAULT_SLOTS = 4  # when neither a flag, a variable nor a profile sets --slots
GRACE_S = 30  # at shutdown, how long running requests (ended at once, at their next step) may take to finish
# sending; a step can take seconds (a long prefill chunk, the first cost measurement of a model)


class ReasoningFormat(str, Enum):
    auto = "auto"
    deepseek = "deepseek"
    none = "none"


@user_errors
def serve(
    ctx: typer.Context,
    models: Optional[list[str]] = typer.Argument(
        None, metavar="[MODEL]...", autocompletion=complete_model,
        help=MODEL_HELP + " Several: serve those alone (one named loads at start). None: every GGUF in the Hugging "
                          "Face cache, every profile whose model is here, and the embedded SmolLM2-135M."),
    host: str = typer.Option("127.0.0.1", "--host", envvar="LOCALSPEC_HOST", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", envvar="LOCALSPEC_PORT", min=0, max=65535, help="Port to listen on."),
    api_key: list[str] = typer.Option(
        [], "--api-key", envvar="LOCALSPEC_API_KEY", metavar="KEY",
        help="Require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every route but /health. Repeatable "
             "(the variable: keys separated by spaces): each key's requests then draft only from that key's "
             "earlier requests (--store-tokens)."),
    alias: Optional[str] = typer.Option(None, "--alias", help="The model's name in the API, where one MODEL is given. "
                                                              "Default: the profile or file name."),
    keep_alive: Optional[str] = typer.Option(
        None, "--keep-alive", metavar="DURATION",
        help="Unload a model idle this long (30s, 5m, 1h; 0: when its request ends; -1: never). A request's "
             "keep_alive field sets its model's. Default: 5m, never where one MODEL is given."),
    max_models: Optional[int] = typer.Option(None, "--max-models", min=1,
                                             help="Models loaded at once at most (the least recently used idle one "
                                                  "unloads first). Default: as many as memory holds."),
    max_memory: Optional[str] = typer.Option(
        None, "--max-memory", metavar="SIZE",
        help="RAM the loaded models may take in all, by their memory plans (e.g. 8GiB). Default: what is free at "
             "start. Each GPU's budget is its free memory at start."),
    pull: bool = typer.Option(False, "--pull", help="Download a Hub model a request names that is not in the cache "
                                                    "(the request waits; progress in the log)."),
    max_queue: int = typer.Option(64, "--max-queue", min=0, help="Requests that may wait for a slot; past that, 429."),
    cors_origin: list[str] = typer.Option([], "--cors-origin", help="Allow browser pages from ORIGIN (repeatable). Default: none."),
    reasoning_format: ReasoningFormat = typer.Option(
        ReasoningFormat.auto, "--reasoning-format", case_sensitive=False,
        help="<think> blocks go to reasoning_content: auto (where the model's template thinks), deepseek (always), "
             "none (left in the content)."),
    store_tokens: int = typer.Option(
        32768, "--store-tokens", min=0, max=1 << 22,
        help="Tokens of recent requests' prompts and answers kept for n-gram drafting to copy from (an agent "
             "re-sending files and earlier answers drafts from them); 0 keeps none."),
    slots: Slots = DEFAULT_SLOTS,
    ctx_size: CtxSize = D["ctx_size"],
    prompt_cache: PromptCache = D["prompt_cache"],
    prompt_cache_size: PromptCacheSize = D["prompt_cache_size"],
    draft: Draft = D["draft"],
    spec: Spec = D["spec"],
    draft_max: DraftMax = D["draft_max"],
    draft_min: DraftMin = D["draft_min"],
    draft_p_min: DraftPMin = D["draft_p_min"],
    ngram_min: NgramMin = D["ngram_min"],
    ngram_max: NgramMax = D["ngram_max"],
    max_tokens: MaxTokens = D["max_tokens"],
    temperature: Temperature = D["temperature"],
    top_k: TopK = D["top_k"],
    top_p: TopP = D["top_p"],
    min_p: MinP = D["min_p"],
    repeat_penalty: RepeatPenalty = D["repeat_penalty"],
    presence_penalty: PresencePenalty = D["presence_penalty"],
    frequency_penalty: FrequencyPenalty = D["frequency_penalty"],
    seed: Seed = D["seed"],
    threads: Threads = D["threads"],
    kv_type: KvType = D["kv_type"],
    gpu_layers: GpuLayers = D["gpu_layers"],
    draft_gpu_layers: DraftGpuLayers = D["draft_gpu_layers"],
    verbose: Verbose = False,
    offline: Offline = False,
) -> None:
    import uvicorn

    from localspec.cli._models import quiet_hub_logs, show_library_notes
    from localspec.server import auth
    from localspec.fleet import Servable
    from localspec.server.app import ServerConfig, ServerState, create_app
    from localspec.settings import updated

    from localspec.devices import parse_size
    from localspec.errors import InvalidRequest
    from localspec.fleet import Budget, Fleet, local_servables, parse_keep_alive

    models = list(dict.fromkeys(models or []))
    if alias is not None and len(models) != 1:
        raise typer.BadParameter("names one model: give exactly one MODEL with it", param_hint="--alias")
    try:
        idle = parse_keep_alive(keep_alive) if keep_alive is not None else (None if len(models) == 1 else 300.0)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--keep-alive") from None
    try:
        budget = Budget.detect(parse_size(max_memory) if max_memory else None)
    except InvalidRequest as exc:
        raise typer.BadParameter(exc.message, param_hint="--max-memory") from None

    def make(name: str | None):
        s = settings_from_context(ctx, name)
        return updated(s, {"slots": DEFAULT_SLOTS}, "default") if s.sources.get("slots") == "default" else s

    def keep(engine) -> None:
        engine.keep_texts(store_tokens)

    quiet_hub_logs(verbose)
    show_library_notes(verbose)
    if models:
        servables = []
        for name in models:
            s = make(name)
            names = _names(s.profile, s.model)
            shown = alias if alias else names[0]
            servables.append(Servable(shown, names, s, download=True))
        fleet = Fleet(servables, budget=budget, max_models=max_models, keep_alive=idle, pull=pull,
                      offline=offline, restricted=True, default=servables[0].id, on_load=keep, note=terminal.note)
    else:
        make(None)  # a bad flag or variable is refused before the server starts
        catalogue = lambda: local_servables(make, pull=pull, note=terminal.note if verbose else lambda _: None)  # noqa: E731
        servables = catalogue()
        fleet = Fleet(servables, budget=budget, max_models=max_models, keep_alive=idle, pull=pull,
                      offline=offline, default=_default_model(servables), catalogue=catalogue, make=make,
                      on_load=keep, note=terminal.note)
    config = ServerConfig(
        host=host, port=port, api_keys=tuple(dict.fromkeys(k for k in api_key if k)), max_queue=max_queue,
        cors_origins=tuple(cors_origin), reasoning_format=reasoning_format.value, store_tokens=store_tokens,
    )
    if not auth.is_loopback(host) and not config.api_keys:
        terminal.note(f"warning: listening on {host} without --api-key: anyone who can reach this port can use it")
    state = ServerState(fleet)
    app = create_app(config, state)
    server = _server(uvicorn.Config(app, host=host, port=port, log_level="info" if verbose else "warning",
                                    access_log=verbose, timeout_graceful_shutdown=GRACE_S, lifespan="off"), state)
    loader = threading.Thread(target=_start, args=(verbose, state, server, config, len(models) == 1), daemon=True)
    loader.start()
    # uvicorn handles SIGINT and SIGTERM while it runs, then raises them again for the
    # handlers it found: these make a shutdown it already carried out exit 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    try:
        server.run()
    finally:
        state.cancel_all()
        fleet.close()
    if state.error:
        raise typer.Exit(1)
    if not server.started:  # the port could not be bound (uvicorn said why)
        raise typer.Exit(1)


def _default_model(servables) -> str | None:
    """What a request with no ``model`` gets where none was named at start: the default
    profile, else the embedded model, else the only one."""
    from localspec import profiles
    from localspec.resolve.local import embedded_model

    ids = [s.id for s in servables]
    embedded = embedded_model()
    for choice in (profiles.default_profile(), embedded.name.removesuffix(".gguf") if embedded else None):
        if choice in ids:
            return choice
    return ids[0] if len(ids) == 1 else None


def _names(profile: str | None, model: str | None) -> tuple[str, ...]:
    """What a request may call the model, the first shown: the profile, a Hub name as
    given, or the file's name without .gguf (and with it)."""
    from localspec.resolve.local import embedded_model
    from localspec.resolve.names import looks_like_hub

    names = [profile] if profile else []
    if model and looks_like_hub(model):
        names.append(model)
    else:
        path = model or str(embedded_model() or "localspec")
        base = os.path.basename(path.rstrip("/"))
        names += [base.removesuffix(".gguf"), base, *([model] if model else [])]
    return tuple(dict.fromkeys(names))


def _start(verbose: bool, state, server, config, preload: bool) -> None:
    """Where one model was named, load it behind the listening server; say one line when
    the server is ready."""
    from localspec.engine import backend

    backend.set_verbose(verbose)
    fleet = state.fleet
    detail = ""
    if preload:
        try:
            lease = fleet.acquire(None)
        except Exception as exc:  # one sentence, and the server stops
            message = getattr(exc, "message", None) or f"internal error: {exc!r}"
            state.error = message
            terminal.error(message)
            server.should_exit = True
            return
        engine = lease.engine
        detail = (f" · model {lease.id} ({engine.model.path.name}) · {engine.plan.slots} slots x {engine.n_ctx} "
                  f"tokens · speculation {engine.spec.mode}")
        lease.release()
    else:
        n = len(fleet.servables())
        detail = f" · {n} model{'s' if n != 1 else ''} to load on demand (GET /v1/models lists them)"
    state.ready = True
    while not server.started and not server.should_exit:
        time.sleep(0.02)
    if server.started:
        shown = f"[{config.host}]" if ":" in config.host else config.host
        terminal.note(f"localspec serve: ready at http://{shown}:{config.port}/v1{detail}")


def _server(config, state):
    """uvicorn's server, ending every running request at SIGINT/SIGTERM before it stops
    accepting and drains (so that a stream ends at once, with its finish_reason)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            state.cancel_all()
            super().handle_exit(sig, frame)

    return Server(config)
