"""Config loading: what a valid file yields, and for every mistake a message naming the
file, the field path and what was expected."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.repo import REPO
from tracewatch.core.demo.builtin_config import demo_config
from tracewatch.core.session import config as config_module
from tracewatch.core.session.config import Config, load_config
from tracewatch.core.session.config_errors import ConfigError
from tracewatch.core.wire.protocol import ClientConfig

EXAMPLES = REPO / "examples"

SERVER = 'command = ["python", "-m", "tracewatch.core.demo", "--address", "{address}"]'


def write(tmp_path: Path, text: str, tasks: str | None = '{"prompt": "a"}\n{"prompt": "b"}\n') -> Path:
    if tasks is not None:
        (tmp_path / "tasks.jsonl").write_text(tasks)
    path = tmp_path / "tracewatch.toml"
    path.write_text(text)
    return path


def variant(body: str = "", *, server: str = SERVER, name: str = "a") -> str:
    return f'[[variants]]\nname = "{name}"\n{server}\ntasks = "tasks.jsonl"\nmodel = "m"\n{body}\n'


def problems(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return str(caught.value)


def test_two_variants_example_loads():
    config = load_config(EXAMPLES / "two-variants.toml")
    baseline, candidate = config.variants
    assert (baseline.name, candidate.name) == ("baseline", "candidate")
    assert (baseline.max_concurrent, candidate.max_concurrent) == (4, 6)  # a variant overrides [defaults]
    assert baseline.rollouts_per_task == candidate.rollouts_per_task == 2
    assert candidate.sampling.top_p == 0.95 and baseline.sampling.temperature == 0.2
    assert baseline.task_list() is candidate.task_list()  # one shared file, read once
    assert [task["id"] for task in baseline.task_list()][:2] == ["ex-coding", "ex-math"]
    assert baseline.server_argv(5001) == [
        sys.executable, "-m", "tracewatch.core.demo", "--address", "tcp://127.0.0.1:5001", "--seed", "1",
    ]


def test_verifiers_example_runs_the_launcher_in_the_config_directory(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    (tmp_path / "examples" / "verifiers" / "tasks.jsonl").write_text('{"id": "t0", "prompt": "hi"}\n')
    config = load_config(tmp_path / "examples" / "verifiers-env.toml")
    first = config.variants[0]
    assert [v.model for v in config.variants] == ["Qwen/Qwen3-4B", "Qwen/Qwen3-8B"]
    assert first.working_dir() == tmp_path / "examples"
    assert first.server_argv(7000) == [
        sys.executable, "-m", "tracewatch_guest.serve_verifiers", "--env-config", "verifiers/env.toml",
        "--address", "tcp://127.0.0.1:7000",
    ]
    assert first.client_config() == ClientConfig(base_url="http://127.0.0.1:8000/v1", api_key_var="OPENAI_API_KEY")
    assert first.sampling.max_tokens == 4096


def test_placeholders_substitute_inside_arguments(tmp_path):
    server = 'command = ["srv", "--bind=tcp://0.0.0.0:{port}", "--peer", "{address}", "{python}", "{\\"json\\": 1}"]'
    config = load_config(write(tmp_path, variant(server=server)))
    assert config.variants[0].server_argv(6123) == [
        "srv", "--bind=tcp://0.0.0.0:6123", "--peer", "tcp://127.0.0.1:6123", sys.executable, '{"json": 1}',
    ]


def test_defaults_apply_unless_a_variant_sets_its_own_and_tables_merge(tmp_path):
    text = (
        '[defaults]\nmodel = "base-model"\nmax_concurrent = 2\nenv = { LOG_LEVEL = "info" }\n'
        '[defaults.sampling]\ntemperature = 0.5\nmax_tokens = 100\n'
        '[defaults.endpoint]\nbase_url = "http://gpu:8000/v1"\n'
        f'[[variants]]\nname = "a"\n{SERVER}\ntasks = "tasks.jsonl"\n'
        '[[variants]]\nname = "b"\nattach = "tcp://10.0.0.5:5000"\ntasks = "tasks.jsonl"\nmodel = "other"\n'
        'max_concurrent = 9\nenv = { EXTRA = "1" }\nsampling = { temperature = 1.0 }\n'
    )
    a, b = load_config(write(tmp_path, text)).variants
    assert (a.model, a.max_concurrent, b.model, b.max_concurrent) == ("base-model", 2, "other", 9)
    assert (b.sampling.temperature, b.sampling.max_tokens) == (1.0, 100)
    assert b.env == {"LOG_LEVEL": "info", "EXTRA": "1"}
    assert a.endpoint.base_url == b.endpoint.base_url == "http://gpu:8000/v1"


def test_a_variant_choosing_attach_takes_no_default_command(tmp_path):
    text = (
        f'[defaults]\n{SERVER}\nmodel = "m"\ntasks = "tasks.jsonl"\n'
        '[[variants]]\nname = "local"\n'
        '[[variants]]\nname = "remote"\nattach = "tcp://node-3.cluster:5555"\n'
    )
    local, remote = load_config(write(tmp_path, text)).variants
    assert local.command is not None and local.attach is None
    assert remote.command is None and remote.attach == "tcp://node-3.cluster:5555"
    with pytest.raises(ValueError, match="no server to start"):
        remote.server_argv(5000)


def test_inline_tasks_and_sampling_pass_through(tmp_path):
    text = (
        f'[[variants]]\nname = "a"\n{SERVER}\nmodel = "m"\n'
        'sampling = { temperature = 0.1, top_k = 20, repetition_penalty = 1.1 }\n'
        '[[variants.tasks]]\nprompt = "one"\n[[variants.tasks]]\nprompt = "two"\nanswer = 2\n'
    )
    (config_variant,) = load_config(write(tmp_path, text, tasks=None)).variants
    assert config_variant.task_list() == [{"prompt": "one"}, {"prompt": "two", "answer": 2}]
    assert config_variant.sampling.model_dump(exclude_none=True) == {
        "temperature": 0.1, "top_k": 20, "repetition_penalty": 1.1,
    }


def test_variants_sharing_a_file_share_one_loaded_list(tmp_path):
    text = variant(name="a") + variant(name="b") + variant(name="c", body='tasks = "other.jsonl"').replace(
        'tasks = "tasks.jsonl"\n', "", 1
    )
    (tmp_path / "other.jsonl").write_text('{"prompt": "x"}\n')
    a, b, c = load_config(write(tmp_path, text)).variants
    assert a.task_list() is b.task_list()
    assert c.task_list() == [{"prompt": "x"}] and c.tasks.path == str(tmp_path / "other.jsonl")


def test_environment_passes_named_variables_through_and_never_stores_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    monkeypatch.setenv("MY_KEY", "sk-secret")
    monkeypatch.delenv("UNSET_ONE", raising=False)
    text = variant('env = { MODE = "fast" }\nenv_from = ["HF_TOKEN", "UNSET_ONE"]\n[variants.endpoint]\napi_key_var = "MY_KEY"\n')
    (config_variant,) = load_config(write(tmp_path, text)).variants
    assert config_variant.environment() == {"HF_TOKEN": "hf-secret", "MY_KEY": "sk-secret", "MODE": "fast"}
    assert "secret" not in config_variant.model_dump_json()
    assert config_variant.client_config().api_key_var == "MY_KEY"


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        (variant("max_concurrent = 0"), "variants[0].max_concurrent", "expected at least 1, got 0"),
        (variant("rollouts_per_task = 0"), "variants[0].rollouts_per_task", "expected at least 1, got 0"),
        (variant('rollouts_per_task = "3"'), "variants[0].rollouts_per_task", "expected an integer, got '3'"),
        (variant("max_concurrent = 2.5"), "variants[0].max_concurrent", "expected an integer, got 2.5"),
        (variant("health_timeout = 0"), "variants[0].health_timeout", "expected more than 0, got 0"),
        (variant("max_concurent = 3"), "variants[0].max_concurent", "did you mean 'max_concurrent'?"),
        (variant('[variants.endpoint]\nbasse_url = "http://x/v1"'), "variants[0].endpoint.basse_url",
         "did you mean 'base_url'?"),
        (variant('[variants.endpoint]\nbase_url = "localhost:8000"'), "variants[0].endpoint.base_url",
         "expected an http:// or https:// URL"),
        (variant("[variants.sampling]\ntemprature = 0.3"), "variants[0].sampling",
         "unknown sampling key 'temprature'; did you mean 'temperature'?"),
        ("[defaults]\nmax_concurent = 3\n" + variant(), "defaults.max_concurent", "did you mean 'max_concurrent'?"),
        ('[defaults]\nname = "x"\n' + variant(), "defaults.name", "expected it in each [[variants]] table"),
        ("varaints = []\n" + variant(), "varaints", "did you mean 'variants'?"),
        ('[defaults]\nmodel = "m"\n', "variants", "missing; expected one or more [[variants]] tables"),
        ('[variants]\nname = "a"\n', "variants", "expected an array of tables, written [[variants]]"),
        (variant().replace('model = "m"\n', ""), "variants[0].model", "missing; expected the model name"),
        (variant('attach = "tcp://10.0.0.5:5000"'), "variants[0]", "expected exactly one of command"),
        (variant(server=""), "variants[0]", "got neither"),
        (variant(name=""), "variants[0].name", "expected a non-empty name"),
        (variant(name="a") + variant(name="a"), "variants[1].name",
         "expected a unique name; 'a' is also the name of variants[0]"),
        (variant(server='command = "python -m tracewatch.core.demo --address {address}"'), "variants[0].command",
         'not one string: command = ["python", "-m", "tracewatch.core.demo", "--address", "{address}"]'),
        (variant(server='command = ["srv", "--address", "{adress}"]'), "variants[0].command",
         "unknown placeholder {adress}; did you mean {address}?"),
        (variant(server='command = ["srv", "--port", "5000"]'), "variants[0].command",
         "expected {address} or {port} in the argv"),
        (variant(server="command = []"), "variants[0].command", "expected a non-empty list of strings"),
        (variant('cwd = "nowhere"'), "variants[0].cwd", "expected an existing directory"),
        (variant('env = { "BAD-NAME" = "1" }'), "variants[0].env", "expected environment variable names"),
        (variant('env_from = ["$HOME"]'), "variants[0].env_from", "expected environment variable names"),
    ],
)
def test_each_mistake_names_file_path_and_expectation(tmp_path, text, path, expected):
    message = problems(write(tmp_path, text))
    line = next((line for line in message.splitlines() if line.startswith(f"{tmp_path / 'tracewatch.toml'}: {path}: ")), None)
    assert line is not None, message
    assert expected in line, message


@pytest.mark.parametrize(
    "address",
    ["http://10.0.0.5:5000", "tcp://10.0.0.5", "tcp://10.0.0.5:0", "tcp://10.0.0.5:70000", "tcp://:5000",
     "tcp://*:5000", "ipc:///tmp/x", "tcp://host:5000/extra"],
)
def test_attach_must_be_a_tcp_host_and_port(tmp_path, address):
    message = problems(write(tmp_path, variant(server=f'attach = "{address}"')))
    assert f"variants[0].attach: expected tcp://host:port of a running env server (e.g. tcp://10.0.0.5:5000), got '{address}'" in message


@pytest.mark.parametrize("address", ["tcp://10.0.0.5:5000", "tcp://[::1]:5000", "tcp://node-3.cluster:65535"])
def test_attach_accepts_hosts_and_addresses(tmp_path, address):
    (config_variant,) = load_config(write(tmp_path, variant(server=f'attach = "{address}"'))).variants
    assert config_variant.attach == address


@pytest.mark.parametrize(
    ("env", "name", "hint"),
    [
        ('env = { HF_TOKEN = "hf_abc" }', "HF_TOKEN", 'env_from = ["HF_TOKEN"]'),
        ('env = { OPENAI_API_KEY = "sk-abc" }', "OPENAI_API_KEY", "endpoint.api_key_var"),
        ('env = { db_password = "x" }', "db_password", 'env_from = ["db_password"]'),
        ('env = { AWS_SECRET_ACCESS_KEY = "x" }', "AWS_SECRET_ACCESS_KEY", "looks like a secret"),
        ('env = { PASSWD = "x" }', "PASSWD", 'env_from = ["PASSWD"]'),
        ('env = { GCP_CREDENTIALS = "x" }', "GCP_CREDENTIALS", 'env_from = ["GCP_CREDENTIALS"]'),
        ('env = { AUTH = "x" }', "AUTH", 'env_from = ["AUTH"]'),
        ('env = { DATABASE_URL = "x" }', "DATABASE_URL", 'env_from = ["DATABASE_URL"]'),
    ],
)
def test_secrets_in_env_are_refused_with_the_way_to_pass_them(tmp_path, env, name, hint):
    message = problems(write(tmp_path, variant(env)))
    assert f"variants[0].env.{name}: " in message and "looks like a secret" in message and hint in message


def test_credentials_in_the_endpoint_are_refused_without_repeating_them(tmp_path):
    text = variant('[variants.endpoint]\napi_key_var = "sk-live-1234"\nheaders = { Authorization = "Bearer x" }')
    message = problems(write(tmp_path, text))
    assert "variants[0].endpoint.api_key_var: holds what looks like an API key (sk-...)" in message
    assert "variants[0].endpoint.headers.Authorization: header 'Authorization' looks like a credential" in message
    assert 'headers_from_env = { "Authorization" = "MY_VAR" }' in message
    assert "sk-live" not in message and "Bearer x" not in message


def test_every_credential_value_is_reported_at_once_and_none_is_repeated(tmp_path):
    secrets = {
        "auth": "Bearer sk-proj-abcdefghijkl",
        "db": "postgres://app:hunter2hunter2@db.internal:5432/app",
        "key": "sk-ant-api03-abcdefghijklmnop",
        "url": "https://alice:s3cr3tpass@llm.example/v1",
        "argv": "sk-argvsecretvalue1",
        "next": "plain-looking-value-9",
        "header": "Token abcdefghijkl",
    }
    command = ["python", "serve.py", "--address", "{address}", f"--api-key={secrets['argv']}", "--hf-token", secrets["next"]]
    text = variant(
        f'env = {{ MODE = "{secrets["auth"]}", DB = "{secrets["db"]}", OTHER = "{secrets["key"]}" }}\n'
        f"[variants.endpoint]\nbase_url = \"{secrets['url']}\"\nheaders = {{ X-Trace = \"{secrets['header']}\" }}",
        server=f"command = {json.dumps(command)}",
    )
    message = problems(write(tmp_path, text))
    for where, what in [
        ("env.MODE", "the value of MODE looks like an API key"),
        ("env.DB", "the value of DB looks like a URL with a password"),
        ("env.OTHER", "the value of OTHER looks like an API key"),
        ("endpoint.base_url", "holds what looks like a URL with a password"),
        ("endpoint.headers.X-Trace", "its value looks like a bearer or basic credential"),
        ("command[4]", "the value of --api-key is a credential on the server's argv"),
        ("command[6]", "the value of --hf-token is a credential on the server's argv"),
    ]:
        assert f"variants[0].{where}: " in message and what in message, where
    for secret in secrets.values():
        assert secret not in message
        assert secret[:8] not in message


def test_names_that_only_point_at_a_credential_are_fine(tmp_path):
    command = ["python", "serve.py", "--address", "{address}", "--api-key-var", "OPENAI_API_KEY", "--max-tokens", "9", "--token-file", "/run/tok"]
    text = variant(
        'env = { AUTHOR = "me", MODE = "fast", URL = "https://llm.example/v1" }\n'
        '[variants.endpoint]\nbase_url = "https://llm.example/v1"\napi_key_var = "MY_KEY"\nheaders = { X-Trace = "on" }',
        server=f"command = {json.dumps(command)}",
    )
    (config_variant,) = load_config(write(tmp_path, text)).variants
    assert config_variant.endpoint.api_key_var == "MY_KEY"


def test_tasks_file_errors_name_the_file_and_line(tmp_path):
    tasks = '{"prompt": "ok"}\n[1, 2]\n\n{"prompt": \n"just text"\n'
    message = problems(write(tmp_path, variant(), tasks=tasks))
    tasks_file = tmp_path / "tasks.jsonl"
    assert "variants[0].tasks: bad lines in the tasks file:" in message
    assert f"{tasks_file}:2: expected a JSON object (one task's task_data), got an array" in message
    assert f"{tasks_file}:4: invalid JSON" in message
    assert f"{tasks_file}:5: expected a JSON object (one task's task_data), got a string" in message
    assert f"{tasks_file}:1" not in message and f"{tasks_file}:3" not in message


def test_a_missing_or_empty_tasks_file_is_named(tmp_path):
    assert f"variants[0].tasks: expected a JSONL file of tasks, but {tmp_path / 'tasks.jsonl'} does not exist" in (
        problems(write(tmp_path, variant(), tasks=None))
    )
    assert "variants[0].tasks: expected at least one task in" in problems(write(tmp_path, variant(), tasks="\n"))


def test_inline_tasks_must_be_tables(tmp_path):
    message = problems(write(tmp_path, variant().replace('tasks = "tasks.jsonl"', 'tasks = [{prompt = "a"}, 3]')))
    assert "variants[0].tasks: expected every item to be a table (one task's task_data); item 1 is not" in message


def test_every_problem_is_listed_at_once(tmp_path):
    text = (
        "[defaults]\nmax_concurent = 3\n"
        + variant("max_concurrent = 0", name="a")
        + variant('attach = "tcp://x"', name="b", server="")
        + variant(name="c")
    )
    lines = problems(write(tmp_path, text)).splitlines()
    source = str(tmp_path / "tracewatch.toml")
    assert all(line.startswith(f"{source}: ") for line in lines)
    # the misspelt default is applied to three variants and reported once, where it is
    assert [line.split(": ")[1] for line in lines] == ["variants[0].max_concurrent", "defaults.max_concurent", "variants[1].attach"]


def test_unreadable_files(tmp_path):
    missing = tmp_path / "missing.toml"
    assert problems(missing) == f"{missing}: no such file; expected a TOML config"
    broken = write(tmp_path, '[[variants]]\nname = "a\n')
    assert problems(broken).startswith(f"{broken}: invalid TOML: ") and "line 2" in problems(broken)


def test_from_attach_builds_one_validated_variant(tmp_path, monkeypatch):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"prompt": "a"}\n')
    config = Config.from_attach("tcp://10.0.0.5:5000", tasks, 3, 8, "m", "http://gpu:8000/v1", "GPU_KEY")
    (attached,) = config.variants
    assert (attached.name, attached.attach, attached.rollouts_per_task, attached.max_concurrent) == (
        "attached", "tcp://10.0.0.5:5000", 3, 8,
    )
    assert attached.client_config().base_url == "http://gpu:8000/v1" and attached.endpoint.api_key_var == "GPU_KEY"
    assert attached.task_list() == [{"prompt": "a"}]

    monkeypatch.chdir(tmp_path)  # a relative tasks path is relative to where the command runs
    with pytest.raises(ConfigError) as caught:
        Config.from_attach("10.0.0.5:5000", "tasks.jsonl", concurrency=0)
    message = str(caught.value)
    assert "attach: argument ADDRESS: expected tcp://host:port" in message
    assert "attach: argument --concurrency: expected at least 1, got 0" in message
    assert "attach: argument --model: missing; expected the model name" in message
    assert "tasks" not in message


def test_demo_config_starts_two_demo_servers_on_the_demo_tasks():
    from tracewatch.core.demo.tasks import DEFAULT_TASKS

    config = demo_config("/opt/py/bin/python", speed=2.0)
    baseline, candidate = config.variants
    assert (baseline.name, candidate.name) == ("baseline", "candidate")
    assert baseline.task_list() == candidate.task_list() == DEFAULT_TASKS
    assert baseline.server_argv(5002) == [
        "/opt/py/bin/python", "-m", "tracewatch.core.demo", "--address", "tcp://127.0.0.1:5002", "--seed", "1", "--speed", "2.0",
    ]
    assert candidate.server_argv(5003)[-4:] == ["--seed", "2", "--speed", "2.0"]
    with pytest.raises(ConfigError, match="built-in demo: speed: expected more than 0"):
        demo_config(sys.executable, speed=0)


def test_demo_tasks_are_what_the_demo_server_prints():
    printed = subprocess.run(
        [sys.executable, "-m", "tracewatch.core.demo", "--print-tasks"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert demo_config(sys.executable).variants[0].task_list() == [json.loads(line) for line in printed.splitlines()]


def test_core_config_and_the_launcher_import_neither_textual_nor_verifiers():
    code = (
        "import sys, tracewatch.core.session.config, tracewatch_guest.serve_verifiers;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'verifiers')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_many_bad_task_lines_are_summarised(tmp_path):
    message = problems(write(tmp_path, variant(), tasks="1\n" * 8))
    assert f"{tmp_path / 'tasks.jsonl'}:5: " in message and f"{tmp_path / 'tasks.jsonl'}:6: " not in message
    assert "... and 3 more bad lines" in message


SECRET_SHAPES = st.one_of(
    st.from_regex(r"sk-(proj-|ant-)?[A-Za-z0-9]{20,40}", fullmatch=True),
    st.from_regex(r"hf_[A-Za-z0-9]{30,36}", fullmatch=True),
    st.from_regex(r"ghp_[A-Za-z0-9]{36}", fullmatch=True),
    st.from_regex(r"AKIA[0-9A-Z]{16}", fullmatch=True),
    st.from_regex(r"AIza[0-9A-Za-z_-]{35}", fullmatch=True),
    st.from_regex(r"xoxb-[0-9]{10,12}-[A-Za-z0-9]{20}", fullmatch=True),
    st.from_regex(r"Bearer [A-Za-z0-9._~+/=-]{20,40}", fullmatch=True),
    st.from_regex(r"(postgres|mysql|https|redis)://[a-z]{3,8}:[A-Za-z0-9]{10,20}@[a-z]{3,10}\.internal(:[0-9]{4})?/[a-z]{0,6}", fullmatch=True),
)
PLACES = ("env value", "header value", "argv inline", "argv next", "base_url", "extra_body", "defaults env value")


def _placed(secret: str, place: str) -> tuple[str, str]:
    """(config text holding `secret` at `place`, the field path the error must name)."""
    if place == "base_url" and "://" not in secret:
        place = "env value"
    command = ["python", "serve.py", "--address", "{address}"]
    body, server, defaults = "", None, ""
    if place == "env value":
        body, where = f"env = {{ SETTING = {json.dumps(secret)} }}", "variants[0].env.SETTING"
    elif place == "defaults env value":
        defaults, where = f"[defaults]\nenv = {{ SETTING = {json.dumps(secret)} }}\n", "defaults.env.SETTING"
    elif place == "header value":
        body, where = f"[variants.endpoint]\nheaders = {{ X-Extra = {json.dumps(secret)} }}", "variants[0].endpoint.headers.X-Extra"
    elif place == "argv inline":
        server, where = json.dumps([*command, f"--api-key={secret}"]), "variants[0].command[4]"
    elif place == "argv next":
        server, where = json.dumps([*command, "--auth-token", secret]), "variants[0].command[5]"
    elif place == "base_url":
        body, where = f"[variants.endpoint]\nbase_url = {json.dumps(secret)}", "variants[0].endpoint.base_url"
    else:
        body, where = f"[variants.sampling.extra_body]\nnote = {json.dumps(secret)}", "variants[0].sampling.extra_body.note"
    text = defaults + variant(body, server=SERVER if server is None else f"command = {server}")
    return text, where


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(secret=SECRET_SHAPES, place=st.sampled_from(PLACES))
def test_generated_credentials_anywhere_are_refused_and_never_repeated(secret, place):
    text, where = _placed(secret, place)
    with tempfile.TemporaryDirectory() as folder:
        with pytest.raises(ConfigError) as caught:
            load_config(write(Path(folder), text))
    message = str(caught.value)
    assert f"{where}: " in message
    hidden = secret.split("@")[0].rsplit(":", 1)[-1] if "://" in secret else secret
    assert hidden not in message and hidden[:10] not in message


def test_attach_flags_are_checked_the_same_way(tmp_path, capsys):
    from tracewatch.cli import main

    (tmp_path / "tasks.jsonl").write_text('{"prompt": "a"}\n')
    argv = ["attach", "tcp://127.0.0.1:5000", "--tasks", str(tmp_path / "tasks.jsonl"), "--headless",
            "--base-url", "https://bob:pw-0123456789@llm.example/v1", "--api-key-var", "sk-0123456789abcdef"]  # fmt: skip
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "argument --base-url: holds what looks like a URL with a password" in error
    assert "argument --api-key-var: holds what looks like an API key" in error
    assert "pw-0123456789" not in error and "sk-0123456789" not in error


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_a_tasks_file_that_is_not_a_file_is_refused_at_once(tmp_path, kind):
    """/dev/zero would grow until MemoryError and a FIFO would block forever: the whole
    command refuses either with one clear line (the subprocess timeout only guards a hang)."""
    tasks = {"device": Path("/dev/zero"), "fifo": tmp_path / "tasks.fifo", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(tasks)
    config = write(tmp_path, variant().replace('tasks = "tasks.jsonl"', f"tasks = {json.dumps(str(tasks))}"), tasks=None)
    for argv in (["--headless", str(config)], ["attach", "tcp://127.0.0.1:9", "--tasks", str(tasks), "--headless"]):
        done = subprocess.run(
            [sys.executable, "-m", "tracewatch.cli", *argv], capture_output=True, text=True, timeout=60, cwd=REPO
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        expected = {"device": "is a character device, not a regular file", "fifo": "is a FIFO (a named pipe), not a regular file", "directory": "is a directory"}[kind]
        assert f"{tasks} {expected}; expected a JSONL file of tasks in a regular file" in done.stderr


def test_a_tasks_file_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(config_module, "MAX_TASKS_BYTES", 1 << 16)
    lines = [json.dumps({"prompt": "x" * 100, "i": i}) for i in range(1000)]  # about 120 KB
    message = problems(write(tmp_path, variant(), tasks="\n".join(lines) + "\n"))
    assert f"{tmp_path / 'tasks.jsonl'} is larger than 0.0625 MiB; expected a tasks file below that" in message
    one_line = "x" * (1 << 17)  # no newline at all: the read stops at the limit
    assert "is larger than" in problems(write(tmp_path, variant(), tasks=one_line))


def test_a_line_that_is_not_utf8_is_named(tmp_path):
    path = write(tmp_path, variant(), tasks=None)
    (tmp_path / "tasks.jsonl").write_bytes(b'{"prompt": "a"}\n{"prompt": "\xff"}\n')
    assert f"{tmp_path / 'tasks.jsonl'}:2: not UTF-8 text" in problems(path)


@pytest.mark.parametrize(
    "url",
    ["https://llm.example/v1?api_key=QUERYSECRET1", "https://llm.example/v1?x=1&access_token=QUERYSECRET1",
     "https://llm.example/v1?key=QUERYSECRET1", "https://llm.example/v1?token=QUERYSECRET1#top",
     "https://blob.example/v1?sv=1&sig=QUERYSECRET1", "https://llm.example/v1?X-Api-Key=QUERYSECRET1"],
)  # fmt: skip
def test_a_base_url_carrying_a_key_in_its_query_is_refused_without_repeating_it(tmp_path, url):
    message = problems(write(tmp_path, variant(f"[variants.endpoint]\nbase_url = {json.dumps(url)}")))
    assert "variants[0].endpoint.base_url: holds what looks like a URL with a credential in its query" in message
    assert "QUERYSECRET1" not in message and "QUERYSEC" not in message


@pytest.mark.parametrize(("arg", "flag"), [("-pHUNTER2secret", "-p"), ("-ubob:HUNTER2secret", "-u")])
def test_a_credential_attached_to_a_short_option_is_refused_without_repeating_it(tmp_path, arg, flag):
    command = ["python", "serve.py", "--address", "{address}", arg]
    message = problems(write(tmp_path, variant(server=f"command = {json.dumps(command)}")))
    assert f"variants[0].command[4]: the value of {flag} is a credential on the server's argv" in message
    assert "HUNTER2" not in message


def test_ports_and_plain_queries_are_fine(tmp_path):
    command = ["python", "serve.py", "--address", "{address}", "-p8080", "-ubob"]
    body = '[variants.endpoint]\nbase_url = "https://llm.example/v1?design=a&sort=key&key="'
    (config_variant,) = load_config(write(tmp_path, variant(body, server=f"command = {json.dumps(command)}"))).variants
    assert config_variant.endpoint.base_url.endswith("key=")


QUERY_NAMES = st.sampled_from(["api_key", "apikey", "api-key", "key", "token", "access_token", "id_token", "sig",
                               "signature", "secret", "client_secret", "password", "auth", "X-Goog-Api-Key",
                               "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "refresh_token",
                               "subscription-key"])  # fmt: skip
PLAIN_QUERY_NAMES = st.sampled_from(["sort_key", "page_token", "next_page_token", "continuation_token", "cache_key",
                                     "partition_key", "idempotency_key", "keyword", "tokens", "author", "design"])  # fmt: skip


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(name=QUERY_NAMES, value=st.from_regex(r"[A-Za-z0-9%._~-]{12,40}", fullmatch=True), before=st.booleans())
def test_generated_query_credentials_are_refused_and_never_repeated(name, value, before):
    url = f"https://llm.example/v1?{'model=m&' if before else ''}{name}={value}"
    with tempfile.TemporaryDirectory() as folder:
        message = problems(write(Path(folder), variant(f"[variants.endpoint]\nbase_url = {json.dumps(url)}")))
    assert "variants[0].endpoint.base_url: holds what looks like a URL with a credential in its query" in message
    assert value not in message and value[:10] not in message


@settings(max_examples=60, deadline=None)
@given(name=PLAIN_QUERY_NAMES, value=st.from_regex(r"[A-Za-z0-9._~-]{1,20}", fullmatch=True), before=st.booleans())
def test_query_parameters_that_only_mention_a_key_or_token_are_fine(name, value, before):
    url = f"https://llm.example/v1?{'model=m&' if before else ''}{name}={value}"
    with tempfile.TemporaryDirectory() as folder:
        (config_variant,) = load_config(write(Path(folder), variant(f"[variants.endpoint]\nbase_url = {json.dumps(url)}"))).variants
    assert config_variant.endpoint.base_url == url


@pytest.mark.slow
def test_the_attach_command_refuses_a_key_in_the_base_urls_query(tmp_path):
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "a"}\n')
    argv = ["attach", "tcp://127.0.0.1:9", "--tasks", str(tmp_path / "tasks.jsonl"), "--headless",
            "--base-url", "https://llm.example/v1?api_key=QUERYSECRET1"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "tracewatch.cli", *argv], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2
    assert "argument --base-url: holds what looks like a URL with a credential in its query" in done.stderr
    assert "QUERYSECRET1" not in done.stderr + done.stdout


def test_on_viewer_exit_is_an_evals_choice(tmp_path):
    (tmp_path / "tasks.jsonl").write_text("")
    path = write(tmp_path, '[[variants]]\nname = "ev"\neval = ["vf-eval", "x"]\non_viewer_exit = "finish"\n', tasks=None)
    assert load_config(path).variants[0].on_viewer_exit == "finish"
    message = problems(write(tmp_path, '[[variants]]\nname = "r"\nrelay = "tcp://127.0.0.1:9"\non_viewer_exit = "finish"\n', tasks=None))
    assert "on_viewer_exit is an eval's choice" in message
    assert "on_viewer_exit" in problems(write(tmp_path, '[[variants]]\nname = "ev"\neval = ["vf-eval"]\non_viewer_exit = "linger"\n', tasks=None))
