"""Chat messages -> prompt text, with the model's own template run in a sandbox.

A GGUF's ``tokenizer.chat_template`` is Jinja code from the internet, so it runs in
jinja2's ``ImmutableSandboxedEnvironment``: a template that reaches for ``__globals__``,
``os`` or ``popen`` fails with a ``TemplateError`` before anything runs. A template the
sandbox cannot render for other reasons falls back to llama.cpp's built-in templates (which
recognise the common formats). A model with no template gets llama.cpp's built-in template
for its architecture when there is one, else a plain format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localspec.errors import TemplateError
from localspec.types import Message

BuiltinRenderer = Callable[[str, list[tuple[str, str]]], "str | None"]


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    source: str  # "gguf" (the file's Jinja template), "builtin:<template>", or "plain"


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False}
    return env


_ENV = _environment()


def render_jinja(
    template: str, messages: list[Message], *, bos_token: str = "", eos_token: str = ""
) -> str:
    """Render ``template`` in the sandbox. Raises TemplateError for an unsafe template
    (SecurityError) and jinja2's own errors for one that is merely broken."""
    try:
        compiled = _ENV.from_string(template)
        return compiled.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except SecurityError as exc:
        raise TemplateError(
            f"The model's chat template tried an unsafe operation ({exc}); "
            "refusing to run it (use --raw to skip the template)."
        ) from exc


def plain_format(messages: list[Message]) -> str:
    """A neutral format for models that ship no template."""
    parts = [f"{m.role.capitalize()}: {m.content}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


def render(
    messages: list[Message],
    template: str | None,
    *,
    bos_token: str = "",
    eos_token: str = "",
    builtin: BuiltinRenderer | None = None,
    builtin_name: str | None = None,
) -> RenderedPrompt:
    """Render with the file's template; else llama.cpp's built-in ``builtin_name`` (the
    one for the model's architecture, when llama.cpp has one); else the plain format."""
    pairs = [(m.role, m.content) for m in messages]
    if template:
        try:
            return RenderedPrompt(
                render_jinja(template, messages, bos_token=bos_token, eos_token=eos_token),
                "gguf",
            )
        except TemplateError:
            raise
        except jinja2.exceptions.TemplateError as exc:
            text = builtin(template, pairs) if builtin else None
            if text is None:
                raise TemplateError(
                    f"The model's chat template failed to render ({exc}); "
                    "use --raw to send the prompt as it is."
                ) from exc
            return RenderedPrompt(text, "builtin:detected")
    if builtin and builtin_name:
        text = builtin(builtin_name, pairs)
        if text is not None:
            return RenderedPrompt(text, f"builtin:{builtin_name}")
    return RenderedPrompt(plain_format(messages), "plain")
