"""Token text: a tokenizer is found by path or in the local Hugging Face cache only
(never downloaded), each id decoded alone and once; the demo's committed tokenizer is
what its training script makes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tracewatch.core.demo import vocabulary
from tracewatch.core.session.config import build_config
from tracewatch.core.tokens.tokenizer import TokenizerNotFound, TokenText, find_tokenizer


def test_the_committed_demo_tokenizer_is_what_training_makes() -> None:
    assert json.loads(vocabulary.train().to_str()) == json.loads(vocabulary.PATH.read_text())


def test_a_tokenizer_is_found_by_file_folder_or_cached_model_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(vocabulary.PATH, folder / "tokenizer.json")
    assert find_tokenizer(str(folder / "tokenizer.json")) == folder / "tokenizer.json"
    assert find_tokenizer("model", base_dir=tmp_path) == folder / "tokenizer.json"

    cache = tmp_path / "hub"
    model = cache / "models--acme--tiny-chat"
    for revision in ("aaa", "bbb"):
        (model / "snapshots" / revision).mkdir(parents=True)
    shutil.copy(vocabulary.PATH, model / "snapshots" / "bbb" / "tokenizer.json")
    shutil.copy(vocabulary.PATH, model / "snapshots" / "aaa" / "tokenizer.json")
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text("bbb\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert find_tokenizer("acme/tiny-chat", base_dir=tmp_path) == model / "snapshots" / "bbb" / "tokenizer.json"

    with pytest.raises(TokenizerNotFound, match="never downloads"):
        find_tokenizer("acme/not-cached", base_dir=tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerNotFound, match="holds no tokenizer.json"):
        find_tokenizer("empty", base_dir=tmp_path)
    (tmp_path / "junk.json").write_text("{not a tokenizer")
    with pytest.raises(ValueError, match="not a tokenizer"):
        TokenText.load("junk.json", base_dir=tmp_path)


def test_each_id_reads_alone_and_specials_are_marked() -> None:
    text = TokenText.load(str(vocabulary.PATH))
    ids = text.encode("<|im_start|>assistant\nRun the tests.<|im_end|>")
    pieces = text.pieces([*ids, 10**9, -3])
    assert "".join(piece.text for piece in pieces[:-2]) == "<|im_start|>assistant\nRun the tests.<|im_end|>"
    assert [piece.special for piece in pieces[:-2]] == [True] + [False] * (len(ids) - 2) + [True]
    assert [piece.text for piece in pieces[-2:]] == ["⟨1000000000?⟩", "⟨-3?⟩"]
    assert text.pieces(ids) == pieces[: len(ids)]


def test_a_variant_names_its_tokenizer_relative_to_the_config(tmp_path: Path) -> None:
    shutil.copy(vocabulary.PATH, tmp_path / "tok.json")
    config = build_config(
        {"variants": [
            {"name": "a", "attach": "tcp://127.0.0.1:5555", "tasks": [{}], "model": "m", "tokenizer": "tok.json"},
            {"name": "b", "attach": "tcp://127.0.0.1:5556", "tasks": [{}], "model": "m", "tokenizer": "Qwen/Qwen3-8B"},
        ]},
        "test", tmp_path,
    )
    assert [variant.tokenizer for variant in config.variants] == [str(tmp_path / "tok.json"), "Qwen/Qwen3-8B"]
