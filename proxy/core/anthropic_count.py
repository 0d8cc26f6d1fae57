"""What the Messages API's content blocks cost, for a counter that must err high.

No tokenizer for Claude models is public, so a Messages request is counted with the proxy's
approximate counter and calibrated against each response's usage
(`proxy.core.anthropic_usage`). Text is the counter's business; this module prices what is
not text: images, documents, thinking and every other block, reached through `BLOCK` parts
(`proxy.core.anthropic` wraps each non-text block in one, and `proxy.core.tokens` hands the
block to `block_tokens`).

Where the provider's rule is unknown the price errs high, as the counter does: an
underestimate sends a request that overflows; an overestimate compacts a little early, and
calibration corrects a steady bias. Sources:

- images: Anthropic's vision guide, tokens = width x height / 750 after the image is scaled
  down to fit the model's limits. The limits here are the high-resolution models' (Opus 4.7:
  a long edge of 2576 px, 3.75 megapixels), the largest, so an image never counts below what
  any current model charges; an image of unknown size (a URL, a file id, a format whose
  header is not read here) costs the most any image can (`IMAGE_MAX_TOKENS`);
- PDFs: the PDF guide, "1,500-3,000 tokens per page" of text plus each page as an image;
  the page count is read from the file's page objects;
- redacted thinking: its `data` is ciphertext in base64, priced as a Responses reasoning
  item's `encrypted_content` is (`proxy.core.tokens.ENCRYPTED_CHARS_PER_TOKEN`);
- a thinking block costs its text (the signature is no input to the model);
- anything else (tool blocks of the provider's own tools, search results, blocks newer than
  this module) costs its compact JSON, as the counter prices an unknown part.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

BLOCK: Final = "anthropic_block"
"""The chat content part type wrapping a Messages content block: `{"type": BLOCK, "block": b}`."""

IMAGE_PIXELS_PER_TOKEN: Final = 750
IMAGE_MAX_EDGE: Final = 2576
IMAGE_MAX_PIXELS: Final = 3_750_000
IMAGE_MAX_TOKENS: Final = math.ceil(IMAGE_MAX_PIXELS / IMAGE_PIXELS_PER_TOKEN)
"""The most one image can cost: an image of unknown size is priced at this."""

PDF_PAGE_TOKENS: Final = 3_000 + 1_600
"""One PDF page: the high end of its text (3,000) and its page image (about 1,600 tokens
for a page rendered within the standard 1.15 megapixels)."""
DOCUMENT_TOKENS: Final = PDF_PAGE_TOKENS
"""A document the proxy cannot see into (a URL, a file id): one page's worth. Longer ones
cost more; calibration and the overflow retry correct what this misses."""
REDACTED_CHARS_PER_TOKEN: Final = 16 / 3

# Enough base64 to reach a JPEG's frame header behind an EXIF block (48 KiB decoded).
_HEADER_CHARS: Final = 64 * 1024
_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (C0-CF but DHT C4, JPG C8, DAC CC): they state the size.
_SOF: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers that stand alone, with no length after them: TEM, RST0-7, SOI.
_STANDALONE: Final = frozenset({0x01, *range(0xD0, 0xD9)})
_PDF_PAGE: Final = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")
_PDF_COUNT: Final = re.compile(rb"/Count\s+(\d{1,7})")
# A PDF whose page objects sit in compressed object streams shows none: its size says
# something, at about this many bytes per page of a text PDF.
_PDF_BYTES_PER_PAGE: Final = 50_000

Value = Callable[[object], int]
"""The counter's price of a string or a JSON value (`TokenCounter._value`)."""


def block_tokens(block: object, value: Value) -> int:
    """What one Messages content block costs (text blocks are the counter's own)."""
    if not isinstance(block, Mapping):
        return value(block)
    kind = block.get("type")
    if kind == "image":
        return image_block_tokens(block)
    if kind == "document":
        return document_tokens(block, value)
    if kind == "thinking":
        return value(block.get("thinking"))
    if kind == "redacted_thinking" and isinstance(block.get("data"), str):
        return math.ceil(len(block["data"]) / REDACTED_CHARS_PER_TOKEN)
    if kind == "text":
        return value(block.get("text"))
    return value(dict(block))


def image_block_tokens(block: Mapping[str, Any]) -> int:
    """An image block: its size read from a base64 PNG's or JPEG's header, else the most."""
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        data = source.get("data")
        size = image_size(data) if isinstance(data, str) else None
        if size is not None:
            return image_tokens(*size)
    return IMAGE_MAX_TOKENS


def image_tokens(width: int, height: int) -> int:
    """Tokens of a `width` x `height` image, scaled down first to the largest limits."""
    scale = min(1.0, IMAGE_MAX_EDGE / max(width, height))
    scale = min(scale, math.sqrt(IMAGE_MAX_PIXELS / (width * height)))
    pixels = (width * scale) * (height * scale)
    # Rounded first: a scaled size's float error must not cost a token more than the cap.
    return max(1, math.ceil(round(pixels / IMAGE_PIXELS_PER_TOKEN, 6)))


def image_size(data: str) -> tuple[int, int] | None:
    """(width, height) of a base64 PNG or JPEG, from its header; None for anything else."""
    head = data[: _HEADER_CHARS - _HEADER_CHARS % 4]
    try:
        raw = base64.b64decode(head[: len(head) - len(head) % 4], validate=True)
    except (binascii.Error, ValueError):  # ValueError: non-ASCII text
        return None
    size = _png_size(raw) if raw.startswith(_PNG_SIGNATURE) else _jpeg_size(raw)
    return size if size is not None and size[0] > 0 and size[1] > 0 else None


def _png_size(raw: bytes) -> tuple[int, int] | None:
    if len(raw) < 24 or raw[12:16] != b"IHDR":
        return None
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


def _jpeg_size(raw: bytes) -> tuple[int, int] | None:
    """Walk a JPEG's marker segments to its start-of-frame, which states its size."""
    if not raw.startswith(b"\xff\xd8"):
        return None
    index = 2
    while index + 4 <= len(raw) and raw[index] == 0xFF:
        marker = raw[index + 1]
        if marker == 0xFF or marker in _STANDALONE:  # fill byte, or no length follows
            index += 1 if marker == 0xFF else 2
            continue
        if marker in _SOF:
            if index + 9 > len(raw):
                return None
            height = int.from_bytes(raw[index + 5 : index + 7], "big")
            return int.from_bytes(raw[index + 7 : index + 9], "big"), height
        index += 2 + int.from_bytes(raw[index + 2 : index + 4], "big")
    return None


def document_tokens(block: Mapping[str, Any], value: Value) -> int:
    """A document block: a PDF by its pages, text by its text, content by its blocks."""
    source = block.get("source")
    extra = value(block.get("title")) + value(block.get("context"))
    if not isinstance(source, Mapping):
        return DOCUMENT_TOKENS + extra
    kind = source.get("type")
    data = source.get("data")
    if kind == "base64" and isinstance(data, str):
        return pdf_pages(data) * PDF_PAGE_TOKENS + extra
    if kind == "text":
        return value(data) + extra
    content = source.get("content")
    if kind == "content" and isinstance(content, list):
        return sum(block_tokens(item, value) for item in content) + extra
    if kind == "content":
        return value(content) + extra
    return DOCUMENT_TOKENS + extra


def pdf_pages(data: str) -> int:
    """How many pages a base64 PDF has: its page objects, or its page tree's count, or (for
    a PDF that compresses them out of sight) its size; at least one."""
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return 1
    objects = len(_PDF_PAGE.findall(raw))
    counted = max((int(found) for found in _PDF_COUNT.findall(raw)), default=0)
    if objects or counted:
        return max(objects, counted)
    return max(1, math.ceil(len(raw) / _PDF_BYTES_PER_PAGE))
