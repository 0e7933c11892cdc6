"""Chat templates: the file's own, in a sandbox; llama.cpp's built-ins; plain."""

from __future__ import annotations

import time
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


# --- A runaway template is cut off: bounded time and size, one clear sentence. ---

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content|trim }}"
    "{{ '<|im_end|>' ~ '\\n' }}{% if loop.last %}{{ loop.length }}{% endif %}{% endfor %}"
    "{% for i in range(3)|reverse %}{{ i }}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _timed_render(tmpl: str) -> tuple[TemplateError, float]:
    start = time.monotonic()
    with pytest.raises(TemplateError) as err:
        # A builtin that recognises anything: a runaway template must not fall back to it.
        templates.render(MSGS, tmpl, builtin=lambda t, m: "BUILTIN")
    return err.value, time.monotonic() - start


@pytest.mark.parametrize(
    "tmpl",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% set s %}{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}"
        "{% endfor %}{% endset %}",
        "{% for x in [1] recursive %}{% for i in range(99999) %}{% for j in range(30) %}{% endfor %}{% endfor %}"
        "{{ loop([1]) }}"
        "{% endfor %}",
    ],
    ids=["nested-ranges-no-output", "captured-block", "recursive-loop"],
)
def test_a_template_that_loops_without_end_stops_at_the_deadline(tmpl: str):
    err, elapsed = _timed_render(tmpl)
    assert str(err) == (
        f"The model's chat template did not finish rendering within "
        f"{templates.RENDER_TIMEOUT_S:g} s; use --raw, or a model with a working template."
    )
    assert elapsed < templates.RENDER_TIMEOUT_S + 3
    # The deadline belonged to that render only.
    assert templates.render(MSGS, CHATML).source == "gguf"


@pytest.mark.parametrize(
    "tmpl",
    [
        "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        "{{ 'x' * 10**9 }}",
        "{% set s = 'x' * 4000000 %}" + "{% set s = s ~ s %}" * 40,
        "{% set s = 'x' * 4000000 %}" + "{% set s = s + s %}" * 40,
        "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}",
        "{% set s = 'x' * 4000 %}{{ s|replace('x', 'x' * 2000)|length }}",
    ],
    ids=["megabytes-of-output", "one-huge-repeat", "concat-doubling", "plus-doubling",
         "namespace-doubling", "filter-result"],
)
def test_a_template_that_produces_megabytes_is_cut_off(tmpl: str):
    err, elapsed = _timed_render(tmpl)
    assert str(err) == (
        "The model's chat template produced over 4 MiB of text; "
        "use --raw, or a model with a working template."
    )
    assert elapsed < 5


def test_a_huge_power_and_endless_recursion_are_clear_errors():
    err, elapsed = _timed_render("{{ (10 ** 100000000) > 1 }}")
    assert "to the power 100000000" in str(err) and elapsed < 1
    err, _ = _timed_render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
    assert "recursed without end" in str(err)


def test_the_bounds_leave_a_real_template_alone_even_with_a_huge_message():
    out = templates.render(MSGS, CHATML)
    assert out.text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n2"
        "210<|im_start|>assistant\n"
    )
    big = "y" * (6 * 2**20)  # a pasted file bigger than the cap itself
    out = templates.render([Message("user", big)], CHATML)
    assert out.text == f"<|im_start|>user\n{big}<|im_end|>\n1210<|im_start|>assistant\n"


def test_tools_calls_and_results_go_through_a_template_that_knows_them(qwen_05b: Path):
    from localspec.engine.backend import Model
    from localspec.types import Tool, ToolCall

    model = Model(qwen_05b)
    try:
        tool = Tool("get_weather", "Get the weather.", {"type": "object", "properties": {"city": {"type": "string"}}})
        messages = [Message("user", "Weather in Paris?"),
                    Message("assistant", "", tool_calls=(ToolCall("get_weather", '{"city": "Paris"}', "call_1"),)),
                    Message("tool", "21 C", tool_call_id="call_1", name="get_weather")]
        text = templates.render(messages, model.chat_template, tools=(tool,)).text
    finally:
        model.close()
    assert '"name": "get_weather", "description": "Get the weather."' in text  # the tools, in the system prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\n21 C\n</tool_response>" in text


def test_a_template_without_tools_gets_them_as_text():
    from localspec.types import Tool, ToolCall

    tool = Tool("get_time", "Get the time.")
    messages = [Message("system", "Be brief."), Message("user", "Time?"),
                Message("assistant", "", tool_calls=(ToolCall("get_time", "{}", "c1"),)),
                Message("tool", "noon", tool_call_id="c1", name="get_time")]
    template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    text = templates.render(messages, template, tools=(tool,)).text
    assert text.startswith("[system] Be brief.\n\nYou may call these functions:\n")
    assert '"name": "get_time"' in text and '[assistant] {"name": "get_time", "arguments": {}}' in text
    assert "[user] The function get_time returned: noon" in text
