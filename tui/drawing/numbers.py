"""Numbers as a glance reads them: clocks, rewards, byte sizes."""

from __future__ import annotations


def clock(seconds: float | None) -> str:
    """`0:41`, `12:03`, `1:02:03`: what a glance at a running rollout needs."""
    if seconds is None:
        return ""
    total = int(max(0.0, seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def reward_text(reward: float | None) -> str:
    return "" if reward is None else f"{reward:.2f}"


def rollout_reward_text(reward: float | None, scored_traces: int) -> str:
    """A rollout's reward in the words every view uses: over several scored traces (a
    multi-agent episode) it is their mean, and says so."""
    text = reward_text(reward)
    return f"{text}, the mean of {scored_traces} scored traces" if text and scored_traces > 1 else text


def size_text(size: float) -> str:
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
