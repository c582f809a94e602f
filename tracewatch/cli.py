"""The `tracewatch` command: the demo with no arguments, a config file, an attach to a
running server, a replay of a recording, or a finished run opened offline; each with
`--headless` for a screen-less run that prints progress and a summary."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tracewatch.core.demo import TOKENIZERS as DEMO_TOKENIZERS
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.errors import TracewatchError
from tracewatch.core.paths import RECORDING_SUFFIX, default_recording_path
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import Config, load_config
from tracewatch.core.session.config_errors import ConfigError, Problem
from tracewatch.core.session.retention import FreezeAfterSlowCollections, resume_collection
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.session import Session
from tracewatch.core.taps.forwarder import check_proxy_addresses
from tracewatch.core.taps.proxy_variant import ProxyVariant
from tracewatch.core.taps.relay_viewer import check_relay_address
from tracewatch.core.taps.view_priority import VIEW_NICENESS
from tracewatch.core.text import say
from tracewatch.core.tokens.tokenizer import Tokenizers, find_tokenizer
from tracewatch.core.wire.probe import check_listening

COMMANDS = ("attach", "proxy", "eval", "tap", "replay", "open", "export", "compare", "tokens")


def _common(parser: argparse.ArgumentParser, live: bool = True) -> None:
    parser.add_argument("--tokenizer", metavar="T", help="token text for the token view (t): a tokenizer.json, a folder holding one, or a model name in the local Hugging Face cache (never downloaded); default: each variant's own")
    parser.add_argument("--headless", action="store_true", help="no screen: print one line per rollout event and a summary; exit 0 only if every rollout finished without error")
    parser.add_argument("--export-dir", type=Path, metavar="DIR", help="where `e` writes episodes and the palette's Screenshot its SVGs (default: the session's folder under $TRACEWATCH_HOME/sessions)")
    if live:
        record = parser.add_mutually_exclusive_group()
        record.add_argument("--record", type=Path, metavar="PATH", help="record every delta to PATH (default: a new file under $TRACEWATCH_HOME/recordings)")
        record.add_argument("--no-record", action="store_true", help="do not record this session")
        parser.add_argument("--cancel-stalled", type=float, metavar="SECONDS", help="cancel a rollout that sent nothing for this long (on screen or headless)")
        parser.add_argument("--bell", action="store_true", help="ring the terminal's bell on an alert (a rollout stalled, a variant failed or cancelled, the run ended)")
        parser.add_argument("--notify", type=int, choices=(9, 777), metavar="OSC", help="also a desktop notification through the terminal on an alert: 9 (OSC 9: iTerm2, WezTerm, kitty, Windows Terminal) or 777 (OSC 777: foot, Ghostty, rxvt)")
        parser.add_argument("--keep", type=_positive, metavar="N", help="keep the newest N session folders, deleting older ones that are not running (default: the config's keep_sessions, else 20)")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


class _ShowDefaults(argparse.HelpFormatter):
    """--help names each option's default, where it has one worth naming."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _parser(prog: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description, epilog=epilog, formatter_class=_ShowDefaults)


def main_parser() -> argparse.ArgumentParser:
    parser = _parser(
        "tracewatch",
        "Watch verifiers rollouts live. With no CONFIG, runs the built-in demo: two variants of a demo env server, no model, no network.",
        epilog="Other forms: tracewatch attach ADDRESS --tasks FILE | tracewatch proxy --listen ADDRESS --upstream ADDRESS | tracewatch eval -- vf-eval ... | tracewatch tap ADDRESS | tracewatch replay FILE | tracewatch open PATH | tracewatch export FILE OUT | tracewatch compare SOURCE... | tracewatch tokens SOURCE --rollout ID (each takes --help).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('tracewatch')}")
    parser.add_argument("config", nargs="?", type=Path, help="a TOML config of variants (see README)")
    parser.add_argument("--speed", type=float, default=1.0, help="demo only: scale the demo servers' pace (2 = twice as fast)")
    _common(parser)
    return parser


def attach_parser() -> argparse.ArgumentParser:
    parser = _parser("tracewatch attach", "Dispatch tasks to an env server that already runs (an EnvServer or EnvServerPool).")
    parser.add_argument("address", help="tcp://host:port of the server")
    parser.add_argument("--tasks", type=Path, required=True, help="JSONL file, one task_data object per line")
    parser.add_argument("--rollouts", type=int, default=1, help="rollouts per task")
    parser.add_argument("--concurrency", type=int, default=4, help="max rollouts in flight")
    parser.add_argument("--model", default="gpt-4.1-mini", help="model name sent with each run")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="the model endpoint the server calls")
    parser.add_argument("--api-key-var", default="OPENAI_API_KEY", help="NAME of the environment variable (on the server) holding the API key")
    parser.add_argument("--name", default="attached", help="the variant's name on screen and in the recording")
    parser.add_argument("--health-timeout", type=float, default=60.0, metavar="SECONDS", help="how long a server that listens has to answer health (an address where nothing listens, or something that is not an env server, is refused at once)")
    _common(parser)
    return parser


def _tap_parser(form: str, named: str, description: str) -> argparse.ArgumentParser:
    """A form that watches runs another program drives; its one variant is `named`
    unless --name says otherwise."""
    parser = _parser(f"tracewatch {form}", description)
    parser.add_argument("--name", help=f"the variant's name (default: {named})")
    return parser


def proxy_parser() -> argparse.ArgumentParser:
    parser = _tap_parser("proxy", "proxy", "Watch the runs another program drives: point the driver at --listen instead of its env server; every frame goes on to --upstream unchanged.")
    parser.add_argument("--listen", required=True, help="tcp://HOST:PORT the drivers connect to")
    parser.add_argument("--upstream", required=True, help="tcp://HOST:PORT of the env server")
    _common(parser)
    return parser


def eval_parser() -> argparse.ArgumentParser:
    parser = _tap_parser("eval", "eval", "Run a vf-eval command line under tracewatch's supervisor and watch each of its in-process rollouts live: tracewatch eval [--name NAME] [--headless] -- vf-eval @ eval.toml ...")
    _common(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the vf-eval command line")
    return parser


def tap_parser() -> argparse.ArgumentParser:
    parser = _tap_parser("tap", "relay", "View the runs a program relays with tracewatch_relay.Relay: those in flight as they stand, then live.")
    parser.add_argument("address", help="tcp://HOST:PORT the driver's Relay listens on")
    _common(parser)
    return parser


def replay_parser() -> argparse.ArgumentParser:
    parser = _parser("tracewatch replay", "Replay a recorded session in the same app.")
    parser.add_argument("file", type=Path)
    parser.add_argument("--speed", type=float, default=1.0, help="recorded pace times X; 0 replays as fast as possible")
    _common(parser, live=False)
    return parser


def open_parser() -> argparse.ArgumentParser:
    parser = _parser(
        "tracewatch open",
        "Browse offline: a finished verifiers run directory, a traces JSONL file, a recording (*.twrec, loaded one rollout at a time), "
        "or a prime-rl run (its output dir, monitors/file/ or traces/), followed while it writes.",
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--no-follow", action="store_true", help="a prime-rl run: show it as it is now, not as it goes on")
    parser.add_argument("--until-idle", type=float, metavar="SECONDS", help="a prime-rl run: stop following once nothing changed for this long")
    _common(parser, live=False)
    return parser


def export_parser() -> argparse.ArgumentParser:
    parser = _parser(
        "tracewatch export",
        "Write a whole recording as JSONL: every record, or with --episodes one assembled episode per line (the shape of a verifiers traces.jsonl); "
        "or with --trace-events the run's timeline as Chrome Trace Event JSON, which Perfetto and chrome://tracing open.",
    )
    parser.add_argument("recording", type=Path, metavar="SOURCE", help="a recording (*.twrec) or a prime-rl run (its episodes as they landed); with --trace-events also a verifiers run directory or traces JSONL file")
    parser.add_argument("output", type=Path)
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--episodes", action="store_true", help="one assembled episode per line instead of every record")
    how.add_argument("--trace-events", action="store_true", help="one process per variant, one track per rollout, a slice per phase and per model call")
    return parser


def compare_parser() -> argparse.ArgumentParser:
    parser = _parser(
        "tracewatch compare",
        "Compare variants task by task, offline: per task each variant's mean reward, passes of k, turns and time; each variant's mean reward ± standard error; the tasks where they disagree.",
    )
    parser.add_argument("sources", nargs="+", type=Path, metavar="SOURCE", help="a recording (*.twrec), a verifiers run directory, a traces JSONL file or a prime-rl run; several side by side")
    return parser


def tokens_parser() -> argparse.ArgumentParser:
    parser = _parser(
        "tracewatch tokens",
        "Print a rollout's messages token by token, offline: id, text and every stream (mask, is_content, logprobs, advantages, reference and trainer logprobs, entropies, loss weights), the values the token view shows.",
    )
    parser.add_argument("source", type=Path, metavar="SOURCE", help="a recording (*.twrec), a verifiers run directory, a traces JSONL file or a prime-rl run")
    parser.add_argument("--rollout", required=True, metavar="ID", help="the rollout's key (as `export` names it), one of its trace ids, or any unique start of one (the table's Trace column)")
    parser.add_argument("--node", type=int, metavar="N", help="only message #N of each trace, as the transcript and the token view number it from #0 (default: every message that carries token ids)")
    parser.add_argument("--tokenizer", metavar="T", help="token text: a tokenizer.json, a folder holding one, or a model name in the local Hugging Face cache (default: the demo's for its model, else ids)")
    parser.add_argument("--format", choices=("table", "jsonl"), default="table", help="table: tab-separated, for reading; jsonl: one object per message, then one per token")
    return parser


def compare_sources(args: argparse.Namespace) -> int:
    """Every source's variants side by side; a name two sources share gets its
    source's name in front."""
    from tracewatch.core.engine.opened import OpenedRecording, open_folder  # offline only: not on a live start
    from tracewatch.core.session.compare import compare, compare_lines

    groups: dict[str, list[Rollout]] = {}
    for path in args.sources:
        session = OpenedRecording(path) if path.suffix == RECORDING_SUFFIX else open_folder(path)
        for name in session.variants:
            label = name if name not in groups else f"{path.stem}:{name}"
            groups[label] = list(session.store.variant_rollouts(name))
    for line in compare_lines(compare(groups)):
        say(sys.stdout, line)
    return 0


def export(args: argparse.Namespace) -> int:
    from tracewatch.core.engine.followed_run import FollowedRun
    from tracewatch.core.recordings.export import export_recording, export_records
    from tracewatch.core.recordings.prime_rl.layout import StreamRun, detect

    if args.trace_events:
        return export_trace_events(args.recording, args.output)
    run = detect(args.recording) if args.recording.is_dir() else None
    if isinstance(run, StreamRun):  # a prime-rl run holds episodes, not records: each record as it landed
        result = export_records(FollowedRun(run, follow=False).snapshot().records(), args.output)
    else:
        result = export_recording(args.recording, args.output, episodes=args.episodes)
    what = "episodes" if args.episodes or isinstance(run, StreamRun) else "lines"
    say(sys.stdout, f"wrote {result.lines} {what} to {args.output}")
    if result.unreadable:
        say(sys.stdout, f"  left out {len(result.unreadable)} whose record cannot be read: {_some(result.unreadable, 3)}")
    for ended, ids in result.partial.items():
        say(sys.stdout, f"  {len(ids)} {ended} without an episode, written partial (traces so far): {_some(ids)}")
    if result.skipped:
        say(sys.stdout, f"  skipped {len(result.skipped)} that never started (nothing to write): {_some(result.skipped)}")
    if result.unwritable:
        say(sys.stdout, f"  left out {result.unwritable} nested too deep for JSON (a hostile server's; the run failed on it)")
    if result.truncated:
        say(sys.stderr, f"note: {result.truncated}")
    return 0


def export_trace_events(source: Path, output: Path) -> int:
    """A recording is read one rollout at a time; a run directory or JSONL file is
    opened whole, as `open` does."""
    from tracewatch.core.engine.opened import open_folder
    from tracewatch.core.recordings.trace_events import (
        TraceEventsWritten,
        first_time,
        recording_rollouts,
        write_trace_events,
    )

    written = TraceEventsWritten()
    if source.suffix == RECORDING_SUFFIX:
        write_trace_events(recording_rollouts(source, written), output, written)
    else:
        session = open_folder(source)
        for key in list(session.store.rollouts):
            session.load(key)  # a prime-rl run's episodes are read when opened: their timing is in the records
        rollouts = session.store.rollouts.values()
        write_trace_events(rollouts, output, written, origin=first_time(rollouts))
    say(sys.stdout, f"wrote {written.rollouts} rollouts ({written.slices} slices) to {output}: open it in Perfetto or chrome://tracing")
    if written.skipped:
        say(sys.stdout, f"  skipped {len(written.skipped)} with no usable time: {_some(written.skipped)}")
    if written.truncated:
        say(sys.stderr, f"note: {written.truncated}")
    return 0


def _some(ids: list[str], shown: int = 5) -> str:
    return ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _recorder(args: argparse.Namespace, meta: dict[str, Any]) -> Recorder | None:
    if args.no_record:
        return None
    return Recorder(args.record or default_recording_path(), meta=meta)


def _live_config(command: str | None, args: argparse.Namespace) -> Config:
    if command == "attach":
        config = Config.from_attach(
            address=args.address,
            tasks_path=args.tasks,
            rollouts=args.rollouts,
            concurrency=args.concurrency,
            model=args.model,
            base_url=args.base_url,
            api_key_var=args.api_key_var,
            name=args.name,
            health_timeout=args.health_timeout,
        )
        check_listening(args.address, "start the env server there first (a config's `attach` waits for one still starting)")
        return config
    if command == "eval":
        argv = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not argv:
            raise ConfigError([Problem("command line", "eval", "expected a command after --, e.g. tracewatch eval -- vf-eval @ eval.toml")])
        if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
            raise ConfigError([Problem("command line", "eval", f"{argv[0]!r} is not found on PATH (is the venv with verifiers activated?)")])
        return Config.for_eval(argv, args.name)
    if command == "tap":
        config = Config.for_relay(args.address, args.name)
        check_relay_address(args.address)
        return config
    if command == "proxy":
        config = Config.for_proxy(args.listen, args.upstream, args.name)
        check_proxy_addresses(args.listen, args.upstream)
        return config
    if args.config is not None:
        return load_config(args.config)
    from tracewatch.core.demo.builtin_config import demo_config  # the demo only

    return demo_config(sys.executable, speed=args.speed)


def _offline_session(command: str, args: argparse.Namespace) -> Session:
    from tracewatch.core.engine.opened import OpenedRecording, open_folder  # offline only: not on a live start
    from tracewatch.core.engine.replay import ReplaySession  # offline only: not on a live start

    if command == "replay":
        return ReplaySession(args.file, speed=args.speed)
    if args.path.suffix == RECORDING_SUFFIX:
        return OpenedRecording(args.path, at_once=False)  # rows join as the index reads on
    return open_folder(args.path, follow=not args.no_follow, until_idle=args.until_idle, columns=not args.headless)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
    parsers = {None: main_parser, "attach": attach_parser, "proxy": proxy_parser, "eval": eval_parser, "tap": tap_parser, "replay": replay_parser, "open": open_parser, "export": export_parser, "compare": compare_parser, "tokens": tokens_parser}
    args = parsers[command]().parse_args(argv[1:] if command else argv)
    if command in ("export", "compare", "tokens"):
        resume_collection()  # no session: the collector as usual from here
    try:
        if command == "export":
            return export(args)
        if command == "compare":
            return compare_sources(args)
        if command == "tokens":
            from tracewatch.tokens_command import print_tokens

            return print_tokens(args)
        if args.tokenizer is not None:
            find_tokenizer(args.tokenizer)
        config = None
        if command in ("replay", "open"):
            engine = _offline_session(command, args)
        else:
            config = _live_config(command, args)
            if args.keep is not None:
                config = config.model_copy(update={"keep_sessions": args.keep})
            engine = LiveSession(config, recorder=_recorder(args, {"argv": argv}))
    except (TracewatchError, OSError) as error:  # a message written for the user: no traceback
        for line in f"tracewatch: {error}".split("\n"):  # a config's problems, a line each
            say(sys.stderr, line)
        return 2
    if args.export_dir is not None:
        engine.export_dir = args.export_dir
    if not args.headless:
        from tracewatch.tui.app import TracewatchApp  # noqa: F401 - imported before the freeze: its modules are startup state
    with FreezeAfterSlowCollections():
        return _run(engine, args, recorded=command not in ("replay", "open"), tokenizers=_tokenizers(args, config))


def _tokenizers(args: argparse.Namespace, config: Config | None) -> Tokenizers:
    """The command line's tokenizer, else each variant's; the demo's model reads with
    the demo's tokenizer, so a demo recording shows text when replayed or opened."""
    by_variant = {variant.name: variant.tokenizer for variant in config.variants if variant.tokenizer} if config else {}
    return Tokenizers(args.tokenizer, by_variant, DEMO_TOKENIZERS)


def _run(engine: Session, args: argparse.Namespace, recorded: bool, tokenizers: Tokenizers) -> int:
    if getattr(args, "cancel_stalled", None) is not None:
        uncancellable = {name: v.rollout_cancel_unavailable for name, v in engine.variants.items() if v.rollout_cancel_unavailable}
        if uncancellable:
            for name, reason in uncancellable.items():
                say(sys.stderr, f"tracewatch: --cancel-stalled cannot cancel {name}'s rollouts: {reason}")
            return 2
    if args.headless:
        from tracewatch.core.engine.headless import run_headless

        yield_to_forwarders(engine)
        resume_collection()  # no first screen to wait for: startup ends here
        try:
            return asyncio.run(run_headless(engine, cancel_stalled=getattr(args, "cancel_stalled", None)))
        except KeyboardInterrupt:  # before the runner took Ctrl-C over: nothing had started
            return 130
    from tracewatch.core.session.alerts import AlertSettings
    from tracewatch.on_screen import run_on_screen
    from tracewatch.tui.app import TracewatchApp

    alerts = AlertSettings(
        bell=getattr(args, "bell", False), osc=getattr(args, "notify", None),
        cancel_stalled=getattr(args, "cancel_stalled", None),
    )
    app = TracewatchApp(engine, tokenizers=tokenizers, alerts=alerts)
    ended_by = run_on_screen(app, engine)  # a crash (Textual printed why) keeps what was recorded, endings too
    for line in where_things_went(engine, recorded):
        say(sys.stdout, line)
    if ended_by is not None:
        return 128 + ended_by
    return app.return_code or (1 if engine.recording_stopped is not None else 0)


def yield_to_forwarders(engine: Session) -> None:
    """Headless, a session of proxies only has its view yield the cores to their
    forwarding processes, which the drivers wait on. Not with a server or an eval of
    ours (started later, it would inherit the view's lower priority), and not on the
    screen, where the keys wait on the view."""
    proxies = [variant for variant in engine.variants.values() if isinstance(variant, ProxyVariant)]
    if proxies and len(proxies) == len(engine.variants):
        for proxy in proxies:
            proxy.view_niceness = VIEW_NICENESS


def where_things_went(engine: Session, recorded: bool) -> list[str]:
    """Printed after the screen closes: the recording (or where and why it stopped,
    an error that makes the exit status 1) and the exports, to find them."""
    lines = []
    if engine.recording_stopped is not None:
        lines.append(f"error: {engine.recording_stopped}")
    elif recorded and engine.recording_path is not None:
        lines.append(f"recording: {engine.recording_path}")
    if engine.exported:
        lines.append(f"exported {len(engine.exported)} episode(s) to {engine.export_dir}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
