"""Incremental ``Content-Encoding`` decoding under a byte cap (pure, stdlib only).

Every ``decompress`` call asks zlib for at most ``min(STEP, room + 1)`` bytes
and output is yielded piece by piece, so a gzip bomb (300 KiB that inflates to
300 MiB) is refused after producing about ``limit`` bytes, and memory stays
near ``limit`` (what the caller keeps) plus one piece.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

STEP = 256 * 1024
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class BoundedDecoder:
    """Decode a response body chunk by chunk; at most ``limit`` bytes come out.

    Supports ``gzip``/``x-gzip`` (several members), ``deflate`` (zlib-wrapped or
    raw, as servers disagree) and ``identity``, up to two codings stacked.

    Raises:
        BoundedDecoder.TooLarge: the decoded output would exceed ``limit``.
        BoundedDecoder.Invalid: unknown coding or corrupt compressed data.
    """

    class TooLarge(Exception):
        pass

    class Invalid(Exception):
        pass

    def __init__(self, content_encoding: str, limit: int) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) > 2:
            raise self.Invalid("too many stacked Content-Encodings")
        # Codings are listed in the order they were applied: undo them in reverse.
        self._stages = [_Stage(c, limit) for c in reversed(codings)]
        self._limit = limit
        self._passthrough = 0

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Yield the decoded bytes of ``data`` in pieces of at most :data:`STEP` bytes."""
        if not self._stages:
            self._passthrough += len(data)
            if self._passthrough > self._limit:
                raise self.TooLarge()
            yield data
            return
        yield from self._through(0, data)

    def flush(self) -> Iterator[bytes]:
        """Yield what the decoders still hold once the body has ended."""
        for i, stage in enumerate(self._stages):
            for piece in stage.flush():
                yield from self._through(i + 1, piece)

    def _through(self, first: int, data: bytes) -> Iterator[bytes]:
        if first == len(self._stages):
            yield data
            return
        for piece in self._stages[first].feed(data):
            yield from self._through(first + 1, piece)


class _Stage:
    def __init__(self, coding: str, limit: int) -> None:
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise BoundedDecoder.Invalid(f"unsupported Content-Encoding {coding[:20]!r}")
        self._coding = coding
        self._limit = limit
        self._produced = 0
        self._is_gzip = coding != "deflate"
        self._members = 0
        self._done = False
        # deflate: zlib wrapper or raw stream is decided once two bytes are known.
        self._head: bytearray | None = None if self._is_gzip else bytearray()
        self._d = zlib.decompressobj(_GZIP_WBITS) if self._is_gzip else None

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._head is not None:
            self._head += data
            if len(self._head) < 2:
                return
            data, self._head = bytes(self._head), None
            cmf, flg = data[0], data[1]
            is_zlib = cmf & 0x0F == 8 and (cmf << 8 | flg) % 31 == 0
            self._d = zlib.decompressobj(zlib.MAX_WBITS if is_zlib else -zlib.MAX_WBITS)
        while data and not self._done:
            assert self._d is not None
            if self._d.eof:
                if not self._is_gzip:
                    return  # bytes after a complete deflate stream: ignore
                self._members += 1
                self._d = zlib.decompressobj(_GZIP_WBITS)
            try:
                # Never more than STEP bytes per call, and never more than one past the cap.
                piece = self._d.decompress(data, min(STEP, self._limit - self._produced + 1))
            except zlib.error as exc:
                if self._members:  # garbage after a complete gzip member: ignore
                    self._done = True
                    return
                raise BoundedDecoder.Invalid(f"corrupt {self._coding} body") from exc
            yield self._count(piece)
            if self._d.unconsumed_tail:
                data = self._d.unconsumed_tail
            else:
                data = self._d.unused_data if self._d.eof else b""

    def flush(self) -> Iterator[bytes]:
        if self._head:
            raise BoundedDecoder.Invalid(f"truncated {self._coding} body")
        if self._d is not None and not self._done:
            yield self._count(self._d.flush())

    def _count(self, chunk: bytes) -> bytes:
        self._produced += len(chunk)
        if self._produced > self._limit:
            raise BoundedDecoder.TooLarge()
        return chunk
