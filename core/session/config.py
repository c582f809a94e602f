"""Variant configs: which env servers to start or attach to, and what to send them.

A TOML file is validated into a `Config` in one pass that reports every problem at
once, each naming the file, the field path and what was expected (with a did-you-mean
for a misspelt key), so a config is fixed in one edit rather than one launch per
mistake. Credentials never live in a config: it names environment variables instead.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tracewatch.core.paths import DEFAULT_KEEP_SESSIONS, open_regular
from tracewatch.core.ports import LOOPBACK
from tracewatch.core.session.config_errors import ConfigError, Problem, field_path, problems_of, suggest
from tracewatch.core.session.secrets import find_secrets
from tracewatch.core.text import UNSAFE, short_repr
from tracewatch.core.wire.protocol import ClientConfig, SamplingConfig

PLACEHOLDERS = ("address", "port", "python")
"""What a server argv may mention: `{port}` is a free port the app picked,
`{address}` is `tcp://127.0.0.1:{port}`, and `{python}` is the interpreter running
tracewatch (so a config needs no path to the venv that has `tracewatch.core.demo`)."""

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TCP = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):([0-9]{1,5})\Z")
_SAMPLING_KEYS = (*SamplingConfig.model_fields, "max_completion_tokens", "extra_body")
_MAX_BAD_LINES = 5
MAX_TASKS_BYTES = 256 << 20
"""A tasks file larger than this is refused with a clear error rather than read until
memory runs out (`/dev/zero` never ends)."""
MAX_CONFIG_BYTES = 16 << 20


def _short_name(value: str) -> str:
    """A variant's name names its run folders and files and is printed on terminals,
    so it may not leave the session folder or disguise itself."""
    if not value.strip():
        raise ValueError("expected a non-empty name")
    if len(value) > 64:
        raise ValueError(f"expected a name of at most 64 characters, got {short_repr(value)}")
    why = (
        "a path separator" if "/" in value or "\\" in value
        else "'..'" if ".." in value
        else "a leading dot" if value.startswith(".")
        else "a control, direction or invisible character" if UNSAFE.search(value) or not value.isprintable()
        else None
    )  # fmt: skip
    if why is not None:
        raise ValueError(
            f"expected a name without path separators, '..', a leading dot or control, direction or "
            f"invisible characters (it names folders and is printed), got {short_repr(value)}, which has {why}"
        )
    return value


class TaskSource(BaseModel):
    """A loaded task list and where it came from. Variants naming the same file share
    one instance, so the file is read once."""

    model_config = ConfigDict(frozen=True)

    path: str | None
    """The resolved JSONL file, or None for tasks written inline."""
    items: list[dict[str, Any]] = Field(repr=False)


class EndpointConfig(BaseModel):
    """The model endpoint the env server calls. Keys travel as environment variable
    names, so neither the config file nor the wire ever holds one."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    base_url: str = Field(
        ClientConfig.model_fields["base_url"].default,
        description="the endpoint's base URL, e.g. http://127.0.0.1:8000/v1",
    )
    api_key_var: str = Field(
        ClientConfig.model_fields["api_key_var"].default,
        description="the NAME of the environment variable holding the key",
    )
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(
        default_factory=dict,
        description="header name -> the NAME of the environment variable holding its value",
    )

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1, got {value!r}")
        return value

    @field_validator("api_key_var")
    @classmethod
    def _api_key_var(cls, value: str) -> str:
        if not _ENV_NAME.match(value):  # never repeated: what is here instead may be the key
            raise ValueError(
                "expected the NAME of an environment variable that holds the key "
                "(e.g. OPENAI_API_KEY), never the key itself"
            )
        return value

    @field_validator("headers_from_env")
    @classmethod
    def _headers_from_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, var in value.items():
            if not _ENV_NAME.match(var):
                raise ValueError(
                    f"header {name!r}: expected the NAME of an environment variable, got {short_repr(var)}"
                )
        return value


class _VariantFields(BaseModel):
    """What every kind of variant table has: its name, and the child it may run (its
    working directory, environment and how long it may take to stop or stall)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(description="a short unique name, e.g. \"baseline\"")
    cwd: str | None = Field(None, description="the child's working directory")
    env: dict[str, str] = Field(default_factory=dict)
    env_from: list[str] = Field(default_factory=list)
    grace_seconds: float = Field(10.0, gt=0)
    deadline_seconds: float = Field(86400.0, gt=0)
    stall_seconds: float = Field(60.0, gt=0)
    tokenizer: str | None = Field(
        None, description="the token view's text: a tokenizer.json, a folder holding one, or a model name in the local Hugging Face cache"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _short_name(value)

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        path = (Path((info.context or {}).get("base_dir", ".")) / Path(value).expanduser()).resolve()
        if not path.is_dir():
            raise ValueError(f"expected an existing directory (relative to the config file), but {path} is not one")
        return str(path)

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A path is taken relative to the config file; anything else is a model name,
        looked up in the local cache when a token view first needs it."""
        if value is None:
            return value
        path = Path((info.context or {}).get("base_dir", ".")) / Path(value).expanduser()
        return str(path.resolve()) if path.exists() else value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        _env_names(value)
        return value

    @field_validator("env_from")
    @classmethod
    def _env_from(cls, value: list[str]) -> list[str]:
        _env_names(value)
        return value

    def working_dir(self) -> Path | None:
        return Path(self.cwd) if self.cwd is not None else None


def _env_names(names: Iterable[str]) -> None:
    for name in names:
        if not _ENV_NAME.match(name):
            raise ValueError(f"expected environment variable names, got {short_repr(name)}")


class VariantConfig(_VariantFields):
    """One variant: an env server (a command the app starts under its supervisor, or
    the address of one that already runs), the tasks it gets and how they are sent."""

    command: list[str] | None = Field(
        None, description="the server's argv, mentioning {address} or {port}"
    )
    attach: str | None = Field(None, description="tcp://host:port of a server that already runs")
    tasks: TaskSource = Field(
        description="a JSONL file of task_data (relative to the config file) or an inline list of tables"
    )
    rollouts_per_task: int = Field(1, ge=1)
    max_concurrent: int = Field(4, ge=1)
    model: str = Field(
        min_length=1,
        description="the model name the server asks the endpoint for (here or in [defaults])",
    )
    endpoint: EndpointConfig = Field(default_factory=EndpointConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    health_timeout: float = Field(60.0, gt=0)

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> Any:
        if value is None:
            return value
        _argv(value, "command", "the server's argv")
        mentioned = {match for arg in value for match in _PLACEHOLDER.findall(arg)}
        if unknown := sorted(mentioned - set(PLACEHOLDERS)):
            raise ValueError(f"unknown placeholder {{{unknown[0]}}}; {suggest(unknown[0], PLACEHOLDERS, '{%s}')}")
        if not mentioned & {"address", "port"}:
            raise ValueError(
                "expected {address} or {port} in the argv, so the app can tell the server where "
                'to listen (e.g. "--address", "{address}"); for a server that already runs, '
                "set attach instead"
            )
        return value

    @field_validator("attach", mode="before")
    @classmethod
    def _attach(cls, value: Any) -> Any:
        if value is None:
            return value
        match = _TCP.match(value) if isinstance(value, str) else None
        if match is None or not 1 <= int(match.group(2)) <= 65535:
            raise ValueError(
                f"expected tcp://host:port of a running env server (e.g. tcp://10.0.0.5:5000), got {short_repr(value)}"
            )
        return value

    @field_validator("tasks", mode="before")
    @classmethod
    def _tasks(cls, value: Any, info: ValidationInfo) -> Any:
        context = info.context or {}
        if isinstance(value, str):
            path = (Path(context.get("base_dir", ".")) / Path(value).expanduser()).resolve()
            cache: dict[Path, TaskSource | str] = context.get("tasks", {})
            if path not in cache:
                try:
                    cache[path] = TaskSource(path=str(path), items=_read_tasks(path))
                except ValueError as error:
                    cache[path] = str(error)
            if isinstance(cache[path], str):
                raise ValueError(cache[path])
            return cache[path]
        if isinstance(value, list):
            bad = [i for i, item in enumerate(value) if not isinstance(item, dict)]
            if bad:
                raise ValueError(f"expected every item to be a table (one task's task_data); item {bad[0]} is not")
            if not value:
                raise ValueError("expected at least one task, got an empty list")
            return TaskSource(path=None, items=value)
        raise ValueError(
            f"expected a JSONL file path (relative to the config file) or an inline list of tables, got {short_repr(value)}"
        )

    @field_validator("sampling", mode="before")
    @classmethod
    def _sampling(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key in value:
                close = difflib.get_close_matches(key, _SAMPLING_KEYS, n=1, cutoff=0.85)
                if key not in _SAMPLING_KEYS and close:
                    raise ValueError(
                        f"unknown sampling key {key!r}; did you mean {close[0]!r}? (other keys "
                        "pass through to the provider as written, so a typo would be sent too)"
                    )
        return value

    @model_validator(mode="after")
    def _one_server(self) -> VariantConfig:
        if (self.command is None) == (self.attach is None):
            got = "both" if self.command is not None else "neither"
            raise ValueError(
                "expected exactly one of command (a server the app starts, e.g. "
                '["python", "-m", "tracewatch.core.demo", "--address", "{address}"]) or attach '
                f"(tcp://host:port of a server that already runs); got {got}"
            )
        return self

    def server_argv(self, port: int) -> list[str]:
        """The command with its placeholders filled for a server listening on `port`."""
        if self.command is None:
            raise ValueError(f"variant {self.name!r} attaches to {self.attach}; it has no server to start")
        values = {"address": f"tcp://{LOOPBACK}:{port}", "port": str(port), "python": sys.executable}
        return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in self.command]

    def client_config(self) -> ClientConfig:
        """The endpoint as the wire carries it in every run request."""
        return ClientConfig(
            base_url=self.endpoint.base_url,
            api_key_var=self.endpoint.api_key_var,
            headers=dict(self.endpoint.headers),
            headers_from_env=dict(self.endpoint.headers_from_env),
        )

    def task_list(self) -> list[dict[str, Any]]:
        """The loaded tasks, shared with every variant naming the same file: do not mutate."""
        return self.tasks.items

    def environment(self) -> dict[str, str]:
        """What the server's environment adds to ours: `env`, plus the current values of
        `env_from` and of the variables the endpoint names (those that are set), so a
        server started with a clean environment can still reach its model."""
        names = [*self.env_from, self.endpoint.api_key_var, *self.endpoint.headers_from_env.values()]
        return {**{name: os.environ[name] for name in names if name in os.environ}, **self.env}


def _argv(value: Any, field: str, what: str) -> list[str]:
    """A command line: a non-empty list of strings. One string is refused with the
    list it most likely meant, split as a shell would."""
    if isinstance(value, str):
        raise ValueError(f"expected a list of arguments, not one string: {field} = {json.dumps(shlex.split(value))}")
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value) or not value[0]:
        raise ValueError(f"expected a non-empty list of strings ({what}), got {short_repr(value)}")
    return value


def _tcp(value: Any, what: str, port_zero: bool = False) -> Any:
    match = _TCP.match(value) if isinstance(value, str) else None
    low = 0 if port_zero else 1
    if match is None or not low <= int(match.group(2)) <= 65535:
        raise ValueError(f"expected tcp://host:port {what} (e.g. tcp://127.0.0.1:5000), got {short_repr(value)}")
    return value


class ProxySpec(BaseModel):
    """Where drivers connect (`listen`) and the env server their frames go on to."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    listen: str = Field(description="tcp://host:port the drivers connect to instead of the server")
    upstream: str = Field(description="tcp://host:port of the env server")

    @field_validator("listen", mode="before")
    @classmethod
    def _listen(cls, value: Any) -> Any:
        return _tcp(value, "to listen on", port_zero=True)

    @field_validator("upstream", mode="before")
    @classmethod
    def _upstream(cls, value: Any) -> Any:
        return _tcp(value, "of the env server the drivers use")


class TapVariantConfig(_VariantFields):
    """A variant whose rollouts another program drives: a wire proxy between drivers
    and their env server, or an eval command (vf-eval) run under our supervisor with
    a tap injected. Tasks, model and sampling come from the driver."""

    proxy: ProxySpec | None = None
    eval: list[str] | None = Field(None, description='a vf-eval command line, e.g. ["vf-eval", "@", "eval.toml"]')
    relay: str | None = Field(None, description="tcp://host:port of a driver's tracewatch_relay.Relay")
    on_viewer_exit: Literal["stop", "finish"] = Field(
        "stop",
        description='an eval\'s fate if tracewatch dies: "stop" it (the default), or let it "finish" and write its results',
    )

    @field_validator("eval", mode="before")
    @classmethod
    def _eval(cls, value: Any) -> Any:
        return value if value is None else _argv(value, "eval", 'a vf-eval command line, e.g. ["vf-eval", "@", "eval.toml"]')

    @field_validator("relay", mode="before")
    @classmethod
    def _relay(cls, value: Any) -> Any:
        return value if value is None else _tcp(value, "of a driver's relay")

    @model_validator(mode="after")
    def _one_tap(self) -> TapVariantConfig:
        if sum(x is not None for x in (self.proxy, self.eval, self.relay)) != 1:
            raise ValueError(
                "expected exactly one of proxy (a table: listen, upstream), eval (a command line) or relay (tcp://host:port)"
            )
        if self.on_viewer_exit != "stop" and self.eval is None:
            raise ValueError("on_viewer_exit is an eval's choice; a proxy or relay viewer has no eval to finish")
        return self

    def environment(self) -> dict[str, str]:
        """`env`, plus the current values of `env_from` that are set."""
        return {**{name: os.environ[name] for name in self.env_from if name in os.environ}, **self.env}


AnyVariantConfig = VariantConfig | TapVariantConfig
TAP_KEYS = frozenset({"proxy", "eval", "relay"})
"""A variant table with one of these keys is a tap, validated as `TapVariantConfig`."""


class Config(BaseModel):
    model_config = ConfigDict(frozen=True)

    source: str
    """The config file, or "command line" / "built-in demo"."""
    variants: list[AnyVariantConfig]
    keep_sessions: int = Field(DEFAULT_KEEP_SESSIONS, ge=1)
    """How many session folders to keep; older ones that are not running are deleted."""

    @classmethod
    def from_attach(
        cls,
        address: str,
        tasks_path: str | os.PathLike[str],
        rollouts: int = 1,
        concurrency: int = 4,
        model: str | None = None,
        base_url: str | None = None,
        api_key_var: str | None = None,
        name: str = "attached",
        health_timeout: float | None = None,
    ) -> Config:
        """One variant attached to a running server, as the command line describes it;
        validated like a file, so a bad flag gets the same precise message."""
        variant: dict[str, Any] = {
            "name": name,
            "attach": address,
            "tasks": os.fspath(tasks_path),
            "rollouts_per_task": rollouts,
            "max_concurrent": concurrency,
        }
        if model is not None:
            variant["model"] = model
        if health_timeout is not None:
            variant["health_timeout"] = health_timeout
        endpoint = {"base_url": base_url, "api_key_var": api_key_var}
        if endpoint := {key: value for key, value in endpoint.items() if value is not None}:
            variant["endpoint"] = endpoint
        return _from_command_line(variant, "attach", _ATTACH_ARGUMENTS)

    @classmethod
    def for_eval(cls, argv: list[str], name: str | None = None) -> Config:
        """One eval variant, as `tracewatch eval -- vf-eval ...` describes it."""
        variant = {"name": name or "eval", "eval": list(argv)}
        return _from_command_line(variant, "eval", {"name": "--name"})

    @classmethod
    def for_relay(cls, address: str, name: str | None = None) -> Config:
        """One relay viewer, as `tracewatch tap ADDRESS` describes it."""
        return _from_command_line({"name": name or "relay", "relay": address}, "tap", {"relay": "ADDRESS", "name": "--name"})

    @classmethod
    def for_proxy(cls, listen: str, upstream: str, name: str | None = None) -> Config:
        """One proxy variant, as `tracewatch proxy` describes it."""
        variant = {"name": name or "proxy", "proxy": {"listen": listen, "upstream": upstream}}
        return _from_command_line(variant, "proxy", {"proxy.listen": "--listen", "proxy.upstream": "--upstream", "name": "--name"})


_ATTACH_ARGUMENTS = {
    "attach": "ADDRESS",
    "tasks": "--tasks",
    "rollouts_per_task": "--rollouts",
    "max_concurrent": "--concurrency",
    "model": "--model",
    "health_timeout": "--health-timeout",
    "endpoint.base_url": "--base-url",
    "endpoint.api_key_var": "--api-key-var",
    "name": "--name",
}
"""A variant's fields as `tracewatch attach` spells them."""


def _from_command_line(variant: dict[str, Any], command: str, arguments: dict[str, str]) -> Config:
    """One variant from a command's arguments, its problems said in the command's words
    (`argument --rollouts`), not as the field path of a config file the user never wrote."""
    try:
        return build_config({"variants": [variant]}, "command line", Path.cwd())
    except ConfigError as error:
        raise ConfigError([_in_command_words(problem, command, arguments) for problem in error.problems]) from None


def _in_command_words(problem: Problem, command: str, arguments: dict[str, str]) -> Problem:
    field = problem.path.removeprefix("variants[0].")
    argument = arguments.get(field)
    return Problem(command, f"argument {argument}" if argument else problem.path, problem.message)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    defaults: dict[str, Any] = Field(default_factory=dict)
    variants: list[dict[str, Any]] = Field(min_length=1, description="one or more [[variants]] tables")
    keep_sessions: int = Field(DEFAULT_KEEP_SESSIONS, ge=1, description="how many session folders to keep")


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a TOML config; raises `ConfigError` listing every problem."""
    path = Path(path)
    source = str(path)
    try:
        with open_regular(path, "a TOML config") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise OSError(f"larger than {MAX_CONFIG_BYTES >> 20} MiB; expected a TOML config")
        raw = tomllib.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError([Problem(source, "", "no such file; expected a TOML config")]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([Problem(source, "", f"cannot be read: {error}")]) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError([Problem(source, "", f"invalid TOML: {error}")]) from None
    return build_config(raw, source, path.resolve().parent)


def _read_tasks(path: Path) -> list[dict[str, Any]]:
    """One task_data object per line, read as a stream up to `MAX_TASKS_BYTES`; every
    bad line (up to a few) is named by file:line."""
    try:
        handle = open_regular(path, "a JSONL file of tasks")
    except FileNotFoundError:
        raise ValueError(f"expected a JSONL file of tasks, but {path} does not exist") from None
    except OSError as error:
        raise ValueError(f"expected a readable JSONL file of tasks, but {error.strerror or error}") from None
    items, bad = [], []
    size = number = 0
    with handle:
        while raw := handle.readline(MAX_TASKS_BYTES + 1 - size):
            number += 1
            size += len(raw)
            if size > MAX_TASKS_BYTES:
                raise ValueError(
                    f"{path} is larger than {MAX_TASKS_BYTES / (1 << 20):g} MiB; expected a tasks file below "
                    "that (split the tasks over variants or runs)"
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                bad.append(f"{path}:{number}: not UTF-8 text ({error.reason} at byte {error.start})")
                continue
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as error:
                bad.append(f"{path}:{number}: invalid JSON ({error.msg} at column {error.colno}); expected one JSON object per line")
                continue
            if not isinstance(item, dict):
                bad.append(f"{path}:{number}: expected a JSON object (one task's task_data), got {_json_kind(item)}")
                continue
            items.append(item)
    if bad:
        more = [f"... and {len(bad) - _MAX_BAD_LINES} more bad lines"] if len(bad) > _MAX_BAD_LINES else []
        raise ValueError("\n    ".join(["bad lines in the tasks file:", *bad[:_MAX_BAD_LINES], *more]))
    if not items:
        raise ValueError(f"expected at least one task in {path}, found none")
    return items


def build_config(raw: dict[str, Any], source: str, base_dir: Path) -> Config:
    """Validate parsed config data, every variant on its own so that one bad variant
    does not hide the problems of another."""
    try:
        top = _File.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(problems_of(error, source, _File, lambda loc: loc)) from None
    problems: list[Problem] = []
    if "name" in top.defaults:
        message = "a name belongs to one variant; expected it in each [[variants]] table, not in [defaults]"
        problems.append(Problem(source, "defaults.name", message))
    context = {"base_dir": base_dir, "tasks": {}}
    variants: list[AnyVariantConfig] = []
    seen: dict[str, int] = {}
    for index, own in enumerate(top.variants):
        merged, inherited = _merge(top.defaults, own)

        def where(
            loc: tuple[Any, ...], index: int = index, inherited: set[tuple[str, ...]] = inherited
        ) -> tuple[Any, ...]:
            from_defaults = loc[:1] in inherited or loc[:2] in inherited
            return ("defaults", *loc) if from_defaults else ("variants", index, *loc)

        secrets = [Problem(source, field_path(where(loc)), message) for loc, message in find_secrets(merged)]
        kind: type[VariantConfig] | type[TapVariantConfig] = TapVariantConfig if TAP_KEYS & own.keys() else VariantConfig
        if kind is TapVariantConfig:
            # a tap takes from [defaults] only what it has: tasks and models are the driver's
            merged = {k: v for k, v in merged.items() if k in own or k in TapVariantConfig.model_fields}
        try:
            variants.append(kind.model_validate(merged, context=context))
        except ValidationError as error:
            found = problems_of(error, source, kind, where)
            # a problem at, inside or around a credential could repeat it: the credential's own says enough
            found = [p for p in found if not any(_overlaps(p.path, s.path) for s in secrets)]
            problems += [p for p in found if p not in problems]
        problems += [p for p in secrets if p not in problems]
        name = own.get("name")
        if isinstance(name, str) and name.strip():
            if name in seen:
                message = f"expected a unique name; {name!r} is also the name of variants[{seen[name]}]"
                problems.append(Problem(source, f"variants[{index}].name", message))
            seen.setdefault(name, index)
    if problems:
        raise ConfigError(problems)
    return Config(source=source, variants=variants, keep_sessions=top.keep_sessions)


def _overlaps(path: str, other: str) -> bool:
    """Whether one field path is the other, or inside it."""
    inner, outer = (path, other) if len(path) >= len(other) else (other, path)
    return inner == outer or inner.startswith((f"{outer}.", f"{outer}["))


def _merge(defaults: dict[str, Any], own: dict[str, Any]) -> tuple[dict[str, Any], set[tuple[str, ...]]]:
    """A variant's table over `[defaults]`: the variant's own keys win; tables (endpoint,
    sampling, env) merge key by key. `command` and `attach` are one choice, so a variant
    that makes it takes neither from the defaults. Also returns which locations came
    from the defaults, so an error there is reported where the user can fix it."""
    merged = dict(own)
    inherited: set[tuple[str, ...]] = set()
    chose_server = "command" in own or "attach" in own
    for key, value in defaults.items():
        if key == "name" or (chose_server and key in ("command", "attach")):
            continue
        if key not in own:
            merged[key] = value
            inherited.add((key,))
        elif isinstance(value, dict) and isinstance(own[key], dict):
            merged[key] = {**value, **own[key]}
            inherited.update((key, sub) for sub in value if sub not in own[key])
    return merged, inherited


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
