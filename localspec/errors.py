"""Errors a user can cause or fix.

Each carries one sentence for stderr (its ``str``); the CLI prints it and exits with
``exit_code``, the server turns it into an OpenAI-style error body. Anything that is not a
``LocalspecError`` is a bug in localspec, not a user mistake.
"""

from __future__ import annotations


class LocalspecError(Exception):
    """Base class: ``str(err)`` is the sentence a user sees."""

    exit_code = 1
    http_status = 400

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: Extra lines (llama.cpp's own log, say) shown only under --verbose.
        self.detail = detail


class ModelNotFound(LocalspecError):
    http_status = 404


class ModelLoadError(LocalspecError):
    """The file exists but llama.cpp cannot load it (not GGUF, corrupt, unsupported)."""


class OutOfMemory(LocalspecError):
    http_status = 507


class ContextError(LocalspecError):
    """llama.cpp could not create a context (too large, bad parameters)."""


class PromptTooLong(LocalspecError):
    pass


class InvalidRequest(LocalspecError):
    """Bad parameters or an empty prompt."""


class TemplateError(LocalspecError):
    """The chat template is unsafe or cannot be rendered."""


class DecodeError(LocalspecError):
    """llama_decode failed mid-generation."""

    http_status = 500


class EngineClosed(LocalspecError):
    http_status = 503


class DraftMismatch(LocalspecError):
    """The draft model's tokenizer does not match the target's."""


class InvalidModelName(LocalspecError):
    """A model name that is neither a path nor a well-formed Hub name."""


class HubError(LocalspecError):
    """The Hub answered, but not with the model asked for (no repo, no GGUF, no quant,
    gated without a token, a download that does not match its checksum)."""

    http_status = 404


class HubUnreachable(LocalspecError):
    """The Hub (or HF_ENDPOINT) cannot be reached."""

    http_status = 503


class NotInCache(LocalspecError):
    """Offline, and the model is not in the Hugging Face cache."""

    http_status = 404


class ProfileError(LocalspecError):
    """A profile that does not exist or does not validate."""
