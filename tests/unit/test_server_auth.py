"""The server's pure checks: Host names and API keys."""

from __future__ import annotations

import pytest

from localspec.server.auth import host_allowed, is_loopback, key_id, matching_key


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:8080",
                                  "LOCALHOST:80"])
def test_local_host_names_pass(host):
    assert host_allowed(host)


@pytest.mark.parametrize("host", [None, "", "evil.example.com", "evil.example.com:8080", "localhost.evil.com",
                                  "127.0.0.1.nip.io", "[::2]:80", "10.0.0.1"])
def test_other_host_names_are_refused(host):
    assert not host_allowed(host)


def test_loopback_addresses():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")


def test_api_keys_by_bearer_or_header():
    one = ("k",)
    assert matching_key(one, "Bearer k", None) == matching_key(one, "bearer  k ", None) == matching_key(one, None, "k") == "k"
    assert matching_key(one, "Bearer x", None) is None and matching_key(one, None, None) is None
    assert matching_key(one, "Basic k", None) is None and matching_key(one, "Bearer ", None) is None


def test_the_key_a_request_sends_is_told_among_several():
    keys = ("alpha", "beta")
    assert matching_key(keys, "Bearer beta", None) == "beta" and matching_key(keys, None, "alpha") == "alpha"
    assert matching_key(keys, "Bearer gamma", None) is None and matching_key(keys, None, None) is None
    assert matching_key((), "Bearer alpha", None) is None
    assert key_id("alpha") == key_id("alpha") != key_id("beta") and "alpha" not in key_id("alpha")
