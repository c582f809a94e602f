"""prime-rl runs in the stream layout, followed live: what prime-rl's file monitor
writes under `<out>/monitors/file/` (see docs/prime-rl.md for the format and the API).

- `layout`: `detect` / `find_run`: the run at a path (its output dir, `monitors/file/`
  or `traces/`), `StreamRun` (its paths) or `RolloutsRun` (the oldest layout).
- `run`: `PrimeRlRun`, every reader below polled in a time slice and joined by trace id
  (`poll` -> `RunChanges`, `where`, `open_episode`, `eval_progress`, `scan_steps`).
- `live`: `LiveFollower`: `live/<trace_id>.jsonl` folded through the assembly
  (`LiveTrace`, `Dispatch`, `stage`), `live/pending/*.json` (`Placeholder`).
- `episodes`: `EpisodeIndex` / `EpisodeTable`: `stream.index.jsonl` in numpy columns.
- `chunks`: `read_record` / `OpenChunk`: records at (chunk, offset), plain or sealed zstd.
- `steps`: a record's dispatch step and task; `StepScan` for rows that lack them.
- `annotations`: `Annotations` (per-trace scalars, update locations), `fold_updates`.
- `metrics`: `MetricsReader` -> `Series` per key. `plan`: `EvalPlan`, `EvalProgress`.
- `files`, `columns`, `notes`: safe incremental reading, growable columns, problems in words.
"""
