"""Token counts are evidence with a source.

A prompt's trusted ``prompt_tokens`` comes, best first, from:

``tokenizer``
    the model's ``tokenizer.json`` supplied by the team (the ``tokenizers`` library), counted on the
    canonical prompt text; exact up to the chat template's few tokens per message.
``engine``
    the inference engine's own figure for the real input (SGLang's over-limit line names the real
    length; a prefill ``ReqTimeStats`` ``input_len``, or the number of vLLM's logged
    ``prompt_token_ids``, when it is plausible for the text).
``reported``
    the gateway's figure, when it is plausible for the text.
``estimate``
    UTF-8 bytes / 4, with the band ``[bytes / 6, bytes / 2.5]``. The band covers the measured
    ratio of common BPE tokenizers on English prose (4-5 bytes per token), code and JSON
    (2.5-3.5) and CJK text (3 bytes per character, 0.7-1.2 tokens per character).
``unknown``
    no text and no figure.

A reported figure is *implausible* when no tokenizer could produce it from the text: fewer tokens
than bytes / 16 (a ratio no BPE vocabulary reaches on real text), or more than one token per
byte plus a template allowance. The incident's placeholder, ``prompt_tokens = 1`` on a prompt of
megabytes, fails the first test by orders of magnitude.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from forensics.errors import ConfigError

BYTES_PER_TOKEN = 4.0
BAND_LOW_BYTES_PER_TOKEN = 6.0
BAND_HIGH_BYTES_PER_TOKEN = 2.5
MAX_BYTES_PER_TOKEN = 16.0
TEMPLATE_TOKENS_PER_MESSAGE = 16
TEMPLATE_TOKENS_FIXED = 64


@dataclasses.dataclass(frozen=True)
class TokenCount:
    """A trusted prompt token count, its source and error band."""

    tokens: int | None
    source: str
    low: int | None
    high: int | None


def estimate(text_bytes: int) -> TokenCount:
    """Length-based estimate with its documented band."""
    if text_bytes <= 0:
        return TokenCount(0, "estimate", 0, 0)
    return TokenCount(
        int(round(text_bytes / BYTES_PER_TOKEN)),
        "estimate",
        int(math.floor(text_bytes / BAND_LOW_BYTES_PER_TOKEN)),
        int(math.ceil(text_bytes / BAND_HIGH_BYTES_PER_TOKEN)),
    )


def plausible(reported: int, text_bytes: int, messages: int = 1) -> bool:
    """Whether a reported prompt token count could belong to a text of ``text_bytes`` bytes."""
    if reported < 0:
        return False
    low = math.floor(text_bytes / MAX_BYTES_PER_TOKEN)
    high = text_bytes + TEMPLATE_TOKENS_PER_MESSAGE * max(messages, 1) + TEMPLATE_TOKENS_FIXED
    return low <= reported <= high


class Counter:
    """Counts prompt tokens with a tokenizer file, or decides between reported and estimate."""

    def __init__(self, tokenizer: Path | None = None) -> None:
        self._tokenizer = load_tokenizer(tokenizer) if tokenizer else None
        self.tokenizer_path = tokenizer

    def count(self, text: str | None, text_bytes: int | None, reported: int | None, truncated: bool, messages: int) -> tuple[TokenCount, bool | None]:
        """The trusted count for a prompt and whether the reported figure is plausible.

        ``text_bytes`` is the original prompt's size (for a truncated log text, reconstructed from
        the truncation marker). A truncated text is never tokenized: it is not the whole prompt.
        """
        is_plausible: bool | None = None
        if reported is not None and text_bytes is not None:
            is_plausible = plausible(reported, text_bytes, messages)
        if self._tokenizer is not None and text is not None and not truncated:
            n = len(self._tokenizer.encode(text, add_special_tokens=False).ids)
            return TokenCount(n, "tokenizer", n, n), is_plausible
        if reported is not None and is_plausible:
            return TokenCount(reported, "reported", reported, reported), is_plausible
        if text_bytes is not None and (text or truncated):
            return estimate(text_bytes), is_plausible
        if reported is not None and text_bytes is None:
            return TokenCount(reported, "reported", reported, reported), None
        return TokenCount(None, "unknown", None, None), is_plausible


@lru_cache(maxsize=4)
def load_tokenizer(path: Path) -> Any:
    """Load a ``tokenizers`` JSON file, or raise a ConfigError saying what is wrong."""
    from tokenizers import Tokenizer

    if not Path(path).is_file():
        raise ConfigError("tokenizer file not found", file=path, fix="pass the model's tokenizer.json (from its model repository)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception for bad files
        raise ConfigError(f"not a tokenizers JSON file ({exc})", file=path, fix="pass the model's tokenizer.json") from None
