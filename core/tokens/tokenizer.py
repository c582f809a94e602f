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
from typing import TYPE_CHECKING

from tracewatch.core.errors import TracewatchError

if TYPE_CHECKING:  # the library loads when a tokenizer does, not at every start
    from tokenizers import Tokenizer

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
    if (cached := cached_model(spec)) is not None:
        return cached
    raise TokenizerNotFound(
        f"no tokenizer {spec!r}: not a file or folder, and not in the local Hugging Face cache ({hub_cache()}); "
        f"tracewatch never downloads one: fetch it yourself (huggingface-cli download {spec} {FILE}) or pass a path"
    )


def _shown(path: Path) -> str:
    """A path as short as it reads unambiguously: relative to here when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def cached_model(name: str) -> Path | None:
    """The `tokenizer.json` of model `name` (`org/name`) in the local hub cache."""
    model = hub_cache() / ("models--" + name.replace("/", "--"))
    for snapshot in _snapshots(model):
        if (snapshot / FILE).is_file():
            return snapshot / FILE
    return None


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
        """Where it was found, for a user to read."""
        self._special = {index for index, token in tokenizer.get_added_tokens_decoder().items() if token.special}
        self._size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._pieces: dict[int, Piece] = {}

    @classmethod
    def load(cls, spec: str, base_dir: Path | None = None) -> TokenText:
        """TokenizerNotFound when `spec` names no tokenizer; ValueError when the file is
        not one `tokenizers` can read."""
        from tokenizers import Tokenizer

        path = find_tokenizer(spec, base_dir)
        source = f"{spec} (local Hugging Face cache)" if path == cached_model(spec) else _shown(path)
        try:
            return cls(Tokenizer.from_file(str(path)), source)
        except Exception as error:  # noqa: BLE001 - the Rust side raises bare Exception
            raise ValueError(f"{path} is not a tokenizer tokenizers can read: {error}") from error

    def pieces(self, ids: Iterable[int]) -> list[Piece]:
        """Each id's piece, in order; an id outside the vocabulary reads as itself."""
        ids = list(ids)
        missing = sorted(set(ids).difference(self._pieces))
        known = [index for index in missing if 0 <= index < self._size]
        decode = self._tokenizer.decode  # one id at a time: decode_batch's thread pool costs more than it saves
        for index in known:
            self._pieces[index] = Piece(decode([index], skip_special_tokens=False), index in self._special)
        for index in missing:
            self._pieces.setdefault(index, Piece(f"⟨{index}?⟩", True))
        return list(map(self._pieces.__getitem__, ids))

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)


class Tokenizers:
    """Which tokenizer each variant's messages are read with: `override` (the command
    line's) for all, else the variant's own (its config's `tokenizer`), else one known
    for its model (`by_model`: the demo's), else its model's name when the local cache
    holds it. Each is loaded once, when first needed; one that cannot be loaded is
    remembered with why."""

    def __init__(
        self, override: str | None = None, by_variant: dict[str, str] | None = None, by_model: dict[str, str] | None = None
    ) -> None:
        self.override = override
        self.by_variant = dict(by_variant or {})
        self.by_model = dict(by_model or {})
        self._loaded: dict[str, TokenText | str] = {}

    def for_variant(self, variant: str, model: str | None = None) -> tuple[TokenText | None, str]:
        """The variant's token text, or None and what to do to get text."""
        spec = self.override or self.by_variant.get(variant) or self.by_model.get(model or "")
        if spec is None and model and cached_model(model) is not None:
            spec = model
        if spec is None:
            return None, HINT
        if spec not in self._loaded:
            try:
                self._loaded[spec] = TokenText.load(spec)
            except (TokenizerNotFound, ValueError, OSError) as error:
                self._loaded[spec] = f"{error} ({HINT})"
        found = self._loaded[spec]
        return (found, found.source) if isinstance(found, TokenText) else (None, found)
