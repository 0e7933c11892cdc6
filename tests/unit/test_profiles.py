"""Profiles: the shipped ones validate, errors name file/key/line, settings precedence."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from localspec import profiles
from localspec.cli import app
from localspec.errors import ProfileError
from localspec.settings import build

SHIPPED = sorted(profiles.shipped_dir().glob("*.yaml"))
runner = CliRunner()


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOCALSPEC_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("LOCALSPEC_PROFILE", raising=False)
    return tmp_path / "config"


def test_the_issue_s_profiles_are_shipped() -> None:
    assert {p.stem for p in SHIPPED} >= {"qwen2.5-coder-1.5b", "qwen2.5-coder-7b", "llama-3.1-8b-instruct", "gemma-3-4b-it"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_profile_validates(path: Path) -> None:
    from localspec.resolve.names import parse_hub

    p = profiles.load_file(path)
    assert p.model and p.draft and p.description
    target, draft = parse_hub(p.model), parse_hub(p.draft)
    assert target.quant and draft.quant and target.repo != draft.repo


def test_validate_command_on_the_shipped_profiles() -> None:
    got = runner.invoke(app, ["profiles", "validate", *map(str, SHIPPED)])
    assert got.exit_code == 0, got.stderr


@pytest.mark.parametrize(
    "text, message",
    [
        ("model: org/repo\nsampling:\n  temprature: 0.5\n", "line 3: sampling.temprature is not a known key."),
        ("model: org/repo\nsampling:\n  top_k: ten\n", "line 3: sampling.top_k must be an integer (got 'ten')."),
        ("model: org/repo\nsampling:\n  temperature: '0.7'\n", "line 3: sampling.temperature must be a number (got '0.7')."),
        ("model: org/repo\ncontext:\n  kv_type: f32\n", "line 3: context.kv_type must be one of 'f16', 'q8_0' or 'q4_0' (got 'f32')."),
        ("model: org/repo\ncontext:\n  gpu_layers: many\n", "line 3: context.gpu_layers must be 'auto' or 'all', or an integer (got 'many')."),
        ("description: x\n\nmodle: org/repo\n", "line 3: modle is not a known key."),
        ("model: org/../x\n", "line 1: model 'org/../x' is not a valid Hub model name: it has an empty, '.' or '..' component."),
        ("model: org/repo\nspeculation:\n  mode: fast\n", "line 3: speculation.mode must be one of 'auto', 'ngram', 'draft' or 'off' (got 'fast')."),
        ("model: [org/repo\n", "line 2: not valid YAML (expected ',' or ']', but got '<stream end>')."),
        ("- a\n- b\n", "line 1: a profile is a mapping of keys to values."),
    ],
)
def test_a_bad_profile_names_the_file_the_key_and_the_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ProfileError) as err:
        profiles.load_file(f)
    assert str(err.value) == f"{f}, {message}"
    got = runner.invoke(app, ["profiles", "validate", str(f)])
    assert got.exit_code == 1 and got.stderr.strip() == f"error: {f}, {message}"


def _user_profile(config_dir: Path, name: str, text: str) -> None:
    (config_dir / "profiles").mkdir(parents=True, exist_ok=True)
    (config_dir / "profiles" / f"{name}.yaml").write_text(text)


def test_precedence_flag_env_user_shipped_default(config_dir: Path) -> None:
    _user_profile(config_dir, "qwen2.5-coder-1.5b", "sampling:\n  temperature: 0.2\n  top_k: 5\n")
    s = build("qwen2.5-coder-1.5b", {"top_k": (7, "env LOCALSPEC_TOP_K"), "min_p": (0.1, "flag")})
    assert s.model == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M"  # shipped
    assert (s.temperature, s.sources["temperature"]) == (0.2, "user profile qwen2.5-coder-1.5b")  # user > shipped
    assert (s.top_p, s.sources["top_p"]) == (0.8, "shipped profile qwen2.5-coder-1.5b")
    assert (s.top_k, s.sources["top_k"]) == (7, "env LOCALSPEC_TOP_K")  # env > user
    assert (s.min_p, s.sources["min_p"]) == (0.1, "flag")
    assert (s.kv_type, s.sources["kv_type"]) == ("f16", "default")
    plain = build("org/repo:Q8_0", {})
    assert plain.profile is None and plain.model == "org/repo:Q8_0" and plain.draft is None


def test_unknown_profile_and_profile_without_model(config_dir: Path) -> None:
    with pytest.raises(ProfileError, match=r"^No profile named 'nope'; profiles: gemma-3-4b-it, "):
        profiles.layers("nope")
    _user_profile(config_dir, "mine", "sampling:\n  temperature: 0.2\n")
    with pytest.raises(ProfileError, match=r"^Profile 'mine' names no model"):
        build("mine", {})


def test_default_profile_is_settable(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert build(None, {}).profile is None
    got = runner.invoke(app, ["profiles", "default", "qwen2.5-coder-7b"])
    assert got.exit_code == 0, got.stderr
    assert "default_profile: qwen2.5-coder-7b" in (config_dir / "config.yaml").read_text()
    assert build(None, {}).model == "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M"
    monkeypatch.setenv("LOCALSPEC_PROFILE", "gemma-3-4b-it")  # the environment wins
    assert build(None, {}).profile == "gemma-3-4b-it"
    bad = runner.invoke(app, ["profiles", "default", "nope"])
    assert bad.exit_code == 1 and bad.stderr.startswith("error: No profile named 'nope'")


def test_run_through_a_user_profile_with_env_and_flag(config_dir: Path, tiny_model: Path, monkeypatch) -> None:
    _user_profile(config_dir, "tiny", f"model: {tiny_model}\nsampling:\n  temperature: 0.0\n  top_k: 3\n"
                  "  max_tokens: 5\ncontext:\n  ctx_size: 256\n")
    got = runner.invoke(app, ["run", "tiny", "--raw", "hello", "--json", "--verbose"])
    assert got.exit_code == 0, got.stderr
    assert '"completion_tokens": 5' in got.stdout
    assert "profile tiny" in got.stderr and "temperature=0.0 (user profile tiny)" in got.stderr
    monkeypatch.setenv("LOCALSPEC_TOP_K", "9")
    got = runner.invoke(app, ["run", "tiny", "--raw", "hello", "--json", "--verbose", "-n", "3"])
    assert got.exit_code == 0, got.stderr
    assert "top_k=9 (env LOCALSPEC_TOP_K)" in got.stderr and "max_tokens=3 (flag)" in got.stderr
    assert '"completion_tokens": 3' in got.stdout
    # a lone profile name is the model, not the prompt
    alone = runner.invoke(app, ["run", "tiny"], input="")
    assert alone.exit_code == 1 and "The prompt is empty" in alone.stderr


def test_the_plain_defaults_are_the_settings_defaults() -> None:
    """--help shows localspec.defaults (no pydantic to load); Settings must agree."""
    from localspec import defaults, settings

    assert settings.DEFAULTS == defaults.DEFAULTS


def test_a_profile_names_a_schema_file_beside_it(config_dir: Path, tiny_model: Path) -> None:
    """``json_schema: FILE`` (relative to the profile) constrains `run`; a constraint flag
    overrides it; a missing file is an error naming the profile."""
    import json
    import re

    _user_profile(config_dir, "tiny", f"model: {tiny_model}\njson_schema: ab.json\nsampling:\n  temperature: 0.0\n"
                  "  max_tokens: 30\ncontext:\n  ctx_size: 256\n")
    (config_dir / "profiles" / "ab.json").write_text(json.dumps(
        {"type": "object", "properties": {"a": {"enum": ["x", "y"]}}, "required": ["a"], "additionalProperties": False}))
    got = runner.invoke(app, ["run", "tiny", "--raw", "abc"])
    assert got.exit_code == 0, got.stderr
    assert json.loads(got.stdout)["a"] in ("x", "y")
    over = runner.invoke(app, ["run", "tiny", "--raw", "abc", "--regex", "[ab]{3,9}"])
    assert over.exit_code == 0 and re.fullmatch(r"[ab]{3,9}\n", over.stdout), over.stderr
    (config_dir / "profiles" / "ab.json").unlink()
    gone = runner.invoke(app, ["run", "tiny", "--raw", "abc"])
    assert gone.exit_code == 1 and "json_schema names ab.json, which is not a file" in gone.stderr
