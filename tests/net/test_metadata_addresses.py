"""Issue 5, item 10d: every well-known cloud metadata / credential address is
refused, also for a job that allows private networks, also in the IPv6 forms
that carry it, also at connect time and as a redirect target."""

from __future__ import annotations

import ipaddress

import pytest

from nexopoll.core import ssrf
from nexopoll.core.ssrf import check_address
from nexopoll.net import http
from tests.support.fakes import ConnectLog, FakeResolver
from tests.support.httpserver import TestHTTPServer, redirect

EXPECTED = [
    "169.254.169.254",  # AWS / GCP / Azure / OpenStack / Oracle / ...
    "fd00:ec2::254",  # AWS IMDS, IPv6
    "169.254.170.2",  # AWS ECS task credentials
    "169.254.170.23",  # AWS EKS Pod Identity agent
    "fd00:ec2::23",  # AWS EKS Pod Identity agent, IPv6
    "169.254.169.123",  # AWS Time Sync
    "fd00:ec2::123",  # AWS Time Sync, IPv6
    "fd20:ce::254",  # GCP, IPv6
    "169.254.169.252",  # GKE metadata server
    "168.63.129.16",  # Azure WireServer (a public address)
    "100.100.100.200",  # Alibaba Cloud
    "169.254.0.23",  # Tencent Cloud
    "192.0.0.192",  # Oracle Cloud Classic
    "169.254.42.42",  # Scaleway
    "fd00:42::42",  # Scaleway, IPv6
    "fe80::a9fe:a9fe",  # OpenStack, IPv6
]


def test_the_list_holds_every_known_address_and_each_has_a_label() -> None:
    assert {ipaddress.ip_address(a) for a in EXPECTED} <= ssrf.METADATA_ADDRESSES
    assert all(label for _, label in ssrf.METADATA_TABLE)


@pytest.mark.parametrize("ip", EXPECTED)
@pytest.mark.parametrize("allow_private", [False, True])
def test_metadata_addresses_are_refused_in_both_modes(ip: str, allow_private: bool) -> None:
    assert check_address(ip, allow_private=allow_private) == "metadata"


@pytest.mark.parametrize(
    ("ip", "form"),
    [
        ("::ffff:169.254.170.23", "IPv4-mapped"),
        ("64:ff9b::a9fe:aa17", "NAT64"),  # 169.254.170.23
        ("2002:a9fe:aa17::1", "6to4"),
        ("::ffff:168.63.129.16", "IPv4-mapped"),
        ("64:ff9b::a9fe:17", "NAT64"),  # 169.254.0.23
        ("fe80::a9fe:a9fe%eth0", None),  # a scope id does not hide it
    ],
)
def test_embedded_and_scoped_forms_are_refused(ip: str, form: str | None) -> None:
    expected = "metadata" if form is None else f"metadata ({form})"
    assert check_address(ip, allow_private=True) == expected


@pytest.mark.parametrize("ip", ["169.254.170.23", "fd00:ec2::23", "168.63.129.16", "169.254.0.23"])
def test_a_name_resolving_to_metadata_is_never_connected(ip: str) -> None:
    resolver = FakeResolver({"creds.example.test": [ip]})
    with ConnectLog() as log, pytest.raises(http.BlockedURLError) as info:
        http.fetch(
            "GET", "http://creds.example.test/v1/credentials", resolver=resolver, allow_private=True
        )
    assert info.value.reason == "metadata" and info.value.ip == ip
    assert log.addresses == []


def test_a_redirect_to_the_pod_identity_agent_is_refused() -> None:
    with TestHTTPServer() as srv:
        srv.route("GET", "/r", redirect("http://169.254.170.23/v1/credentials"))
        with ConnectLog() as log, pytest.raises(http.BlockedURLError) as info:
            http.fetch("GET", srv.url("/r"), allow_private=True)
        assert info.value.reason == "metadata"
        assert log.addresses == [srv.address]


def test_neighbours_of_metadata_addresses_follow_the_private_rule() -> None:
    assert check_address("169.254.170.24", allow_private=True) is None
    assert check_address("169.254.170.24") == "link-local"
    assert check_address("168.63.129.17") is None  # only the WireServer address itself
