"""A small, strict YAML loader that remembers the line of every value.

Built on PyYAML's event stream (libyaml when available) instead of
``yaml.safe_load`` so that:

- every path into the document (``("pollers", "jobs", 3, "schedule", "cron")``)
  maps to the 1-based line it was written on, for error messages;
- anchors and aliases are refused at the first one seen, so an alias bomb
  ("billion laughs") costs microseconds instead of gigabytes;
- duplicate mapping keys and non-string keys (``on:``, ``1:``, ``<<:``) are
  errors instead of being silently merged or coerced;
- the input size and nesting depth are bounded before any work is done.

Only the YAML core types are produced: ``None``, ``bool``, ``int``, ``float``,
``str``, ``list`` and ``dict``. Timestamps stay strings (``2026-04-26T15:00:00Z``
is returned as written) so callers parse them themselves and values stay
JSON-serialisable. Any other tag (``!!binary``, ``!!set``, ``!custom``) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import ScalarNode

# 100,000 real jobs (about 200-500 bytes each) fit; a file far past that is refused
# before it is parsed (a YAML bomb is refused anyway: no anchors or aliases).
MAX_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64

Path = tuple[str | int, ...]

_T = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_T + n for n in ("str", "int", "float", "bool", "null"))
_SEQ, _MAP, _TIMESTAMP, _VALUE = (_T + n for n in ("seq", "map", "timestamp", "value"))
_NON_SPECIFIC = (None, "!")

try:
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml
    _Loader = yaml.SafeLoader


class YamlSourceError(Exception):
    """The text is not a document this loader accepts; ``line`` is 1-based or None."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass
class SourceDoc:
    """A loaded document: plain Python ``value`` plus the line of every path in it."""

    value: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """Line of ``path``, or of its nearest ancestor that has one (None if none does)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None


def load_yaml(
    text: str | bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> SourceDoc:
    """Load one YAML document strictly, tracking the line of every value.

    Args:
        text: The document; bytes must be UTF-8 (a BOM is allowed).
        max_bytes: Refuse inputs larger than this many (UTF-8) bytes.
        max_depth: Refuse documents nested deeper than this.

    Returns:
        The document; an empty document (only comments or whitespace) has value None.

    Raises:
        YamlSourceError: On anything the loader refuses, never a raw parser error.
    """
    text = _decode_bounded(text, max_bytes)
    loader = _Loader(text)
    try:
        return _Builder(loader, max_depth).build()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        detail = exc.problem or "invalid YAML"
        if exc.context:
            detail = f"{detail} ({exc.context})"
        line = _line(mark)
        if line is not None:
            # libyaml reports an error at end of input one line past the last one.
            line = min(line, text.count("\n") + 1)
        raise YamlSourceError(f"YAML syntax error: {detail}", line) from None
    except yaml.reader.ReaderError as exc:
        raise YamlSourceError(
            f"invalid character in input: {exc.reason}", _line_at(text, exc.position)
        ) from None
    except yaml.YAMLError as exc:
        raise YamlSourceError(f"YAML error: {exc}") from None
    finally:
        loader.dispose()


def _decode_bounded(text: str | bytes, max_bytes: int) -> str:
    too_big = f"file is larger than {max_bytes} bytes"
    if isinstance(text, bytes):
        if len(text) > max_bytes:
            raise YamlSourceError(too_big)
        try:
            return text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise YamlSourceError(
                f"file is not valid UTF-8 (byte offset {exc.start})",
                text.count(b"\n", 0, exc.start) + 1,
            ) from None
    # A character is at least one byte: the cheap check rejects huge strings
    # before paying for an encode.
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise YamlSourceError(too_big)
    return text


def _line(mark: Any) -> int | None:
    return None if mark is None else mark.line + 1


def _line_at(text: str, position: int | None) -> int | None:
    if position is None or position < 0:
        return None
    return text.count("\n", 0, position) + 1


class _Builder:
    """Turns the event stream into plain values and a path -> line map, in one pass."""

    def __init__(self, loader: Any, max_depth: int) -> None:
        self.loader = loader
        self.max_depth = max_depth
        self.lines: dict[Path, int] = {}
        self._tags: dict[tuple[str, Any], str] = {}

    def build(self) -> SourceDoc:
        get = self.loader.get_event
        self._expect(get(), StreamStartEvent)
        event = get()
        if isinstance(event, StreamEndEvent):
            return SourceDoc(None, {})
        self._expect(event, DocumentStartEvent)
        event = get()
        self.lines[()] = event.start_mark.line + 1
        value = self._node(event, (), 0)
        self._expect(get(), DocumentEndEvent)
        event = get()
        if not isinstance(event, StreamEndEvent):
            raise YamlSourceError(
                "expected a single YAML document, found another", _line(event.start_mark)
            )
        return SourceDoc(value, self.lines)

    @staticmethod
    def _expect(event: Event, kind: type[Event]) -> None:
        if not isinstance(event, kind):  # pragma: no cover - the parser guarantees order
            raise YamlSourceError(f"unexpected YAML event {type(event).__name__}")

    def _node(self, event: Event, path: Path, depth: int) -> Any:
        line = event.start_mark.line + 1
        if isinstance(event, AliasEvent) or event.anchor is not None:
            raise YamlSourceError("anchors and aliases are not allowed", line)
        if depth > self.max_depth:
            raise YamlSourceError(f"document is nested deeper than {self.max_depth} levels", line)
        if isinstance(event, ScalarEvent):
            return self._scalar(event, line)
        if isinstance(event, MappingStartEvent):
            self._check_collection_tag(event.tag, _MAP, line)
            return self._mapping(path, depth)
        if isinstance(event, SequenceStartEvent):
            self._check_collection_tag(event.tag, _SEQ, line)
            return self._sequence(path, depth)
        raise YamlSourceError(f"unexpected YAML event {type(event).__name__}", line)

    def _sequence(self, path: Path, depth: int) -> list[Any]:
        get, lines = self.loader.get_event, self.lines
        items: list[Any] = []
        while not isinstance(event := get(), SequenceEndEvent):
            item_path = (*path, len(items))
            lines[item_path] = event.start_mark.line + 1
            items.append(self._node(event, item_path, depth + 1))
        return items

    def _mapping(self, path: Path, depth: int) -> dict[str, Any]:
        get, lines = self.loader.get_event, self.lines
        result: dict[str, Any] = {}
        while not isinstance(event := get(), MappingEndEvent):
            line = event.start_mark.line + 1
            key = self._key(event, line)
            key_path = (*path, key)
            if key in result:
                first = lines.get(key_path)
                raise YamlSourceError(
                    f"duplicate key {key!r} (first defined at line {first})", line
                )
            lines[key_path] = line
            result[key] = self._node(get(), key_path, depth + 1)
        return result

    def _key(self, event: Event, line: int | None) -> str:
        if isinstance(event, AliasEvent) or event.anchor is not None:
            raise YamlSourceError("anchors and aliases are not allowed", line)
        if not isinstance(event, ScalarEvent):
            raise YamlSourceError("mapping keys must be strings, not collections", line)
        tag = self._resolve(event)
        if tag == _T + "merge":
            raise YamlSourceError("merge keys ('<<') are not allowed", line)
        if tag not in (_STR, _TIMESTAMP, _VALUE):
            raise YamlSourceError(
                f"mapping keys must be strings: quote the key {event.value!r}", line
            )
        return str(event.value)

    def _resolve(self, event: ScalarEvent) -> str:
        if event.tag not in _NON_SPECIFIC:
            return str(event.tag)
        # Resolution depends only on (value, implicit); job lists repeat the same
        # scalars (kinds, agents, intervals) thousands of times.
        cache_key = (event.value, event.implicit)
        tag = self._tags.get(cache_key)
        if tag is None:
            tag = str(self.loader.resolve(ScalarNode, event.value, event.implicit))
            if len(self._tags) < 4096:
                self._tags[cache_key] = tag
        return tag

    def _scalar(self, event: ScalarEvent, line: int | None) -> Any:
        tag = self._resolve(event)
        value = event.value
        if tag in (_STR, _TIMESTAMP, _VALUE):
            return value
        if tag == _NULL:
            return None
        try:
            if tag == _BOOL:
                return self.loader.bool_values[value.lower()]
            if tag == _INT:
                return self.loader.construct_yaml_int(ScalarNode(tag, value))
            if tag == _FLOAT:
                return self.loader.construct_yaml_float(ScalarNode(tag, value))
        except (KeyError, ValueError, yaml.YAMLError):
            raise YamlSourceError(f"value is not a valid {tag[len(_T) :]}", line) from None
        raise YamlSourceError(f"unsupported YAML tag {_short(tag)}", line)

    @staticmethod
    def _check_collection_tag(tag: str | None, expected: str, line: int | None) -> None:
        if tag not in _NON_SPECIFIC and tag != expected:
            raise YamlSourceError(f"unsupported YAML tag {_short(tag)}", line)


def _short(tag: str | None) -> str:
    tag = str(tag)
    return "!!" + tag[len(_T) :] if tag.startswith(_T) else tag
