"""Chat templates: the file's own, in a sandbox; llama.cpp's built-ins; plain."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.engine import templates
from localspec.errors import TemplateError
from localspec.types import Message

MSGS = [Message("system", "Be brief."), Message("user", "Hi")]


def test_renders_the_models_template():
    tmpl = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    out = templates.render(MSGS, tmpl)
    assert out.source == "gguf"
    assert out.text == "[system] Be brief.\n[user] Hi\n[assistant]"


def test_bos_token_and_raise_exception_are_available():
    tmpl = "{{ bos_token }}{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}"
    assert templates.render([Message("user", "x")], tmpl, bos_token="<s>").text == "<s>"
    with pytest.raises(TemplateError, match="user first"):
        templates.render(MSGS, tmpl, builtin=lambda t, m: None)


@pytest.mark.parametrize(
    "attack",
    [
        "{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}",
        "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch {marker}') }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ lipsum.__globals__['os'].popen('touch {marker}') }}",
    ],
)
def test_a_template_that_reaches_for_os_is_refused_and_runs_nothing(attack: str, tmp_path: Path):
    marker = tmp_path / "pwned"
    with pytest.raises(TemplateError, match="unsafe"):
        templates.render(MSGS, attack.replace("{marker}", str(marker)))
    assert not marker.exists()


def test_a_broken_template_falls_back_to_llama_cpp_recognising_it():
    seen = {}

    def builtin(tmpl: str, pairs: list[tuple[str, str]]) -> str | None:
        seen["tmpl"] = tmpl
        return "BUILTIN:" + "|".join(c for _, c in pairs)

    out = templates.render(MSGS, "{% if %}<|im_start|>", builtin=builtin)
    assert out.source == "builtin:detected"
    assert out.text == "BUILTIN:Be brief.|Hi"
    assert seen["tmpl"] == "{% if %}<|im_start|>"


def test_a_broken_template_nobody_recognises_is_a_clear_error():
    with pytest.raises(TemplateError, match="failed to render"):
        templates.render(MSGS, "{% if %}", builtin=lambda t, m: None)


def test_no_template_uses_the_architectures_builtin_else_plain():
    out = templates.render(MSGS, None, builtin=lambda t, m: f"<{t}>", builtin_name="gemma")
    assert (out.text, out.source) == ("<gemma>", "builtin:gemma")
    plain = templates.render(MSGS, None)
    assert plain.source == "plain"
    assert plain.text.endswith("User: Hi\n\nAssistant:")
