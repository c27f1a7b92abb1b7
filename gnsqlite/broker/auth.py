"""AUTH for the embedded broker, as nsqd does it.

nsqd asks an auth server ``GET /auth?common_name=&remote_ip=&secret=&tls=``
and reads ``{"ttl": seconds, "identity": ..., "identity_url": ...,
"authorizations": [{"topic": regex, "channels": [regex...], "permissions":
["subscribe", "publish"]}]}``. :func:`query` does that against each address
in turn (or calls an in-process ``auth_policy``), validates the answer like
nsqd, and returns an :class:`AuthState`. :meth:`AuthState.is_allowed`
matches a topic and channel like nsqd (unanchored regex search; publishing
is checked with an empty channel name).
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..http_transport import http_request
from .options import AuthPolicy

__all__ = ["AuthError", "Authorization", "AuthState", "query"]

log = logging.getLogger(__name__)


class AuthError(Exception):
    """The auth server could not be asked, refused, or answered nonsense."""


@dataclass(frozen=True)
class Authorization:
    """One grant: a topic regex, channel regexes and permissions."""

    topic: re.Pattern[str]
    channels: tuple[re.Pattern[str], ...]
    permissions: frozenset[str]

    def is_allowed(self, topic: str, channel: str) -> bool:
        """``True`` when this grant covers ``topic``/``channel`` (``""`` = publish)."""
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions:
            return False
        if not self.topic.search(topic):
            return False
        return any(c.search(channel) for c in self.channels)


@dataclass(frozen=True)
class AuthState:
    """The answer of the auth server; ``expires`` is monotonic seconds."""

    identity: str
    identity_url: str
    authorizations: tuple[Authorization, ...]
    expires: float

    def is_allowed(self, topic: str, channel: str) -> bool:
        """``True`` when any grant covers ``topic``/``channel``."""
        return any(a.is_allowed(topic, channel) for a in self.authorizations)


def _compile(pattern: Any) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise AuthError(f"a regex must be a string, not {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise AuthError(f"unable to compile {pattern!r} {exc}") from exc


def parse_answer(answer: Mapping[str, Any], now: float) -> AuthState:
    """Validate an auth server's JSON answer as nsqd does."""
    grants: list[Authorization] = []
    for item in answer.get("authorizations") or ():
        if not isinstance(item, Mapping):
            raise AuthError(f"an authorization must be an object, not {item!r}")
        permissions = item.get("permissions") or []
        for permission in permissions:
            if permission not in ("subscribe", "publish"):
                raise AuthError(f"unknown permission {permission}")
        grants.append(
            Authorization(
                topic=_compile(item.get("topic", "")),
                channels=tuple(_compile(c) for c in item.get("channels") or ()),
                permissions=frozenset(permissions),
            )
        )
    ttl = answer.get("ttl", 0)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(
        identity=str(answer.get("identity", "")),
        identity_url=str(answer.get("identity_url", "")),
        authorizations=tuple(grants),
        expires=now + ttl,
    )


def query(
    addresses: Sequence[str],
    policy: AuthPolicy | None,
    *,
    remote_ip: str,
    tls: bool,
    secret: str,
    common_name: str = "",
    timeout: float,
    now: float,
    connect_timeout: float | None = None,
) -> AuthState:
    """Ask the auth policy or servers about ``secret``; blocks the calling greenlet.

    Tries the addresses in random order like nsqd and returns the first
    valid answer. Raises :class:`AuthError` when none gives one.
    """
    if policy is not None:
        answer = policy(remote_ip, tls, secret)
        if answer is None:
            raise AuthError("the auth policy refused the secret")
        return parse_answer(answer, now)
    params = {
        "common_name": common_name,
        "remote_ip": remote_ip,
        "secret": secret,
        "tls": "true" if tls else "false",
    }
    errors: list[str] = []
    for address in random.sample(list(addresses), len(addresses)):
        plain = address.split("://", 1)[-1]
        try:
            data = http_request(
                plain, "GET", "/auth", params, timeout=timeout, connect_timeout=connect_timeout
            )
            answer = json.loads(data)
            if not isinstance(answer, Mapping):
                raise AuthError(f"the answer is not a JSON object: {data[:100]!r}")
            return parse_answer(answer, now)
        except Exception as exc:
            log.warning("auth server %s failed: %s", address, exc)
            errors.append(f"{address}: {exc}")
    raise AuthError("; ".join(errors) or "no auth server configured")
