"""The poller toolkit: what every built-in poller kind shares.

- :class:`ConfiguredPoller`: a ``config:`` validated by one pydantic model, with
  pydantic's errors turned into one :class:`ConfigError` that names the field;
- :data:`DeliverTarget`, :data:`HttpURL` and :data:`TemplateStr`: the config
  field types (a ``{channel, to}`` target, an http(s) URL, a message template);
- :class:`SeenRing`: the ids already delivered, oldest first, bounded;
- :class:`CursorCodec`: the versioned JSON cursor (``{"v": N, ...}``).

A new kind uses these instead of writing its own (see docs/pollers.md, "Writing
a poller kind", and ``examples/example_poller.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, Field, ValidationError

from nexopoll.core.config.model import DeliverTargetModel
from nexopoll.core.contract import Poller
from nexopoll.core.errors import ConfigError, PermanentError
from nexopoll.core.templates import TemplateError, check_template
from nexopoll.net.urls import InvalidURLError, checked_url

MAX_ID_CHARS = 200
"""Ids longer than this are remembered by their SHA-256 (``sha256:<hex>``)."""


def config_error(exc: ValidationError) -> ConfigError:
    """The first problem as the error (``path`` = ``config.<field>``), the rest appended."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        path = ".".join(["config", *(str(p) for p in err["loc"])])
        problems.append((path, err["msg"].removeprefix("Value error, ")))
    path, reason = problems[0]
    if len(problems) > 1:
        reason += "; also " + "; ".join(f"{p}: {m}" for p, m in problems[1:])
    return ConfigError(reason, path=path)


class ConfiguredPoller(Poller):
    """A poller whose ``config:`` is one pydantic model, ``config_model``.

    ``validate`` (at load) and ``parse_config`` (at every tick, with ``${VAR}``
    expanded) apply the same model, so what loads is what runs.
    """

    config_model: ClassVar[type[BaseModel]]

    def parse_config(self, raw: dict[str, Any]) -> Any:
        """The typed config. Raises ConfigError naming the first bad field."""
        try:
            return self.config_model.model_validate(raw)
        except ValidationError as exc:
            raise config_error(exc) from None

    def validate(self, config: dict[str, Any]) -> None:
        self.parse_config(config)


def _checked_template(value: str) -> str:
    try:
        check_template(value)
    except TemplateError as exc:
        raise ValueError(str(exc)) from None
    return value


# A message template, checked at load (unknown syntax, non-ASCII indexes…).
TemplateStr = Annotated[str, AfterValidator(_checked_template)]


# The shared ``{channel, to}`` target: sized to the outbox's columns, no control characters.
DeliverTarget = DeliverTargetModel


def _checked_http_url(value: str) -> str:
    # The message never repeats the URL: its query may hold an expanded secret.
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL (feed://, file:// and paths refused)")
    if not rest or rest[0] in "/?#" or any(c.isspace() or ord(c) < 32 for c in value):
        raise ValueError("must be an http(s) URL with a host and no whitespace")
    try:  # the spelling rules fetch applies (one reading by every URL parser)
        checked_url(value)
    except InvalidURLError as exc:
        raise ValueError(str(exc)) from None
    return value


# An http(s) URL a poller fetches, checked at load as :func:`nexopoll.net.http.fetch`
# will check it (the SSRF guard still applies at fetch time).
HttpURL = Annotated[str, Field(max_length=8192), AfterValidator(_checked_http_url)]


def seen_key(ident: str) -> str:
    """How a :class:`SeenRing` stores ``ident``: as is, or hashed when longer than 200."""
    if len(ident) <= MAX_ID_CHARS:
        return ident
    return "sha256:" + hashlib.sha256(ident.encode()).hexdigest()


@dataclass(frozen=True)
class SeenRing:
    """The ids a job already handled, oldest first, at most ``capacity`` (a value).

    Ids are stored by :meth:`key` (long ids hashed). :meth:`remember` appends and
    evicts the oldest entries first, except those in ``keep`` (ids still listed
    upstream: forgetting one would deliver its item again), so the ring may exceed
    ``capacity`` by the kept ones. Every method returns a new ring; ``keys`` (a
    tuple, stored as a JSON list by :meth:`CursorCodec.encode`) is what goes into the
    cursor, and :meth:`CursorCodec.seen` reads it back.

    Examples:
        >>> ring = SeenRing(2).remember(["a", "b", "c"])
        >>> ring.keys, "a" in ring, "c" in ring
        (('b', 'c'), False, True)
        >>> ring.remember(["d"], keep={"b"}).keys
        ('b', 'd')
    """

    capacity: int
    keys: tuple[str, ...] = ()
    _index: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "_index", frozenset(self.keys))

    @staticmethod
    def key(ident: str) -> str:
        return seen_key(ident)

    def __contains__(self, ident: object) -> bool:
        return isinstance(ident, str) and self.key(ident) in self._index

    def __len__(self) -> int:
        return len(self.keys)

    def with_capacity(self, capacity: int) -> SeenRing:
        return SeenRing(capacity, self.keys)

    def remember(self, ids: Iterable[str], *, keep: Iterable[str] = ()) -> SeenRing:
        """``ids`` appended (those not held yet, in order), then trimmed to ``capacity``.

        ``keep`` holds keys (:meth:`key`) never evicted; the oldest others go first.
        """
        ring = list(self.keys)
        held = set(self._index)
        for key in map(self.key, ids):
            if key not in held:
                held.add(key)
                ring.append(key)
        excess = len(ring) - self.capacity
        if excess > 0:
            kept_keys = frozenset(keep)
            trimmed = []
            for key in ring:
                if excess > 0 and key not in kept_keys:
                    excess -= 1
                    continue
                trimmed.append(key)
            ring = trimmed
        return SeenRing(self.capacity, tuple(ring))

    def touch(self, ids: Iterable[str]) -> SeenRing:
        """The held ones of ``ids`` moved to the newest end, in the order given
        (ids listed again are evicted last)."""
        moved = [k for k in dict.fromkeys(map(self.key, ids)) if k in self._index]
        if not moved:
            return self
        rest = [k for k in self.keys if k not in set(moved)]
        return SeenRing(self.capacity, (*rest, *moved))


def covering_capacity(seen_capacity: int, listed: int, held: int, ceiling: int) -> int:
    """A ring size that covers the listing: at least ``seen_capacity`` and the
    ``listed`` count, and not below the ``held`` ids (up to ``max(seen_capacity,
    ceiling)``), so a listing that shrinks for a while does not make the ring forget
    ids it may list again.

    Examples:
        >>> covering_capacity(1000, 1500, 0, 10_000), covering_capacity(1000, 5, 50_000, 10_000)
        (1500, 10000)
    """
    return max(seen_capacity, listed, min(held, max(seen_capacity, ceiling)))


class CursorCodec:
    """A poller kind's cursor as versioned JSON: ``{"v": version, ...fields}``.

    :meth:`decode` gives the fields (without ``v``), or ``None`` for a first run;
    a corrupt cursor or one of an unknown version raises :class:`PermanentError`
    saying to reset the job (the job pauses; a reset re-baselines it). An older
    version is read through ``upgrades[old]`` (a function from that version's
    fields to the next version's). ``unversioned`` is the version a JSON object
    without ``v`` is read as (default: none, it is refused).

    Examples:
        >>> codec = CursorCodec("demo")
        >>> codec.encode({"seen": ["a"]})
        b'{"v":1,"seen":["a"]}'
        >>> codec.decode(b'{"v":1,"seen":["a"]}')
        {'seen': ['a']}
    """

    def __init__(
        self,
        kind: str,
        version: int = 1,
        *,
        upgrades: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        unversioned: int | None = None,
    ) -> None:
        self.kind = kind
        self.version = version
        self.upgrades = dict(upgrades or {})
        self.unversioned = unversioned

    def error(self, problem: str) -> PermanentError:
        """``<kind> cursor <problem>; reset the job`` as the PermanentError to raise."""
        return PermanentError(f"{self.kind} cursor {problem}; reset the job")

    def encode(self, fields: Mapping[str, Any]) -> bytes:
        """``{"v": version, **fields}`` as compact JSON; a :class:`SeenRing` value is
        stored as its list of keys."""
        doc = {
            "v": self.version,
            **{
                k: list(v.keys) if isinstance(v, SeenRing) else v
                for k, v in fields.items()
                if k != "v"
            },
        }
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()

    def decode(self, raw: bytes | None) -> dict[str, Any] | None:
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            raise self.error("is not valid JSON") from None
        if not isinstance(doc, dict):
            raise PermanentError(f"unsupported {self.kind} cursor version None; reset the job")
        version = doc.pop("v", None) if "v" in doc else self.unversioned
        if isinstance(version, bool):  # JSON true is not version 1
            version = repr(version).lower()
        while version != self.version and version in self.upgrades:
            doc = self.upgrades[version](doc)
            version += 1
        if version != self.version:
            raise PermanentError(
                f"unsupported {self.kind} cursor version {version!r}; reset the job"
            )
        return doc

    def seen(self, fields: Mapping[str, Any] | None, capacity: int) -> SeenRing:
        """The :class:`SeenRing` stored under ``seen`` (empty for a first run)."""
        if fields is None:
            return SeenRing(capacity)
        seen = fields.get("seen")
        if not isinstance(seen, list) or not all(isinstance(s, str) for s in seen):
            raise self.error("has no valid 'seen' list")
        return SeenRing(capacity, tuple(seen))
