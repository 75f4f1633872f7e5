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

Only where it matters (the band)
    Given the case's ceiling at ingest, a prompt whose size alone proves it far below the ceiling
    is not tokenized: it gets what it would get without a tokenizer file (``reported`` or
    ``estimate``). The proof, for any tokenizer the ``tokenizers`` library loads: take the text's
    UTF-8 bytes ``b`` after the tokenizer's own normaliser (measured, as a normaliser may lengthen
    it: NFKC turns one character into up to 18). Pre-tokenizers only cut, except that Metaspace
    puts its marker (one character, at most 4 bytes) in place of a one-byte space and before the
    first piece, and ByteLevel maps each byte to one character: the model sees at most
    ``4 b + 4`` bytes. Every token it emits covers at least one of them (a merge covers several;
    byte fallback, the worst case, one token per byte; an unknown character is one token), and no
    special token is added: at most ``4 b + 4`` tokens.
    With the template allowance below, a row is decided below the ceiling when
    ``BAND_TOKENS_PER_BYTE * bytes + TEMPLATE_TOKENS_PER_MESSAGE * messages + TEMPLATE_TOKENS_FIXED
    < ceiling``, ``bytes`` being the larger of the text's and its normalised text's. That bound
    also exceeds the estimate's high end and any plausible reported figure, so the row's recorded
    band stays below the ceiling, and the finaliser lets no engine figure replace it (as none
    replaces a tokenizer count): the scan finds the same suspects for the same reasons as when
    every row is counted (one that is a suspect for another reason, the engine's bug signature,
    shows its reported or estimated count). Rows
    above or near the ceiling are always counted: their count is the evidence the suspects list
    shows. Without a numeric ceiling at ingest (``"auto"``, unset) every row is counted. The rows
    left are encoded together with the library's parallel batch encoder. The ingest manifest
    records the decisions (``prompt_tokens_band``), and a scan whose ceiling is not above the
    largest bound of a decided row is refused (:func:`check_band`): it would need those counts.

A reported figure is *implausible* when no tokenizer could produce it from the text: fewer tokens
than bytes / 16 (a ratio no BPE vocabulary reaches on real text), or more than one token per
byte plus a template allowance (no upper bound when the prompt has image, audio or file parts: the
text is then only part of it, and a plausible reported figure, which counted them, comes first; the
placeholder's count there leaves the text's estimate with no upper bound, ``high`` None). The
incident's placeholder, ``prompt_tokens = 1`` on a prompt of
megabytes, fails the first test by orders of magnitude. With no text to test it against (a spend log
written without prompts, a request body cut away), a reported figure is taken as it is, except the
placeholder's own: at most :data:`PLACEHOLDER_TOKENS` tokens is no count (``unknown``), since no chat
request is that short once its template is applied, and the scan lists such a response as one whose
size it cannot tell.
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
#: Tokens per UTF-8 byte (after the tokenizer's normaliser) no tokenizer exceeds: see the module notes.
BAND_TOKENS_PER_BYTE = 4
#: The placeholder's reported size: a figure this small, with no text to check it, is no count.
PLACEHOLDER_TOKENS = 1


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


def plausible(reported: int, text_bytes: int, messages: int = 1, nontext: int = 0) -> bool:
    """Whether a reported prompt token count could belong to a text of ``text_bytes`` bytes.

    With ``nontext`` parts (images, audio, files: no text, any number of tokens) the text is only part
    of the prompt, so only the lower bound holds.
    """
    if reported < 0:
        return False
    low = math.floor(text_bytes / MAX_BYTES_PER_TOKEN)
    return low <= reported and (nontext > 0 or reported <= text_bytes + template_tokens(messages))


def template_tokens(messages: int) -> int:
    """Most tokens a chat template adds to a prompt of ``messages`` messages (the slack of :func:`plausible`)."""
    return TEMPLATE_TOKENS_PER_MESSAGE * max(messages, 1) + TEMPLATE_TOKENS_FIXED


def unchecked_count(reported: int) -> bool:
    """Whether a reported figure with no text to test it against is taken as the prompt's size: any
    but the placeholder's (see the module notes)."""
    return reported > PLACEHOLDER_TOKENS


def refused_from(ceiling: int) -> int:
    """The fewest prompt tokens an engine with a pool of ``ceiling`` tokens refuses (and, with the bug, replaced by the
    placeholder): SGLang refuses an input of at least its ``max_req_input_len``, the pool less one ("exceeds the
    maximum allowed length (681279 tokens)" for a 681,280-token pool; ``validate_input_length`` compares with >=)."""
    return ceiling - 1


def band_bound(text_bytes: int, messages: int) -> int:
    """Most tokens a prompt of ``text_bytes`` bytes (normalised) can be, template included (see the notes)."""
    return BAND_TOKENS_PER_BYTE * text_bytes + TEMPLATE_TOKENS_PER_MESSAGE * max(messages, 1) + TEMPLATE_TOKENS_FIXED


@dataclasses.dataclass
class BandStats:
    """How the rows of a run were counted: exactly, or decided below the ceiling by their size."""

    ceiling: int | None = None
    counted: int = 0
    decided_below: int = 0
    highest_bound: int = 0  # the largest band_bound of a decided row (a lower ceiling would need a recount)

    def add(self, other: BandStats) -> None:
        """Add another run's (or worker's) figures to these."""
        self.counted += other.counted
        self.decided_below += other.decided_below
        self.highest_bound = max(self.highest_bound, other.highest_bound)


class Counter:
    """Counts prompt tokens with a tokenizer file, or decides between reported and estimate.

    With ``ceiling``, rows whose size proves them far below it are not tokenized (see the module
    notes). With ``deferred``, rows to tokenize are left pending (``prompt_tokens`` None, source
    ``tokenizer``) and :meth:`settle` counts a batch of rows at once with the batch encoder.
    """

    def __init__(self, tokenizer: Path | None = None, ceiling: int | None = None, deferred: bool = False) -> None:
        self._tokenizer = load_tokenizer(tokenizer) if tokenizer else None
        self.tokenizer_path = tokenizer
        self.ceiling = ceiling if self._tokenizer is not None else None
        self.deferred = deferred and self._tokenizer is not None
        self.band = BandStats(ceiling=self.ceiling)
        self._normalizer = self._tokenizer.normalizer if self._tokenizer is not None else None

    def _decided_below(self, text: str, text_bytes: int, messages: int) -> bool:
        """Whether the prompt's size proves it below the ceiling (recorded in ``band``)."""
        if self.ceiling is None or band_bound(text_bytes, messages) >= refused_from(self.ceiling):
            return False
        if self._normalizer is not None:
            # A normaliser may lengthen the text (NFKC turns one character into up to 18): bound that too.
            text_bytes = max(text_bytes, len(self._normalizer.normalize_str(text).encode("utf-8", "surrogatepass")))
        bound = band_bound(text_bytes, messages)
        if bound >= refused_from(self.ceiling):
            return False
        self.band.decided_below += 1
        self.band.highest_bound = max(self.band.highest_bound, bound)
        return True

    def count(self, text: str | None, text_bytes: int | None, reported: int | None, truncated: bool, messages: int,
              nontext: int = 0) -> tuple[TokenCount, bool | None]:
        """The trusted count for a prompt and whether the reported figure is plausible.

        ``text_bytes`` is the original prompt's size (for a truncated log text, reconstructed from
        the truncation marker). A truncated text is never tokenized: it is not the whole prompt.
        With ``nontext`` parts (images, audio, files) the text is not the whole prompt either: a
        plausible reported figure, which counted them, comes first; without one the text's count is
        all there is, and is never decided by the band (the parts may hold any number of tokens).
        """
        is_plausible: bool | None = None
        if reported is not None and text_bytes is not None:
            is_plausible = plausible(reported, text_bytes, messages, nontext)
        if nontext and reported is not None and not unchecked_count(reported):
            # The placeholder's count on a prompt with image, audio or file parts: the engine puts it in place of a
            # prompt it counted over its pool, and the parts may hold any number of tokens, so the text tells only
            # the least the prompt holds: the text's estimate with no upper bound (``high`` null), which the scan reads
            # as straddling any ceiling above its low end. Its text-only band hid such a prompt from the scan.
            if text_bytes:
                return dataclasses.replace(estimate(text_bytes), high=None), is_plausible
            return TokenCount(None, "unknown", None, None), is_plausible
        if nontext and reported is not None and is_plausible:
            return TokenCount(reported, "reported", reported, reported), is_plausible
        if (self._tokenizer is not None and text is not None and not truncated
                and (nontext or not (text_bytes is not None and self._decided_below(text, text_bytes, messages)))):
            self.band.counted += 1
            if self.deferred:
                return PENDING, is_plausible
            n = len(self._tokenizer.encode(text, add_special_tokens=False).ids)
            return TokenCount(n, "tokenizer", n, n), is_plausible
        if reported is not None and is_plausible:
            return TokenCount(reported, "reported", reported, reported), is_plausible
        if text_bytes is not None and (text or truncated):
            return estimate(text_bytes), is_plausible
        if reported is not None and text_bytes is None and unchecked_count(reported):
            return TokenCount(reported, "reported", reported, reported), None
        return TokenCount(None, "unknown", None, None), is_plausible

    def settle(self, rows: list[dict[str, Any]]) -> None:
        """Count the pending rows of ``rows`` (exchange rows) in one call of the parallel batch encoder."""
        pending = [r for r in rows if r.get("prompt_tokens_source") == "tokenizer" and r.get("prompt_tokens") is None
                   and r.get("prompt_text") is not None]
        if not pending or self._tokenizer is None:
            return
        # The batch encoder runs on all cores; its offset-free variant (newer libraries) is faster still.
        encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        encodings = encode([r["prompt_text"] for r in pending], add_special_tokens=False)
        for row, enc in zip(pending, encodings):
            n = len(enc.ids)
            row["prompt_tokens"] = row["prompt_tokens_low"] = row["prompt_tokens_high"] = n


def band_decided(source: str | None, text_bytes: int | None, messages: int, truncated: bool | None,
                 ceiling: int | None) -> bool:
    """Whether a row's count was decided by the band (it stands in for the tokenizer's count).

    Such a row is ``reported`` or ``estimate`` although a tokenizer was given; the finaliser keeps it
    as it keeps a tokenizer count, so an engine figure replaces neither (the suspects stay those of
    counting every row). ``ceiling``: the ingest's band ceiling (None: no band). The bound on the
    raw bytes is at most the one the worker used (on the larger of raw and normalised bytes).
    """
    return (ceiling is not None and source in ("reported", "estimate") and text_bytes is not None
            and not truncated and band_bound(text_bytes, messages) < refused_from(ceiling))


def check_band(manifest: dict[str, Any], ceiling: int) -> None:
    """Refuse a scan ceiling that the ingest's band decisions do not cover (see the module notes).

    Rows decided below the ingest's ceiling keep an estimate or a reported count whose band is only
    proven below the highest bound the manifest records; a ceiling at or below that bound could
    miss one of them.
    """
    rows = manifest.get("prompt_tokens_band", {}).get("rows", {})
    if rows.get("decided_below") and rows.get("highest_bound", 0) >= refused_from(ceiling):
        raise ConfigError(
            f"{rows['decided_below']} prompts were not tokenized at ingest because their size proved them below a "
            f"ceiling of {rows.get('ceiling')} tokens; real_ceiling_tokens {ceiling} is not above the largest bound "
            f"of one of them ({rows['highest_bound']} tokens), so they could reach it",
            fix=f"ingest the logs again into a new case with real_ceiling_tokens = {ceiling} in the case file "
                "(or with no ceiling set at ingest: every prompt is then tokenized)")


#: What a deferred counter returns for a row it will count in :meth:`Counter.settle`.
PENDING = TokenCount(None, "tokenizer", None, None)


@lru_cache(maxsize=4)
def load_tokenizer(path: Path) -> Any:
    """Load a ``tokenizers`` JSON file, or raise a ConfigError saying what is wrong."""
    from tokenizers import Tokenizer

    try:
        found = Path(path).is_file()
    except OSError as exc:  # a name too long for the file system
        raise ConfigError(f"tokenizer file cannot be read ({exc.strerror})", file=path,
                          fix="pass the model's tokenizer.json (from its model repository)") from None
    if not found:
        raise ConfigError("tokenizer file not found", file=path, fix="pass the model's tokenizer.json (from its model repository)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception for bad files
        raise ConfigError(f"not a tokenizers JSON file ({exc})", file=path, fix="pass the model's tokenizer.json") from None
