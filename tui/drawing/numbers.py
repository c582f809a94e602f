"""Numbers as a glance reads them: rewards, byte sizes (durations: `core/run/durations`)."""

from __future__ import annotations


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
