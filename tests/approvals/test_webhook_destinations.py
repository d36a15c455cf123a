"""The destination guard: webhooks may not reach the gateway's own networks unless the
operator allows the category (loopback, private, link_local); some categories never pass."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from warden.approvals.webhooks import DestinationRefused, check_destination
from warden.errors import ConfigError


def no_dns(*_a: Any, **_k: Any) -> Any:
    raise AssertionError("an IP literal must not be resolved")


def fake_dns(*addresses: str) -> Any:
    def resolve(host: str, port: int, **_kw: Any) -> list[tuple[Any, ...]]:
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ]

    return resolve


ALL = {"loopback", "private", "link_local"}


@pytest.mark.parametrize(
    ("host", "category"),
    [
        ("127.0.0.1", "loopback"),
        ("[::1]", "loopback"),
        ("[::ffff:127.0.0.1]", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("[fc00::1]", "private"),
        ("[fd12:3456::1]", "private"),
        ("[::ffff:10.1.2.3]", "private"),
        ("169.254.169.254", "link_local"),
        ("[fe80::1]", "link_local"),
        ("[64:ff9b::a9fe:a9fe]", "link_local"),
        ("[2002:7f00:1::]", "loopback"),
    ],
)
def test_internal_addresses_need_their_category(host: str, category: str) -> None:
    url = f"http://{host}:8080/hook"
    with pytest.raises(DestinationRefused, match=category):
        check_destination(url, resolver=no_dns)
    others = ALL - {category}
    with pytest.raises(DestinationRefused):
        check_destination(url, others, resolver=no_dns)
    check_destination(url, {category}, resolver=no_dns)


@pytest.mark.parametrize(
    ("host", "category"),
    [
        ("0.0.0.0", "unspecified"),
        ("[::]", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("[ff02::1]", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "reserved"),
        ("[2001:db8::1]", "reserved"),
        ("[::ffff:0.0.0.0]", "unspecified"),
    ],
)
def test_some_addresses_are_never_allowed(host: str, category: str) -> None:
    with pytest.raises(DestinationRefused, match=category):
        check_destination(f"https://{host}/hook", ALL, resolver=no_dns)


@pytest.mark.parametrize("host", ["93.184.216.34", "[2606:2800:220:1:248:1893:25c8:1946]"])
def test_public_literals_pass_without_dns(host: str) -> None:
    check_destination(f"https://{host}/hook", resolver=no_dns)


def test_localhost_resolves_to_loopback() -> None:
    with pytest.raises(DestinationRefused, match="loopback"):
        check_destination("http://localhost:9/hook")
    check_destination("http://localhost:9/hook", {"loopback"})


def test_every_resolved_address_is_judged() -> None:
    resolver = fake_dns("93.184.216.34", "10.0.0.7")
    with pytest.raises(DestinationRefused, match="10.0.0.7"):
        check_destination("https://mixed.example.com/", resolver=resolver)
    check_destination("https://mixed.example.com/", {"private"}, resolver=resolver)
    check_destination("https://pub.example.com/", resolver=fake_dns("93.184.216.34"))


def test_a_name_that_does_not_resolve_is_refused() -> None:
    def fail(*_a: Any, **_k: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(DestinationRefused, match="does not resolve"):
        check_destination("https://nowhere.invalid/", resolver=fail)


@pytest.mark.parametrize(
    "url", ["ftp://93.184.216.34/", "https://u:p@93.184.216.34/", "https:///x", "http://[::1/"]
)
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        check_destination(url, ALL, resolver=no_dns)


def test_refusal_is_a_config_error_with_a_reason() -> None:
    with pytest.raises(ConfigError) as info:
        check_destination("http://127.0.0.1/", resolver=no_dns)
    assert info.value.reason == "webhook_destination_refused"
    assert "allow_networks" in info.value.message
