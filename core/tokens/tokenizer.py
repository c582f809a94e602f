"""Token text from the model's own tokenizer, found on this machine only.

A tokenizer is named by a path (a `tokenizer.json`, or a folder holding one) or by a
model name looked up in the local Hugging Face cache, as `HF_HUB_OFFLINE=1` would: a
name that is not there is an error that says how to get it, never a download. Text is
decoded one id at a time (a token's own text, not its neighbours'), each distinct id
once, so a long message costs one pass over its distinct ids.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from core.errors import TracewatchError

FILE = "tokenizer.json"
HINT = "token text needs a tokenizer: --tokenizer PATH (a tokenizer.json or a folder holding one) or a model name in the local Hugging Face cache, or tokenizer = \"...\" in the config's [variants]"


class TokenizerNotFound(TracewatchError, LookupError):
    """What was looked for, where, and what to do instead."""


def hub_cache() -> Path:
    """Where the Hugging Face hub keeps models, by its own environment variables."""
    if cache := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def find_tokenizer(spec: str, base_dir: Path | None = None) -> Path:
    """The `tokenizer.json` that `spec` names: a file, a folder holding one (relative to
    `base_dir`), or a model name (`org/name`) in the local hub cache."""
    path = (base_dir or Path.cwd()) / Path(spec).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        if (path / FILE).is_file():
            return path / FILE
        raise TokenizerNotFound(f"{path} holds no {FILE}")
    model = hub_cache() / ("models--" + spec.replace("/", "--"))
    for snapshot in _snapshots(model):
        if (snapshot / FILE).is_file():
            return snapshot / FILE
    raise TokenizerNotFound(
        f"no tokenizer {spec!r}: not a file or folder, and not in the local Hugging Face cache ({hub_cache()}); "
        f"tracewatch never downloads one: fetch it yourself (huggingface-cli download {spec} {FILE}) or pass a path"
    )


def _snapshots(model: Path) -> list[Path]:
    """The model's cached revisions, the one its `main` ref names first."""
    snapshots = model / "snapshots"
    if not snapshots.is_dir():
        return []
    found = sorted(snapshots.iterdir())
    ref = model / "refs" / "main"
    if ref.is_file():
        main = snapshots / ref.read_text().strip()
        found.sort(key=lambda snapshot: snapshot != main)
    return found


@dataclass(frozen=True)
class Piece:
    text: str
    """The token decoded alone, as the model's tokenizer writes it."""
    special: bool
    """A special or added control token (`<|im_end|>`), not text the model wrote."""


class TokenText:
    """Per-id decoding with a cache: each id is decoded once, however often it recurs
    and however many messages show it."""

    def __init__(self, tokenizer: Tokenizer, source: str) -> None:
        self._tokenizer = tokenizer
        self.source = source
        self._special = {index for index, token in tokenizer.get_added_tokens_decoder().items() if token.special}
        self._size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._pieces: dict[int, Piece] = {}

    @classmethod
    def load(cls, spec: str, base_dir: Path | None = None) -> TokenText:
        """TokenizerNotFound when `spec` names no tokenizer; ValueError when the file is
        not one `tokenizers` can read."""
        path = find_tokenizer(spec, base_dir)
        try:
            return cls(Tokenizer.from_file(str(path)), str(path))
        except Exception as error:  # noqa: BLE001 - the Rust side raises bare Exception
            raise ValueError(f"{path} is not a tokenizer tokenizers can read: {error}") from error

    def pieces(self, ids: Iterable[int]) -> list[Piece]:
        """Each id's piece, in order; an id outside the vocabulary reads as itself."""
        ids = list(ids)
        missing = sorted({index for index in ids if index not in self._pieces})
        known = [index for index in missing if 0 <= index < self._size]
        for index, text in zip(known, self._tokenizer.decode_batch([[index] for index in known], skip_special_tokens=False)):
            self._pieces[index] = Piece(text, index in self._special)
        for index in missing:
            self._pieces.setdefault(index, Piece(f"⟨{index}?⟩", True))
        return [self._pieces[index] for index in ids]

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)
