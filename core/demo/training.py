"""Training-shaped token arrays for the demo: each message rendered through a
ChatML-like template and tokenized by the demo's own tokenizer, so the token view shows
real text, with the streams a training run carries.

The sampler's streams (`mask`, `is_content`, `logprobs`) come with every node. The
trainer's (`advantages`, `entropies`, `trainer_logprobs`, `reference_logprobs`,
`loss_weights`) come only with the nodes committed from the second model turn on: the
wire is append-only, so a node keeps what it had when it landed, and a watcher sees
both shapes in one rollout. One span of one turn has the trainer disagree with the
sampler, and one tool result is trained on, the masking bug a token view is for; its
message then has no logprobs for its trained tokens, which the view names.
"""

from __future__ import annotations

import json
import random
from functools import cache
from typing import Any

from tracewatch.core.demo import vocabulary
from tracewatch.core.tokens.tokenizer import TokenText

ANNOTATED_FROM = 2
"""The first model turn whose node carries the trainer's streams."""
MISMATCH_TURN = 3
TRAINED_TOOL_RESULT = 2
"""Which tool result (counted from 1) is trained on."""


@cache
def demo_tokenizer() -> TokenText:
    return TokenText.load(str(vocabulary.PATH))


def _parts(message: dict[str, Any], sampled: bool) -> tuple[str, list[tuple[str, bool]]]:
    """The scaffold before the message, then its pieces: (text, is it content?)."""
    role = message.get("role", "user")
    parts: list[tuple[str, bool]] = []
    if message.get("reasoning_content"):
        parts.append((f"<think>\n{message['reasoning_content']}\n</think>\n", True))
    if message.get("content"):
        parts.append((message["content"], True))
    for call in message.get("tool_calls") or []:
        parts.append((f"<tool_call>{json.dumps({'name': call['name'], 'arguments': call['arguments']})}</tool_call>", True))
    parts.append(("<|im_end|>" if sampled else "<|im_end|>\n", False))
    return f"<|im_start|>{role}\n", parts


class TrainingTokens:
    """One agent's tokenizer and its streams, turn by turn (`Tokenizing`)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.text = demo_tokenizer()
        self.advantage = rng.choice((0.75, 0.5, -0.25, -0.5))
        self.turn = 0
        self.tool_results = 0

    def span(self, message: dict[str, Any], sampled: bool) -> dict[str, Any]:
        scaffold, parts = _parts(message, sampled)
        ids = self.text.encode(scaffold)
        mask = [False] * len(ids)
        content = [False] * len(ids)
        trained_tool = message.get("role") == "tool" and self._next_tool_result() == TRAINED_TOOL_RESULT
        for text, is_content in parts:
            piece = self.text.encode(text)
            ids += piece
            mask += [sampled or (trained_tool and is_content)] * len(piece)
            content += [is_content] * len(piece)
        fields: dict[str, Any] = {"token_ids": ids, "mask": mask, "is_content": content, "logprobs": []}
        if sampled:
            self.turn += 1
            fields.update(self._sampled(sum(mask), ids, mask))
        return fields

    def _next_tool_result(self) -> int:
        self.tool_results += 1
        return self.tool_results

    def _sampled(self, count: int, ids: list[int], mask: list[bool]) -> dict[str, Any]:
        rng = self.rng
        logprobs = [round(-rng.uniform(1.5, 6.0) if rng.random() < 0.08 else -rng.expovariate(12.0), 4) for _ in range(count)]
        fields: dict[str, Any] = {"logprobs": logprobs}
        if self.turn < ANNOTATED_FROM:
            return fields
        trainer = [round(min(0.0, value + rng.gauss(0.0, 0.01)), 4) for value in logprobs]
        if self.turn == MISMATCH_TURN and count > 8:
            start = rng.randrange(count - 6)
            for index in range(start, start + 6):
                trainer[index] = round(trainer[index] - rng.uniform(0.6, 1.4), 4)
        fields.update(
            advantages=[self.advantage] * count,
            trainer_logprobs=trainer,
            reference_logprobs=[round(value - abs(rng.gauss(0.0, 0.08)), 4) for value in logprobs],
            entropies=[round(max(0.01, -value * rng.uniform(0.5, 1.5) + rng.uniform(0.0, 0.2)), 4) for value in logprobs],
            loss_weights={"policy": [1.0 if trained else 0.0 for trained in mask]},
        )
        return fields
