"""The demo's own tokenizer: a small byte-level BPE trained on the demo's text, so the
demo and the tests show real token text with no download.

`python -m tracewatch.core.demo.vocabulary` trains it again and writes `tokenizer.json` beside
this file (the committed one); training is deterministic, so the file only changes
when the demo's text or these settings do.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tracewatch.core.demo import TOKENIZER
from tracewatch.core.demo.content import HARNESS_PROMPTS, PROBLEMS, PROVIDER_ERRORS, SANDBOX_CRASH, TOOLS, judge_steps

PATH = TOKENIZER
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Control tokens of the demo's ChatML-like template: never text the model wrote."""
MARKUP = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
"""Added tokens the model writes itself, kept whole as real chat templates keep them."""
VOCABULARY = 1200


def corpus() -> Iterator[str]:
    """Every text the demo can put in a message: prompts, scripts under several seeds,
    tool output, errors."""
    yield from ["system\n", "user\n", "assistant\n", "tool\n"] * 8
    yield from HARNESS_PROMPTS.values()
    for tools in TOOLS.values():
        yield from (tool["description"] for tool in tools)
    yield from (message for _, message in PROVIDER_ERRORS.values())
    yield from SANDBOX_CRASH
    for problems in PROBLEMS.values():
        for problem in problems:
            yield from (problem.prompt, problem.system_prompt)
            for seed in range(8):
                for step in problem.script(random.Random(seed)):
                    yield step.text
                    yield step.reasoning or ""
                    for run in step.runs:
                        yield from (run.json_arguments, run.output)
                    prompt, verdicts = judge_steps(problem, step.text)
                    yield prompt
                    yield from (verdict.text for verdict in verdicts)


def train() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCABULARY,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    tokenizer.add_tokens(MARKUP)
    return tokenizer


if __name__ == "__main__":
    train().save(str(PATH))
    print(f"wrote {PATH}")
