"""What Messages API blocks cost: images by their size, PDFs by their pages, thinking by
its text, and anything else by its JSON."""

from __future__ import annotations

import base64
import math
import struct
import zlib
from typing import Any

import pytest

from proxy.core.anthropic_count import (
    BLOCK,
    DOCUMENT_TOKENS,
    IMAGE_MAX_TOKENS,
    PDF_PAGE_TOKENS,
    block_tokens,
    image_size,
    image_tokens,
    pdf_pages,
)
from proxy.core.tokens import ApproximateEncoder, TokenCounter

COUNTER = TokenCounter(ApproximateEncoder())
value = COUNTER._value


def png(width: int, height: int) -> str:
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    chunk = b"IHDR" + header
    raw = (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )
    return base64.b64encode(raw + b"\x00" * 40).decode()


def jpeg(width: int, height: int, *, before: bytes = b"") -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    sof = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, height, width) + b"\x00" * 10
    return base64.b64encode(b"\xff\xd8" + before + app0 + sof + b"\xff\xd9").decode()


def image_block(data: str, media: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((1000, 1000), math.ceil(1_000_000 / 750)),
        ((200, 200), math.ceil(40_000 / 750)),
        ((1, 1), 1),
        ((5152, 100), math.ceil(2576 * 50 / 750)),  # the long edge scaled to 2576
        ((4000, 4000), 5000),  # scaled to 3.75 megapixels
    ],
)
def test_an_image_costs_its_pixels_over_750_within_the_largest_limits(
    size: tuple[int, int], tokens: int
) -> None:
    assert image_tokens(*size) == tokens
    assert image_tokens(*size) <= IMAGE_MAX_TOKENS


def test_image_sizes_are_read_from_png_and_jpeg_headers() -> None:
    assert image_size(png(1280, 800)) == (1280, 800)
    assert image_size(jpeg(640, 480)) == (640, 480)
    # Fill bytes and markers with no length before the frame header.
    assert image_size(jpeg(64, 48, before=b"\xff\xff\xd0")) == (64, 48)
    assert block_tokens(image_block(png(1280, 800)), value) == image_tokens(1280, 800)


@pytest.mark.parametrize(
    "data",
    [
        "not base64!",
        "ébc=",
        base64.b64encode(b"GIF89a" + b"\x00" * 20).decode(),
        png(0, 10),
        base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 30).decode(),  # no IHDR
        base64.b64encode(b"\x89PNG\r\n\x1a\n").decode(),  # too short
        base64.b64encode(b"\xff\xd8\xff\xc0\x00\x11").decode(),  # frame header cut short
        base64.b64encode(b"\xff\xd8\x00\x00\x00\x00").decode(),  # no marker where one must be
        base64.b64encode(b"\xff\xd8\xff\xe0\x00\x04\x00\x00\xff\xd9").decode(),  # no frame
    ],
)
def test_an_image_whose_size_cannot_be_read_costs_the_most(data: str) -> None:
    assert image_size(data) is None
    assert block_tokens(image_block(data), value) == IMAGE_MAX_TOKENS


@pytest.mark.parametrize(
    "source",
    [{"type": "url", "url": "https://x/a.png"}, {"type": "file", "file_id": "f"}, "odd"],
)
def test_an_image_by_url_or_file_costs_the_most(source: Any) -> None:
    assert block_tokens({"type": "image", "source": source}, value) == IMAGE_MAX_TOKENS
    assert (
        block_tokens({"type": "image", "source": {"type": "base64", "data": 3}}, value)
        == IMAGE_MAX_TOKENS
    )


def pdf(pages: int, *, count: int | None = None) -> str:
    objects = b"".join(b"<< /Type /Page /Parent 2 0 R >>\n" for _ in range(pages))
    tree = b"<< /Type /Pages /Count %d >>\n" % (pages if count is None else count)
    return base64.b64encode(b"%PDF-1.4\n" + tree + objects + b"%%EOF").decode()


def test_a_pdf_costs_its_pages() -> None:
    assert pdf_pages(pdf(3)) == 3
    assert pdf_pages(pdf(0, count=7)) == 7  # page objects compressed, the tree's count seen
    hidden = base64.b64encode(b"%PDF-1.5\n" + b"x" * 120_000).decode()
    assert pdf_pages(hidden) == 3  # nothing seen: its size
    assert pdf_pages("abc") == 1  # not base64: one page
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": pdf(2)},
    }
    assert block_tokens(document, value) == 2 * PDF_PAGE_TOKENS


def test_documents_of_text_or_content_cost_what_they_hold() -> None:
    words = "the quick brown fox " * 20
    plain = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": words},
        "title": "T",
    }
    assert block_tokens(plain, value) == value(words) + value("T")
    content = {
        "type": "content",
        "content": [{"type": "text", "text": words}, {"type": "image", "source": {}}],
    }
    assert (
        block_tokens({"type": "document", "source": content}, value)
        == value(words) + IMAGE_MAX_TOKENS
    )
    odd = {"type": "content", "content": "just words"}
    assert block_tokens({"type": "document", "source": odd}, value) == value("just words")


@pytest.mark.parametrize("source", [{"type": "url", "url": "https://x/a.pdf"}, None])
def test_a_document_the_proxy_cannot_see_costs_a_page(source: Any) -> None:
    assert block_tokens(
        {"type": "document", "source": source, "context": "c"}, value
    ) == DOCUMENT_TOKENS + value("c")


def test_thinking_costs_its_text_and_redacted_thinking_its_ciphertext() -> None:
    thought = {"type": "thinking", "thinking": "let me see " * 30, "signature": "s" * 400}
    assert block_tokens(thought, value) == value(thought["thinking"])
    redacted = {"type": "redacted_thinking", "data": "x" * 160}
    assert block_tokens(redacted, value) == 30
    odd = {"type": "redacted_thinking", "data": None}
    assert block_tokens(odd, value) == value(odd)


def test_other_blocks_cost_their_json() -> None:
    search = {"type": "web_search_tool_result", "tool_use_id": "s", "content": [{"url": "u"}]}
    assert block_tokens(search, value) == value(search)
    assert block_tokens({"type": "text", "text": "hello"}, value) == value("hello")
    assert block_tokens("odd", value) == value("odd")


def test_the_counter_prices_block_parts_by_these_rules() -> None:
    part = {"type": BLOCK, "block": image_block(png(100, 100))}
    message = {"role": "user", "content": [part]}
    bare = {"role": "user", "content": []}
    assert COUNTER.message(message) - COUNTER.message(bare) == image_tokens(100, 100)
