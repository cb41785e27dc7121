"""The pure address policy (RELIABILITY rows 34, 35, 37 at the address level)."""

from __future__ import annotations

import pytest

from nexopoll.core.ssrf import BlockedAddress, check_address, check_all

BLOCKED = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("fd12:3456::1", "private"),
    ("fec0::1", "private"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("100.64.0.1", "CGNAT"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("0.1.2.3", "this-network"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("192.0.2.10", "documentation"),
    ("198.51.100.1", "documentation"),
    ("203.0.113.7", "documentation"),
    ("2001:db8::1", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"),
    # IPv6 forms that carry an IPv4 address are unpacked.
    ("::ffff:10.0.0.1", "private (IPv4-mapped)"),
    ("::ffff:127.0.0.1", "loopback (IPv4-mapped)"),
    ("::ffff:169.254.169.254", "metadata (IPv4-mapped)"),
    ("::10.0.0.1", "private (IPv4-compatible)"),
    ("::ffff:0:a00:1", "private (IPv4-translated)"),
    ("64:ff9b::a00:1", "private (NAT64)"),
    ("64:ff9b::7f00:1", "loopback (NAT64)"),
    ("64:ff9b::a9fe:a9fe", "metadata (NAT64)"),
    ("64:ff9b:1::a00:1", "NAT64 local-use"),
    ("2002:a00:1::", "private (6to4)"),
    ("2002:7f00:1::1", "loopback (6to4)"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "documentation (Teredo client)"),
    ("not-an-ip", "invalid"),
]

ALLOWED = [
    "93.184.216.34",
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize(("ip", "reason"), BLOCKED)
def test_non_global_addresses_are_refused_with_a_reason(ip: str, reason: str) -> None:
    assert check_address(ip) == reason


@pytest.mark.parametrize("ip", ALLOWED)
def test_global_addresses_pass(ip: str) -> None:
    assert check_address(ip) is None


@pytest.mark.parametrize("ip", ["10.0.0.1", "127.0.0.1", "::1", "fd12::1", "64:ff9b::a00:1"])
def test_allow_private_opts_out_of_private_ranges(ip: str) -> None:
    assert check_address(ip, allow_private=True) is None


@pytest.mark.parametrize(
    "ip", ["169.254.169.254", "fd00:ec2::254", "100.100.100.200", "::ffff:169.254.169.254"]
)
def test_metadata_stays_refused_even_with_allow_private(ip: str) -> None:
    assert check_address(ip, allow_private=True) is not None
    assert "metadata" in (check_address(ip, allow_private=True) or "")


def test_check_all_requires_every_address_to_pass() -> None:
    check_all("ok.test", ["8.8.8.8", "1.1.1.1"])
    with pytest.raises(BlockedAddress) as info:
        check_all("mixed.test", ["8.8.8.8", "10.0.0.1"])
    assert (info.value.host, info.value.ip, info.value.reason) == (
        "mixed.test",
        "10.0.0.1",
        "private",
    )
