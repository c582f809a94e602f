"""Config errors a user can fix in one edit: pydantic's validation errors translated
into file, field path and what was expected, with a did-you-mean for a misspelt key."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from tracewatch.core.errors import TracewatchError
from tracewatch.core.text import short_repr


class Problem(NamedTuple):
    source: str
    """The config file, or where a config came from when there is none."""
    path: str
    """The field path, e.g. `variants[1].max_concurrent`; empty for the whole file."""
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.path}: {self.message}" if self.path else f"{self.source}: {self.message}"


class ConfigError(TracewatchError, ValueError):
    """Every problem found in one config; its str lists them one per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
    "string_too_short": "a non-empty string",
}


def problems_of(
    error: ValidationError, source: str, model: type[BaseModel], where: Callable[[tuple[Any, ...]], tuple[Any, ...]]
) -> list[Problem]:
    return [
        Problem(source, field_path(where(tuple(detail["loc"]))), _describe(detail, model))
        for detail in error.errors(include_url=False)
    ]


def _describe(detail: ErrorDetails, model: type[BaseModel]) -> str:
    kind, loc, ctx = detail["type"], tuple(detail["loc"]), detail.get("ctx") or {}
    parent = _model_at(model, loc[:-1])
    field = parent.model_fields.get(loc[-1]) if parent is not None and loc and isinstance(loc[-1], str) else None
    wanted = field.description if field is not None else None
    if kind == "missing":
        return f"missing; expected {wanted or 'a value'}"
    if kind == "extra_forbidden":
        names = list(parent.model_fields) if parent is not None else []
        return f"unknown key {loc[-1]!r}; {suggest(str(loc[-1]), names, '%r')}"
    if kind == "value_error":
        return str(ctx.get("error", detail["msg"]))
    got = f", got {short_repr(detail['input'])}"
    if kind in ("greater_than_equal", "greater_than"):
        bound = f"at least {ctx['ge']:g}" if "ge" in ctx else f"more than {ctx['gt']:g}"
        return f"expected {bound}{got}"
    if kind == "too_short":
        least = f"at least {ctx.get('min_length')} item(s)"
        return f"expected {wanted or least}{got}"
    if kind == "list_type" and loc == ("variants",):
        return f"expected an array of tables, written [[variants]]{got}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}{got}"
    return f"{detail['msg']}{got}"


def _model_at(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model a location inside `model` points into, if any (for its field names)."""
    for part in loc:
        field = model.model_fields.get(part) if model is not None and isinstance(part, str) else None
        if field is None:
            return None
        annotation = field.annotation
        model = next(
            (t for t in (annotation, *get_args(annotation)) if isinstance(t, type) and issubclass(t, BaseModel)),
            None,
        )
    return model


def field_path(loc: tuple[int | str, ...]) -> str:
    """`("variants", 1, "endpoint", "base_url")` -> `variants[1].endpoint.base_url`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
            out += f".{key}" if out else key
    return out


def suggest(word: str, names: list[str] | tuple[str, ...], form: str) -> str:
    close = difflib.get_close_matches(word, names, n=1)
    if close:
        return f"did you mean {form % close[0]}?"
    return "expected one of: " + ", ".join(form % name for name in names)



