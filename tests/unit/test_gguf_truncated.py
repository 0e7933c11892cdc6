"""A GGUF cut short (an interrupted download or copy) is refused with one sentence, by
``localspec info`` and before llama.cpp loads it (issue 14)."""

from __future__ import annotations

import re
from pathlib import Path

import gguf
import pytest
from typer.testing import CliRunner

from localspec.errors import ModelLoadError
from localspec.resolve.gguf_info import check_complete, read_header, read_info



def data_end(path: Path) -> int:
    """Where the last tensor's data ends, as the ``gguf`` package's own reader sees it."""
    reader = gguf.GGUFReader(path)
    return max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)


def info(*args: str):
    from localspec.cli import app

    return CliRunner().invoke(app, ["info", *args])


def cut(src: Path, dst: Path, n: int) -> Path:
    dst.write_bytes(src.read_bytes()[:n])
    return dst


@pytest.fixture(scope="module")
def cuts(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cut")
    end, header_bytes = data_end(tiny_model), read_header(tiny_model)[0].header_bytes
    return {
        "mid_data": cut(tiny_model, d / "mid.gguf", (header_bytes + end) // 2),
        "one_byte_short": cut(tiny_model, d / "short.gguf", end - 1),
        "exact": cut(tiny_model, d / "exact.gguf", end),
        "in_header": cut(tiny_model, d / "header.gguf", header_bytes // 2),
    }


@pytest.mark.parametrize("which", ["mid_data", "one_byte_short"])
def test_cut_tensor_data_is_one_sentence_naming_file_and_tensor(cuts: dict[str, Path], which: str) -> None:
    path = cuts[which]
    for check in (check_complete, read_info):
        with pytest.raises(ModelLoadError) as err:
            check(path)
        msg = str(err.value)
        assert msg.startswith(f"{path} is truncated: tensor '")
        assert f"but the file has {path.stat().st_size:,}; download it again." in msg
        assert "\n" not in msg and msg.count(". ") == 0


def test_one_byte_short_names_the_last_tensor_and_the_size_needed(tiny_model: Path, cuts: dict[str, Path]) -> None:
    last = max(gguf.GGUFReader(tiny_model).tensors, key=lambda t: int(t.data_offset))
    with pytest.raises(ModelLoadError, match=rf"tensor '{re.escape(last.name)}' needs bytes up to {data_end(tiny_model):,} "):
        check_complete(cuts["one_byte_short"])


def test_cut_inside_the_header_is_refused(cuts: dict[str, Path]) -> None:
    with pytest.raises(ModelLoadError, match="is truncated or damaged: its GGUF header cannot be read"):
        check_complete(cuts["in_header"])


def test_whole_file_and_one_ending_with_its_last_tensor_pass(tiny_model: Path, cuts: dict[str, Path]) -> None:
    check_complete(tiny_model)
    check_complete(cuts["exact"])
    assert read_info(cuts["exact"]).n_layer == read_info(tiny_model).n_layer == 2


def test_a_file_cut_after_it_was_checked_is_checked_again(tiny_model: Path, tmp_path: Path) -> None:
    path = cut(tiny_model, tmp_path / "m.gguf", tiny_model.stat().st_size)
    check_complete(path)
    path.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(ModelLoadError, match="is truncated: tensor"):
        check_complete(path)


def test_a_cut_split_part_is_named(tiny_split: list[Path], tmp_path: Path) -> None:
    first, second = (cut(p, tmp_path / p.name, p.stat().st_size) for p in tiny_split)
    check_complete(first)
    cut(second, second, second.stat().st_size - 1000)
    with pytest.raises(ModelLoadError, match=rf"^{re.escape(str(second))} is truncated: tensor"):
        check_complete(first)


@pytest.mark.parametrize("which", ["mid_data", "one_byte_short", "in_header"])
def test_info_exits_1_with_one_line(cuts: dict[str, Path], which: str) -> None:
    res = info(str(cuts[which]))
    assert res.exit_code == 1, (res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert "truncated" in lines[0] and cuts[which].name in res.stderr


def test_info_on_the_whole_file_still_works(tiny_model: Path) -> None:
    res = info(str(tiny_model), "--json")
    assert res.exit_code == 0, res.stderr
    assert '"n_layer": 2' in res.stdout


@pytest.mark.parametrize("which", ["mid_data", "one_byte_short", "in_header"])
def test_model_load_refuses_before_llama_cpp(cuts: dict[str, Path], which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from localspec.engine import backend

    def never(*args: object) -> None:
        raise AssertionError("llama.cpp was asked to load a truncated file")

    monkeypatch.setattr(backend.lc, "llama_model_load_from_file", never)
    with pytest.raises(ModelLoadError, match="truncated"):
        backend.Model(cuts[which])


def test_model_loads_the_whole_file(tiny_model: Path) -> None:
    from localspec.engine import backend

    m = backend.Model(tiny_model)
    try:
        assert m.n_layer == 2
    finally:
        m.close()
