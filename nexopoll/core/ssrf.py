"""Which IP addresses a fetch of an untrusted URL may connect to.

Pure policy, no I/O: the network layer (``nexopoll.net``) resolves a host once,
passes every resolved address through :func:`check_address` and connects only to
an address that passed. Because the check runs on what the resolver returned,
odd spellings of an address (``2130706433``, ``0x7f000001``, ``0177.0.0.1``,
``127.1``) are caught like the canonical form.

IPv6 forms that carry an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
IPv4-compatible ``::a.b.c.d``, SIIT ``::ffff:0:a.b.c.d``, NAT64
``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32``) are unpacked and the
embedded IPv4 address is checked too: otherwise a DNS64 or 6to4 path reaches a
private IPv4 network through a "public" IPv6 address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud instance-metadata and credential endpoints: refused even when a job allows
# private networks. 168.63.129.16 is a public address, so it is refused by name here.
METADATA_TABLE: tuple[tuple[str, str], ...] = (
    ("169.254.169.254", "AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean, Hetzner ... IMDS"),
    ("fd00:ec2::254", "AWS IMDS over IPv6"),
    ("169.254.170.2", "AWS ECS task metadata and credentials"),
    ("169.254.170.23", "AWS EKS Pod Identity agent (credentials)"),
    ("fd00:ec2::23", "AWS EKS Pod Identity agent over IPv6"),
    ("169.254.169.123", "AWS Time Sync"),
    ("fd00:ec2::123", "AWS Time Sync over IPv6"),
    ("fd20:ce::254", "GCP metadata server over IPv6"),
    ("169.254.169.252", "GKE metadata server (Workload Identity)"),
    ("168.63.129.16", "Azure WireServer"),
    ("100.100.100.200", "Alibaba Cloud metadata"),
    ("169.254.0.23", "Tencent Cloud metadata"),
    ("192.0.0.192", "Oracle Cloud Classic metadata"),
    ("169.254.42.42", "Scaleway metadata"),
    ("fd00:42::42", "Scaleway metadata over IPv6"),
    ("fe80::a9fe:a9fe", "OpenStack metadata over IPv6"),
)
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a, _ in METADATA_TABLE)

_V4_TABLE: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/32", "unspecified"),
    ("0.0.0.0/8", "this-network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "CGNAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "reserved"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)

_V6_TABLE: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "NAT64 local-use"),
    ("100::/64", "reserved"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("2001:10::/28", "reserved"),
    ("2001:20::/28", "reserved"),
    ("fc00::/7", "private"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "private"),
    ("ff00::/8", "multicast"),
)

_V4_NETS = tuple((ipaddress.IPv4Network(n), r) for n, r in _V4_TABLE)
_V6_NETS = tuple((ipaddress.IPv6Network(n), r) for n, r in _V6_TABLE)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")


class BlockedAddress(Exception):
    """A host resolved to an address a guarded fetch must not connect to.

    A control-flow signal (hence no ``Error`` suffix, STYLE §3.2).

    Raised by the connection layer before any connect attempt; ``nexopoll.net``
    turns it into a ``PermanentError`` for the tick.
    """

    def __init__(self, host: str, ip: str, reason: str) -> None:
        self.host = host
        self.ip = ip
        self.reason = reason
        super().__init__(f"{host!r} resolves to {ip} ({reason}): refused")


def check_address(ip: str, *, allow_private: bool = False) -> str | None:
    """Return None if ``ip`` is globally routable, else a short reason.

    Args:
        ip: a literal IPv4 or IPv6 address as returned by ``getaddrinfo``
            (an IPv6 scope suffix such as ``%eth0`` is accepted).
        allow_private: the job opted into private networks; only the cloud
            metadata addresses (and their embedded IPv6 forms) are refused.

    Returns:
        None when the address may be used, else e.g. ``"loopback"``,
        ``"private"``, ``"metadata"`` or ``"private (NAT64)"``.

    Examples:
        >>> check_address("93.184.216.34") is None
        True
        >>> check_address("10.1.2.3")
        'private'
        >>> check_address("64:ff9b::a00:1")
        'private (NAT64)'
        >>> check_address("10.1.2.3", allow_private=True) is None
        True
    """
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return "invalid"
    return _check(addr, allow_private)


def check_all(host: str, ips: Iterable[str], *, allow_private: bool = False) -> None:
    """Raise :class:`BlockedAddress` unless every address in ``ips`` passes."""
    for ip in ips:
        reason = check_address(ip, allow_private=allow_private)
        if reason is not None:
            raise BlockedAddress(host, ip, reason)


def _check(addr: IPAddress, allow_private: bool) -> str | None:
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id:
        addr = ipaddress.IPv6Address(addr.packed)
    if addr in METADATA_ADDRESSES:
        return "metadata"
    if isinstance(addr, ipaddress.IPv6Address):
        for embedded, form in _embedded_ipv4(addr):
            reason = _check(embedded, allow_private)
            if reason is not None:
                return f"{reason} ({form})"
    if allow_private:
        return None
    nets = _V4_NETS if isinstance(addr, ipaddress.IPv4Address) else _V6_NETS
    for net, reason in nets:
        if addr in net:
            return reason
    if not addr.is_global:
        return "reserved"
    return None


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> list[tuple[ipaddress.IPv4Address, str]]:
    """Every IPv4 address a packet to ``addr`` may end up at, with the form's name."""
    low32 = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr.ipv4_mapped is not None:
        return [(addr.ipv4_mapped, "IPv4-mapped")]
    if addr in _SIIT:
        return [(low32, "IPv4-translated")]
    if addr in _NAT64:
        return [(low32, "NAT64")]
    if addr in _V4_COMPATIBLE and int(addr) > 1:
        return [(low32, "IPv4-compatible")]
    if addr.sixtofour is not None:
        return [(addr.sixtofour, "6to4")]
    if addr.teredo is not None:
        server, client = addr.teredo
        return [(server, "Teredo server"), (client, "Teredo client")]
    return []
