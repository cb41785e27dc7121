"""Which URL spellings :func:`nexopoll.net.http.fetch` accepts, and what their origin is.

Two parsers read every URL here: :func:`urllib.parse.urlsplit` and urllib3's
:func:`~urllib3.util.parse_url`, which is what requests uses to pick the host it
connects to. They disagree on spellings such as ``http://b.test\\@a.test/``
(``urlsplit`` reads host ``a.test``; urllib3 stops the authority at the
backslash and connects to ``b.test``). An origin decided by one parser while the
other makes the connection is how secret headers reach another host, so:

* origins are decided with urllib3's parser, the one that connects;
* a URL is refused when it has whitespace, control characters or a backslash
  anywhere, a non-ASCII or percent-encoded host, a host outside the plain
  ``[A-Za-z0-9._~-]`` alphabet (or a bracketed IPv6 literal without a zone), or
  when the two parsers read its scheme, userinfo, host or port differently;
* a redirect target must not carry userinfo at all; the request URL may carry
  plain userinfo (``user:password@``, RFC 3986 characters only).

Messages never repeat the URL: its path, query or userinfo may hold a secret.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple
from urllib.parse import urljoin, urlsplit

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from nexopoll.core.errors import PermanentError

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_RE = re.compile(r"[A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\]", re.ASCII)
_USERINFO_RE = re.compile(r"(?:[A-Za-z0-9._~!$&'()*+,;=:-]|%[0-9A-Fa-f]{2})*", re.ASCII)


class InvalidURLError(PermanentError):
    """The URL (or a redirect target) is not an http(s) URL we may request."""


class Origin(NamedTuple):
    """``(scheme, host, port)`` as urllib3 reads them: lower case, default port filled in."""

    scheme: str
    host: str
    port: int


def checked_url(url: str, *, what: str = "URL", redirect: bool = False) -> str:
    """Return ``url`` unchanged if it is safe to request, else raise.

    A pure function of its arguments: URLs that passed are remembered (a bounded cache,
    a job polls the same URL every tick); a refused one is checked again each time.

    Args:
        url: an absolute URL (a redirect's ``Location`` already joined to its base).
        what: how the message names the URL (``"URL"``, ``"redirect target"``).
        redirect: the URL came from a server: any userinfo is refused.

    Raises:
        InvalidURLError: naming the rule that refused it, never the URL itself.

    Examples:
        ``http://a.test/x`` → returned; ``http://b.test\\@a.test/`` →
        "contains a backslash"; ``http://%61.test/`` → "percent-encoded host";
        ``http://b\u00fccher.test/`` → "non-ASCII host".
    """

    return _checked(url, what, redirect)


@functools.lru_cache(maxsize=8192)
def _checked(url: str, what: str, redirect: bool) -> str:
    def refuse(why: str) -> InvalidURLError:
        return InvalidURLError(f"{what} refused: {why}")

    _check_chars(url, what)
    try:
        split = urlsplit(url)
        split_port = split.port
    except ValueError:
        raise refuse("it is not a valid URL") from None
    scheme = split.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURLError(f"{what} scheme {scheme[:20]!r} refused: only http and https")
    userinfo, at, hostport = split.netloc.rpartition("@")
    if not split.hostname:
        raise InvalidURLError(f"{what} has no host")
    if not hostport.isascii() or not userinfo.isascii():
        raise refuse("non-ASCII host or userinfo (write an IDNA host as xn--...)")
    host = hostport.rsplit(":", 1)[0] if not hostport.endswith("]") else hostport
    if "%" in host:
        raise refuse("percent-encoded host")
    if not _HOST_RE.fullmatch(host):
        raise refuse("the host has characters outside letters, digits, '.', '-', '_', '~'")
    if at and redirect:
        raise refuse("it carries userinfo (user@)")
    if at and ("@" in userinfo or not _USERINFO_RE.fullmatch(userinfo)):
        raise refuse("odd userinfo (more than one '@' or characters outside RFC 3986)")
    try:
        parsed = parse_url(url)
    except LocationParseError:
        raise refuse("it is not a valid URL") from None
    theirs = (
        (parsed.scheme or "").lower(),
        parsed.auth or "",
        (parsed.host or "").lower().strip("[]"),
        parsed.port or _DEFAULT_PORTS.get((parsed.scheme or "").lower(), 0),
    )
    ours = (scheme, userinfo, split.hostname.lower(), split_port or _DEFAULT_PORTS[scheme])
    if theirs != ours:
        raise refuse("URL parsers disagree about its host, port or userinfo")
    return url


def join_redirect(base: str, location: str, *, what: str = "redirect target") -> str:
    """Resolve a ``Location`` against ``base`` and check the result as a redirect target.

    The raw ``Location`` is checked too: :func:`urllib.parse.urljoin` silently
    drops tabs and line breaks, which would turn ``b.test\\t@a.test`` into userinfo.
    """
    _check_chars(location, what)
    return checked_url(urljoin(base, location), what=what, redirect=True)


def _check_chars(text: str, what: str) -> None:
    if any(ch.isspace() or ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in text):
        raise InvalidURLError(f"{what} refused: it contains whitespace or control characters")
    if "\\" in text:
        raise InvalidURLError(f"{what} refused: it contains a backslash (write it as %5C)")


def origin(url: str) -> Origin:
    """The origin the connection goes to, read by urllib3 (the parser that connects)."""
    parsed = parse_url(url)
    scheme = (parsed.scheme or "").lower()
    port = parsed.port or _DEFAULT_PORTS.get(scheme, 0)
    return Origin(scheme, (parsed.host or "").lower(), port)


def redact(url: str) -> str:
    """``scheme://host[:port]/path``: no userinfo, query or fragment (they may hold secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme.lower()}://{host}{port}{parts.path or '/'}"
