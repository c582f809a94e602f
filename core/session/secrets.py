"""What looks like a credential in a variant's config, by name and by value.

A config is a file people commit, paste and share, and a server's argv is visible to
every user of the machine, so neither may hold a secret: the config names environment
variables instead. A check on names alone lets `AUTH = "Bearer sk-..."`, a
`DATABASE_URL` with a password or `--api-key=sk-...` in the argv through, so values are
checked too: known key shapes, bearer/basic credentials, private keys, URLs with a
password. Every offender is reported at once, by where it is and what it looks like,
and the value itself is never repeated: an error message ends up in terminals and logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH(?!ORS?(?:_|\b))|COOKIE|DATABASE_URL|DSN",
    re.IGNORECASE,
)
"""An environment variable or header name that says it holds a credential."""

_SECRET_FLAG = re.compile(
    r"--?(?:[A-Za-z0-9]+[-_])*(?:api[-_]?key|key|token|secret|password|passwd|credentials?)(?P<rest>=.*)?\Z",
    re.IGNORECASE,
)
"""An argv flag that takes a credential (`--api-key`, `--hf-token=...`); flags that
name where one is kept (`--api-key-var`, `--token-file`) do not match."""

_QUERY_CREDENTIAL = (
    r"(?:x[-_])?(?:(?:amz|goog)[-_])?"
    r"(?:(?:access|auth|api|app|client|id|refresh|session|security|private|secret|subscription|master)[-_.]?)?"
    r"(?:api[-_]?key|key|token|secret|password|passwd|pwd|sig|signature|auth|credentials?)"
)
"""A query parameter named for a credential (`api_key`, `access_token`, `X-Amz-Signature`),
as a whole name: `sort_key` or `page_token` merely mention one."""

_SHAPES = [
    ("an API key (sk-...)", r"\bsk-[A-Za-z0-9_\-]{8,}"),
    ("a Hugging Face token (hf_...)", r"\bhf_[A-Za-z0-9]{16,}"),
    ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("an AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("a Google API key", r"\bAIza[0-9A-Za-z_\-]{30,}"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("a JSON web token", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\."),
    ("a bearer or basic credential", r"\b(?:Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]{6,}"),
    ("a private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    ("a URL with a password (user:password@)", r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:[^/\s@]+@"),
    (
        "a URL with a credential in its query (?api_key=, ?token=, ?sig=, ...)",
        r"(?i)[A-Za-z][A-Za-z0-9+.\-]*://[^\s?#]*\?(?:[^#\s]*&)?" + _QUERY_CREDENTIAL + r"=[^&#\s]",
    ),
]
_SHAPE_PATTERNS = [(what, re.compile(pattern)) for what, pattern in _SHAPES]

_NOT_SCANNED = ("tasks",)
"""Task data is what the env is asked to do, not how the server is run: a prompt may
well mention a URL with a password, and it never reaches argv or the environment."""

Location = tuple[str | int, ...]


def value_shape(value: str) -> str | None:
    """What a credential-like value looks like ("an API key (sk-...)"), or None."""
    for what, pattern in _SHAPE_PATTERNS:
        if pattern.search(value):
            return what
    return None


def find_secrets(variant: dict[str, Any]) -> list[tuple[Location, str]]:
    """Every place a raw variant table holds a credential, as (location, message);
    messages name the place and the kind of credential, never the value."""
    found: list[tuple[Location, str]] = []
    env = variant.get("env")
    if isinstance(env, dict):
        for name in env:
            if isinstance(name, str) and SECRET_NAME.search(name):
                found.append((("env", name), _env_name_message(name)))
    headers = (variant.get("endpoint") or {}).get("headers") if isinstance(variant.get("endpoint"), dict) else None
    if isinstance(headers, dict):
        for name in headers:
            if isinstance(name, str) and SECRET_NAME.search(name):
                found.append((("endpoint", "headers", name), _header_message(name, "its name says it is a credential")))
    command = variant.get("command")
    if isinstance(command, list):
        found += _argv_secrets(command)
    flagged = {location for location, _ in found}
    for location, value in _strings(variant, ()):
        if location[:1] in [(key,) for key in _NOT_SCANNED] or location in flagged:
            continue
        what = value_shape(value)
        if what is None:
            continue
        if location[:2] == ("endpoint", "headers"):
            found.append((location, _header_message(str(location[2]), f"its value looks like {what}")))
        elif location[:1] == ("env",):
            found.append((location, _env_value_message(str(location[1]), what)))
        else:
            found.append((location, f"holds what looks like {what}, and a config must not hold one; {_WAY_OUT}"))
    return found


_WAY_OUT = (
    "keep it in an environment variable and name that instead (endpoint.api_key_var, "
    "endpoint.headers_from_env, env_from)"
)


def _env_name_message(name: str) -> str:
    return (
        f"{name} looks like a secret, and a config must not hold one: export it in "
        f'your shell and pass it through with env_from = ["{name}"] (for the model '
        "endpoint's key, name the variable in endpoint.api_key_var)"
    )


def _env_value_message(name: str, what: str) -> str:
    return (
        f"the value of {name} looks like {what}, and a config must not hold one: export it "
        f'in your shell and pass it through with env_from = ["{name}"]'
    )


def _header_message(name: str, why: str) -> str:
    return (
        f"header {name!r} looks like a credential ({why}), and a config must not hold one; "
        f'export it and name the variable instead: headers_from_env = {{ "{name}" = "MY_VAR" }}'
    )


_SHORT_SECRET_FLAG = re.compile(r"-p(?!\d+\Z).|-u[^\s:]*:.", re.DOTALL)
"""Short options that carry a credential attached: `-pPASSWORD` (mysql, sshpass; a
number is a port) and `-uUSER:PASSWORD` (curl)."""


def _argv_secrets(command: list[Any]) -> list[tuple[Location, str]]:
    """Flags that take a credential, with its value inline (`--api-key=...`,
    `-pPASSWORD`) or next."""
    found: list[tuple[Location, str]] = []
    for index, arg in enumerate(command):
        if isinstance(arg, str) and _SHORT_SECRET_FLAG.match(arg):
            found.append((("command", index), _argv_message(arg[:2])))
            continue
        if not isinstance(arg, str) or (match := _SECRET_FLAG.match(arg)) is None:
            continue
        flag = arg.split("=", 1)[0]
        if match.group("rest") is not None:
            if match.group("rest") != "=":
                found.append((("command", index), _argv_message(flag)))
        elif index + 1 < len(command) and isinstance(command[index + 1], str):
            found.append((("command", index + 1), _argv_message(flag)))
    return found


def _argv_message(flag: str) -> str:
    return (
        f"the value of {flag} is a credential on the server's argv, which every user of the "
        "machine can read; pass it in the server's environment instead (env_from, or the "
        "variable endpoint.api_key_var names) and let the server read it from there"
    )


def _strings(value: Any, location: Location) -> Iterator[tuple[Location, str]]:
    if isinstance(value, str):
        yield location, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*location, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*location, index))
