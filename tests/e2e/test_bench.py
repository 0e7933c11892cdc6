"""``localspec bench`` and the speculation options of ``run``, on the tiny models."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from localspec.cli import app

runner = CliRunner()


def test_bench_compares_plain_and_ngram_and_writes_json(tiny_model: Path):
    res = runner.invoke(app, ["bench", str(tiny_model), "-n", "24", "--only", "code-edit", "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    runs = data["runs"]
    assert [(r["prompt"], r["mode"]) for r in runs] == [
        ("code-edit-1", "off"), ("code-edit-1", "ngram"), ("code-edit-2", "off"), ("code-edit-2", "ngram"),
    ]
    for r in runs:
        assert r["tokens"] > 0 and r["decode_tokens_per_s"] > 0
    spec = [r for r in runs if r["mode"] == "ngram"]
    assert all(r["identical"] for r in spec)  # f32 model: speculation changes nothing
    # three rounds by default, a ratio per round, the median reported; an answer under
    # 64 tokens gets rounds in proportion (24 tokens: 3 x 3)
    plain = {r["prompt"]: r["tokens"] for r in runs if r["mode"] == "off"}
    for r in spec:
        assert len(r["ratios"]) == 3 * min(3, -(-64 // plain[r["prompt"]]))
        assert r["ratio"] == pytest.approx(statistics.median(r["ratios"]), abs=1e-3)
    assert "ngram@64" in data["summary"]  # the default --draft-max
    assert "localspec bench · tiny.gguf" in res.stderr  # the table goes to stderr


def test_bench_with_a_draft_and_a_sweep(tiny_model: Path, tiny_draft: Path, tmp_path: Path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"name": "mine", "prompt": "count to ten"}\n\n{"prompt": "say hi"}\n')
    res = runner.invoke(app, [
        "bench", str(tiny_model), "--draft", str(tiny_draft), "--modes", "draft", "--draft-min", "2",
        "--draft-p-min", "0", "--prompts", str(prompts), "--sweep", "2,4", "-n", "16", "--json",
    ])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    names = {r["prompt"] for r in data["runs"]}
    assert names == {"mine", "prompt-3"}
    assert {r["draft_max"] for r in data["runs"] if r["mode"] == "draft"} == {2, 4}
    assert all(r["identical"] for r in data["runs"])
    assert data["best_draft_max"]["draft"] in (2, 4)
    assert "best --draft-max for draft" in res.stderr


def test_a_bad_prompts_file_is_one_sentence(tiny_model: Path, tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "x"}\n')
    res = runner.invoke(app, ["bench", str(tiny_model), "--prompts", str(bad)])
    assert res.exit_code == 1
    assert "line 1" in res.stderr and "Traceback" not in res.stderr


def test_run_reports_speculation_in_json(tiny_model: Path):
    res = runner.invoke(app, [
        "run", str(tiny_model), "--raw", "abc abc abc abc abc", "-t", "0", "-n", "40",
        "--spec", "ngram", "--json",
    ])
    assert res.exit_code == 0, res.stderr
    stats = json.loads(res.stdout)["spec_stats"]
    assert set(stats) >= {"mode", "drafted", "accepted", "acceptance_rate", "mean_accepted_per_step", "draft_lengths"}
    assert stats["mode"] in ("ngram", "off")
    assert sum(stats["draft_lengths"].values()) == stats["steps"]


def test_run_with_spec_off_equals_spec_on(tiny_model: Path, tiny_draft: Path):
    base = ["run", str(tiny_model), "--raw", "hello hello", "-t", "0", "-n", "40"]
    off = runner.invoke(app, base + ["--spec", "off"])
    on = runner.invoke(app, base + ["--spec", "auto", "--draft", str(tiny_draft), "--draft-min", "3", "--draft-p-min", "0"])
    assert off.exit_code == on.exit_code == 0
    assert off.stdout == on.stdout


def test_show_draft_adds_no_colour_to_a_pipe(tiny_model: Path):
    res = runner.invoke(app, ["run", str(tiny_model), "--raw", "abc abc abc", "-t", "0", "-n", "30", "--show-draft"])
    assert res.exit_code == 0 and "\x1b[" not in res.stdout


def test_a_mismatched_draft_is_refused_with_one_sentence(tiny_model: Path, tiny_other_vocab: Path):
    res = runner.invoke(app, ["run", str(tiny_model), "--raw", "hi", "--draft", str(tiny_other_vocab)])
    assert res.exit_code == 1
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "tiny-other-vocab.gguf" in lines[0] and "Traceback" not in res.stderr


def test_bad_speculation_options_are_usage_errors(tiny_model: Path):
    assert runner.invoke(app, ["run", str(tiny_model), "hi", "--spec", "fast"]).exit_code == 2
    assert runner.invoke(app, ["run", str(tiny_model), "hi", "--draft-min", "9", "--draft-max", "4"]).exit_code == 2
    assert runner.invoke(app, ["bench", str(tiny_model), "--modes", "draft"]).exit_code == 2


def test_bench_against_raw_llama_cpp(tiny_model: Path):
    res = runner.invoke(app, ["bench", str(tiny_model), "-n", "16", "--only", "chat", "--vs-llama-cpp", "--json"])
    assert res.exit_code == 0, res.stderr
    plain = [r for r in json.loads(res.stdout)["runs"] if r["mode"] == "off"]
    assert plain and all(r["llama_cpp_tokens_per_s"] > 0 for r in plain)
    assert "llama.cpp" in res.stderr


def test_bench_under_a_constraint(tiny_model: Path):
    """Every run of the bench (plain too) under the same grammar: the output is as
    constrained (at most 12 tokens of a or b: fewer than asked for) and the same with
    drafts; a bad grammar is one sentence."""
    res = runner.invoke(app, ["bench", str(tiny_model), "-n", "40", "--only", "code-edit-1", "--repeat", "1",
                              "--regex", "[ab]{1,12}", "--json"])
    assert res.exit_code == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    assert all(0 < r["tokens"] <= 13 for r in runs) and all(r["identical"] for r in runs)
    bad = runner.invoke(app, ["bench", str(tiny_model), "--only", "code-edit-1", "--regex", "(["])
    assert bad.exit_code == 1 and "regex is not valid" in bad.stderr


STAND_IN = '''#!{python}
"""A stand-in for llama-server's API (the bench's side is what is tested): /health, and
chat completions whose timings depend on --spec-type; like llama.cpp's, its ngram-mod
would draft a prompt's second round from the first (twice the rate) on the same server."""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
kind = args[args.index("--spec-type") + 1] if "--spec-type" in args else "plain"
rate = {{"plain": 100.0, "ngram-simple": 110.0, "ngram-mod": 150.0}}[kind]
served = []


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send({{"status": "ok"}})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = req["max_tokens"]
        seen = req["messages"][-1]["content"] in served
        served.append(req["messages"][-1]["content"])
        self._send({{"choices": [{{"message": {{"content": "word " * n}}}}],
                    "timings": {{"predicted_per_second": rate * (2 if seen and kind == "ngram-mod" else 1),
                                "predicted_n": n,
                                "draft_n": 0 if kind == "plain" else n, "draft_n_accepted": 0 if kind == "plain" else n // 2}}}})


HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def test_bench_beside_llama_server(tiny_model: Path, tmp_path: Path):
    import sys

    exe = tmp_path / "llama-server"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    res = runner.invoke(app, ["bench", str(tiny_model), "-n", "8", "--only", "code-edit-1", "-r", "2",
                              "--vs-llama-server", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    modes = [r["mode"] for r in data["runs"]]
    assert modes == ["off", "ngram", "llama-server plain", "llama-server ngram-simple", "llama-server ngram-mod"]
    theirs = {r["mode"]: r for r in data["runs"] if r["mode"].startswith("llama-server")}
    # the stand-in's ratios agree: its 2 rounds settle them, each on a fresh server; localspec's
    # own may disagree and get more rounds, at most 3 x 2 (ROUNDS_MAX)
    assert theirs["llama-server ngram-mod"]["ratio"] == 1.5 and theirs["llama-server ngram-mod"]["ratios"] == [1.5] * 2
    assert 2 <= len(next(r for r in data["runs"] if r["mode"] == "ngram")["ratios"]) <= 6
    assert theirs["llama-server ngram-simple"]["acceptance_rate"] == 0.5
    row = data["against_llama_server"]["code-edit-1"]
    assert row["llama_best"] == "ngram-mod" and row["llama_best_ratio"] == 1.5
    assert row["ahead"] == pytest.approx(row["localspec_ngram"] / 1.5, abs=0.002)  # (each rounded to 3 places)
    assert row["neither_drafted"] is False and "neither drafted" not in res.stderr
    assert "llama-server ngram-mod" in res.stderr and "times its best" in res.stderr


def test_bench_without_llama_server_where_it_is_said_is_one_sentence(tiny_model: Path, tmp_path: Path):
    res = runner.invoke(app, ["bench", str(tiny_model), "--vs-llama-server", str(tmp_path)])
    assert res.exit_code == 1 and "No llama-server in" in res.stderr and "Traceback" not in res.stderr


def test_bench_runs_shipped_suites_and_reports_each_kinds_geometric_mean(tiny_model: Path):
    res = runner.invoke(app, ["bench", str(tiny_model), "--suite", "specbench,edits", "--only", "translation",
                              "-n", "4", "-r", "1", "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    names = [r["prompt"] for r in data["runs"] if r["mode"] == "off"]
    assert names == ["sb-translation-161", "sb-translation-181", "sb-translation-201", "sb-translation-221"]
    geo = data["by_kind"]["translation"]
    assert geo["prompts"] == 4 and geo["ngram"] > 0
    assert "geometric mean" not in res.stderr  # one kind: the summary says it all
    kinds = runner.invoke(app, ["bench", str(tiny_model), "--suite", "builtin,edits", "--only", "code-", "-n", "4",
                                "-r", "1"])
    assert kinds.exit_code == 0, kinds.stderr
    for line in ("code-editing (2 prompts), geometric mean: ngram", "code-edit-rhythm (8 prompts), geometric mean: ngram"):
        assert line in kinds.stderr


@pytest.mark.parametrize("args, message", [
    (["--suite", "nope"], "No suite 'nope': choose from builtin, agent, specbench, edits."),
    (["--suite", " , "], "Name a suite: builtin, agent, specbench, edits or all."),
])
def test_an_unknown_suite_is_one_sentence(tiny_model: Path, args: list[str], message: str):
    res = runner.invoke(app, ["bench", str(tiny_model), *args, "-n", "2"])
    assert res.exit_code == 1 and message in res.stderr and "Traceback" not in res.stderr


def test_a_suite_and_a_prompts_file_are_not_both_taken(tiny_model: Path, tmp_path: Path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "say hi"}\n')
    res = runner.invoke(app, ["bench", str(tiny_model), "--suite", "edits", "--prompts", str(prompts)])
    assert res.exit_code == 2 and "either --prompts or --suite" in res.stderr
