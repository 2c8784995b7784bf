"""What a shape covariate counts, read from its name: the one place that tells an LLM's
output length (generated tokens, fixed by capping `max_tokens`) from an input size.

A name is first normalised (camelCase split, any run of non-alphanumerics made `_`, lower
case), then it is an output length when it ends, at a word boundary, in:

- `<output|completion|generated|generation|gen|new|decode|decoded|response|out>_tokens`
  (also `_token`, `_toks`, an optional `_count`, or without the `_`), or
- `<output|completion|generated|generation|gen|out>_<len|lens|length>`, or
- `tokens_<out|output|generated>`, or `max_tokens` (the cap itself).

That covers what the LLM readers and the recorder write (`output_tokens` from vLLM and
LLMPerf results and from `tailbudget.measure`), the raw names of those tools (vLLM's
`output_lens`, LLMPerf's `number_output_tokens`), OpenTelemetry GenAI attributes
(`gen_ai.usage.output_tokens`, the older `gen_ai.usage.completion_tokens`), OpenAI usage
(`completion_tokens`), `num_output_tokens`, `generated_tokens`, `max_new_tokens`, ...
Everything else (`input_tokens`, `prompt_tokens`, `seq_len`, `context_tokens`,
`total_tokens`, `batch_size`, ...) is an input size: when unsure, the input reading wins,
as it did before output lengths were told apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_TOKENS = r"_?(tokens?|toks)(_count)?"
OUTPUT_LENGTH = re.compile(
    r"(^|_)("
    rf"(output|completion|generated|generation|gen|new|decoded?|response|out){_TOKENS}"
    r"|(output|completion|generated|generation|gen|out)_?(len|lens|length)"
    r"|tokens_(out|output|generated)"
    r"|max_tokens"
    r")$"
)
"""Matched against `normalize(name)`."""


def normalize(name: str) -> str:
    """`gen_ai.usage.outputTokens` -> `gen_ai_usage_output_tokens`."""
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return re.sub(r"[^0-9a-zA-Z]+", "_", snake).strip("_").lower()


def is_output_length(name: str) -> bool:
    """Whether a covariate counts generated (output) tokens rather than an input size."""
    return OUTPUT_LENGTH.search(normalize(name)) is not None


def output_tokens_column(columns: Iterable[str]) -> str | None:
    """The first column counting the tokens each request generated (a `max_*` cap is a
    limit, not a count: it never gives a tokens-per-second rate)."""
    return next(
        (c for c in columns if is_output_length(c) and not normalize(c).startswith("max_")),
        None,
    )
