"""Connection-level machinery under :func:`nexopoll.net.http.fetch`.

Two things happen here, below requests and urllib3's public surface:

* **SSRF guard at connect time.** :class:`GuardedAdapter` mounts a urllib3 pool
  manager whose connections override ``_new_conn``: the host is resolved once
  (through an injectable resolver), every resolved address must pass
  :func:`nexopoll.core.ssrf.check_address`, and the socket connects to exactly
  the addresses that were checked. There is no second lookup, so DNS rebinding
  cannot swap the address between check and connect. Host header, TLS SNI and
  certificate verification still use the host name, because only the socket's
  destination changes.
* **A total deadline on every read.** Responses read through
  :class:`_DeadlineFile`, which waits for readability in short slices and checks
  the current :class:`ReadBudget` (deadline + cancel token) before every
  ``recv``. ``http.client`` reads headers line by line and ``read(amt)`` blocks
  until ``amt`` bytes arrive, so a per-``recv`` socket timeout alone never stops
  a server that drips one byte every 0.3 s.

The budget travels in a :class:`contextvars.ContextVar` because requests offers
no way to hand per-call state to a pooled connection; ``fetch`` sets it around
each call, in the calling thread.
"""

from __future__ import annotations

import contextvars
import http.client
import http.cookiejar
import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.poolmanager import PoolManager
from urllib3.util.connection import allowed_gai_family
from urllib3.util.wait import wait_for_read

import nexopoll.net.options as options
from nexopoll.core.ssrf import BlockedAddress, check_address

Resolver = Callable[..., list[tuple[Any, ...]]]
"""Same signature and result as :func:`socket.getaddrinfo`."""

_POLL_SLICE = 0.25  # seconds between budget checks while a socket is idle
_RECV_BYTES = 65536


class ReadBudget(Protocol):
    """What the connection layer needs from a fetch: time left, and when to stop."""

    def remaining(self) -> float:
        """Seconds left (may be negative), without raising."""
        ...

    def check(self) -> float:
        """Return seconds left; raise if the deadline passed or the call was cancelled."""
        ...


current_budget: contextvars.ContextVar[ReadBudget | None] = contextvars.ContextVar(
    "nexopoll_read_budget", default=None
)

HostGate = Callable[[str, ReadBudget], AbstractContextManager[Any]]
"""``gate(host, budget)``: a context held around each request to ``host`` (its turn
under a per-host cap); it waits while the host is busy, within ``budget``."""

host_gate: contextvars.ContextVar[HostGate | None] = contextvars.ContextVar(
    "nexopoll_host_gate", default=None
)


@dataclass(frozen=True)
class Guard:
    """The connect-time policy of one session.

    Attributes:
        resolver: ``getaddrinfo``-compatible; called exactly once per new connection.
        allow_private: the job opted into private networks (metadata stays refused).
        allow_addresses: exact ``(ip, port)`` destinations exempt from the check.
            Tests use it to reach their loopback fixtures on one port while every
            other loopback port, and every private address, stays refused. Not
            reachable from job config.
    """

    resolver: Resolver = socket.getaddrinfo
    allow_private: bool = False
    allow_addresses: frozenset[tuple[str, int]] = field(default_factory=frozenset)

    def resolve(self, host: str, port: int) -> list[tuple[Any, ...]]:
        """Resolve ``host`` once and return its addresses if all of them pass.

        Raises:
            BlockedAddress: some resolved address is not allowed (nothing was connected).
            socket.gaierror: the name did not resolve.
        """
        infos = list(self.resolver(host, port, allowed_gai_family(), socket.SOCK_STREAM))
        if not infos:
            raise socket.gaierror(socket.EAI_NONAME, "no addresses")
        for info in infos:
            ip = info[4][0]
            if (_canonical(ip), port) in self.allow_addresses:
                continue
            reason = check_address(ip, allow_private=self.allow_private)
            if reason is not None:
                raise BlockedAddress(host, ip, reason)
        return infos


def _canonical(ip: str) -> str:
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        return ip


class _DeadlineFile:
    """A buffered, read-only view of a socket that honours the current budget.

    Implements the subset of :class:`io.BufferedReader` that ``http.client``
    uses, with the same blocking semantics (``read(n)`` fills unless EOF,
    ``read1`` does at most one ``recv``), but each ``recv`` is preceded by a
    budget check, so no call outlives the deadline by more than a poll slice.
    """

    def __init__(self, sock: socket.socket, inner: Any, budget: ReadBudget) -> None:
        self._sock = sock
        self._inner = inner  # the makefile() object: keeps the fd's io refcount
        self._budget = budget
        self._buf = bytearray()
        self._eof = False

    def _fill(self) -> bool:
        if self._eof:
            return False
        pending = getattr(self._sock, "pending", None)
        while not (pending and pending()):
            if wait_for_read(self._sock, timeout=min(self._budget.check(), _POLL_SLICE)):
                break
        self._sock.settimeout(max(self._budget.check(), 0.01))
        data = self._sock.recv(_RECV_BYTES)
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    def _take(self, n: int) -> bytes:
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def readline(self, limit: int = -1) -> bytes:
        start = 0
        while True:
            nl = self._buf.find(b"\n", start)
            if nl >= 0:
                end = nl + 1
                break
            start = len(self._buf)
            if 0 <= limit <= len(self._buf) or not self._fill():
                end = len(self._buf)
                break
        return self._take(end if limit < 0 else min(end, limit))

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            while self._fill():
                pass
            return self._take(len(self._buf))
        while len(self._buf) < n and self._fill():
            pass
        return self._take(n)

    def read1(self, n: int = -1) -> bytes:
        if n == 0:  # http.client asks for 0 bytes once a Content-Length body is done
            return b""
        if not self._buf:
            self._fill()
        return self._take(len(self._buf) if n < 0 else n)

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def peek(self, n: int = 0) -> bytes:
        if not self._buf:
            self._fill()
        return bytes(self._buf)

    def fileno(self) -> int:
        return int(self._sock.fileno())

    def flush(self) -> None:
        pass

    @property
    def closed(self) -> bool:
        return bool(self._inner.closed)

    def close(self) -> None:
        self._inner.close()


class _DeadlineHTTPResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        budget = current_budget.get()
        if budget is not None:
            self.fp = _DeadlineFile(sock, self.fp, budget)


class _GuardedMixin:
    """``_new_conn`` that resolves once, checks every address, and connects to it."""

    host: str
    port: int
    timeout: float | None
    source_address: tuple[str, int] | None
    socket_options: Any
    _dns_host: str
    response_class = _DeadlineHTTPResponse

    def __init__(self, *args: Any, guard: Guard, **kwargs: Any) -> None:
        self._guard = guard
        super().__init__(*args, **kwargs)

    def _new_conn(self) -> socket.socket:
        timeout = self.timeout
        budget = current_budget.get()
        if budget is not None:
            left = budget.check()
            timeout = left if timeout is None else min(timeout, left)
        try:
            infos = self._guard.resolve(self._dns_host, self.port)
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc
        last: OSError | None = None
        for family, socktype, proto, _, sockaddr in infos:
            sock = socket.socket(family, socktype, proto)
            try:
                for opt in self.socket_options or ():
                    sock.setsockopt(*opt)
                sock.settimeout(timeout)
                if self.source_address:
                    sock.bind(self.source_address)
                sock.connect(sockaddr)
            except TimeoutError as exc:
                sock.close()
                raise ConnectTimeoutError(
                    self, f"connect to {self.host} timed out ({timeout} s)"
                ) from exc
            except OSError as exc:
                sock.close()
                last = exc
                continue
            sys.audit("http.client.connect", self, self.host, self.port)
            return sock
        raise NewConnectionError(self, f"failed to connect: {last}") from last


class _GuardedHTTPConnection(_GuardedMixin, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedMixin, HTTPSConnection):
    pass


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


class _GuardedPoolManager(PoolManager):
    def __init__(self, guard: Guard, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._guard = guard
        self.pool_classes_by_scheme = {"http": _GuardedHTTPPool, "https": _GuardedHTTPSPool}

    def _new_pool(self, scheme: str, host: str, port: int, request_context: Any = None) -> Any:
        pool = super()._new_pool(scheme, host, port, request_context)
        # Not a pool-key field: passed straight to every connection of this pool.
        pool.conn_kw["guard"] = self._guard
        return pool


class GuardedAdapter(HTTPAdapter):
    """A requests transport adapter whose every connection goes through ``guard``."""

    def __init__(self, guard: Guard, **kwargs: Any) -> None:
        self.guard = guard
        super().__init__(**kwargs)

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        self._pool_connections = connections
        self._pool_maxsize = maxsize
        self._pool_block = block
        self.poolmanager = _GuardedPoolManager(
            self.guard, num_pools=connections, maxsize=maxsize, block=block, **pool_kwargs
        )

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        raise requests.exceptions.InvalidProxyURL("proxies bypass the SSRF guard; refused")


def new_session(guard: Guard) -> requests.Session:
    """A Session that ignores the environment, keeps no cookies and uses ``guard``."""
    session = requests.Session()
    session.trust_env = False  # no HTTP(S)_PROXY / NO_PROXY, no .netrc, no REQUESTS_CA_BUNDLE
    session.cookies.set_policy(_NO_COOKIES)
    session.headers["User-Agent"] = "nexopoll/0.1"
    session.headers["Accept-Encoding"] = "gzip, deflate"
    for prefix in list(session.adapters):
        session.adapters.pop(prefix).close()
    # Shared by every thread of a worker (-P threads): urllib3's pools are thread-safe;
    # keep as many idle connections per host as threads may have in flight, for many hosts
    # (NEXOPOLL_HTTP_POOL_HOSTS / _PER_HOST, given by the settings when the session is made).
    opts = options.current()
    adapter = GuardedAdapter(
        guard, pool_connections=opts.pool_hosts, pool_maxsize=opts.pool_per_host
    )
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """Stores and returns nothing: jobs sharing a pooled Session must not share cookies."""

    def set_ok(self, cookie: Any, request: Any) -> bool:
        return False

    def return_ok(self, cookie: Any, request: Any) -> bool:
        return False


_NO_COOKIES = _NoCookies()
_shared: dict[bool, requests.Session] = {}
_shared_lock = threading.Lock()


def shared_session(allow_private: bool) -> requests.Session:
    """The process-wide pooled Session for one mode (guarded, or private allowed).

    The two modes never share a pool, so a connection opened for a job that
    allows private networks is never reused by a guarded fetch.
    """
    with _shared_lock:
        session = _shared.get(allow_private)
        if session is None:
            session = _shared[allow_private] = new_session(Guard(allow_private=allow_private))
        return session


def session_for(
    *,
    allow_private: bool,
    resolver: Resolver | None,
    allow_addresses: Collection[tuple[str, int]],
) -> tuple[requests.Session, bool]:
    """Return ``(session, is_private_to_call)``; the caller closes private ones."""
    if resolver is None and not allow_addresses:
        return shared_session(allow_private), False
    guard = Guard(
        resolver=resolver or socket.getaddrinfo,
        allow_private=allow_private,
        allow_addresses=frozenset((_canonical(ip), int(port)) for ip, port in allow_addresses),
    )
    return new_session(guard), True


# A forked child (Celery prefork) must not reuse the parent's pooled sockets.
os.register_at_fork(after_in_child=_shared.clear)
