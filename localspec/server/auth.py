"""Who may call the server: an API key (compared in constant time) and, on a loopback
address, only Host headers that name this machine (a web page's DNS rebinding trick
reaches 127.0.0.1 under a foreign name)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_allowed(header: str | None) -> bool:
    """A Host header (any port) naming localhost, 127.0.0.1 or [::1]."""
    if not header:
        return False
    host = header.strip().lower()
    if host.startswith("["):
        name = host[: host.find("]") + 1] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name in LOCAL_NAMES


def matching_key(keys: tuple[str, ...], authorization: str | None, x_api_key: str | None) -> str | None:
    """Which of ``keys`` the request sends (``Authorization: Bearer KEY`` or ``x-api-key:
    KEY``), each compared in constant time; None for none."""
    given = ""
    if authorization and authorization[:7].lower() == "bearer ":
        given = authorization[7:].strip()
    elif x_api_key:
        given = x_api_key.strip()
    found = None
    for key in keys:  # every key compared: the time does not tell which one matched
        if given and hmac.compare_digest(given.encode(), key.encode()):
            found = key
    return found


def key_id(key: str) -> str:
    """A stable name for an API key that does not reveal it: whose earlier requests a
    request may draft from (the engine's store is kept per key)."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]
