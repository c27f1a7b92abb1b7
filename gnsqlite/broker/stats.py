"""``/stats`` and ``/info`` documents in nsqd v1.x's JSON shape.

Field names and nesting follow nsqd's ``stats.go`` and ``http.go``:
``{"version", "health", "start_time", "topics": [{"topic_name", "channels":
[{"channel_name", ..., "clients": [...]}], ...}], "memory", "producers"}``.
Topics and channels are sorted by name like nsqd sorts them.
"""

from __future__ import annotations

from typing import Any, cast

from .client import ClientSession
from .queues import Channel, Topic
from .state import BrokerState

__all__ = ["stats", "info", "client_stats"]

_NO_LATENCY: dict[str, Any] = {"count": 0, "percentiles": None}
_MEMORY = {
    "heap_objects": 0,
    "heap_idle_bytes": 0,
    "heap_in_use_bytes": 0,
    "heap_released_bytes": 0,
    "gc_pause_usec_100": 0,
    "gc_pause_usec_99": 0,
    "gc_pause_usec_95": 0,
    "next_gc_bytes": 0,
    "gc_total_runs": 0,
}


def client_stats(client: ClientSession, topic: str | None = None) -> dict[str, Any]:
    """One client as nsqd's ``ClientV2Stats``."""
    out: dict[str, Any] = {
        "client_id": client.client_id,
        "hostname": client.hostname,
        "version": "V2",
        "remote_address": client.remote_address,
        "state": client.state,
        "ready_count": client.ready_count,
        "in_flight_count": client.in_flight_count,
        "message_count": client.message_count,
        "finish_count": client.finish_count,
        "requeue_count": client.requeue_count,
        "connect_ts": client.connect_ts,
        "sample_rate": client.sample_rate,
        "deflate": client.deflate,
        "snappy": client.snappy,
        "user_agent": client.user_agent,
    }
    if client.auth is not None:
        out["authed"] = True
        if client.auth.identity:
            out["auth_identity"] = client.auth.identity
        if client.auth.identity_url:
            out["auth_identity_url"] = client.auth.identity_url
    # nsqd v1.2/v1.3's clientV2.Stats breaks out of its loop after the first match, so
    # pub_counts holds at most one entry: the filtered topic's, or else an arbitrary one
    # (Go map order; here the first topic published to)
    pubs = [
        {"topic": name, "count": count}
        for name, count in client.pub_counts.items()
        if topic is None or name == topic
    ][:1]
    if pubs:
        out["pub_counts"] = pubs
    out.update(
        {
            "tls": client.tls,
            "tls_cipher_suite": client.tls_cipher,
            "tls_version": client.tls_version,
            "tls_negotiated_protocol": "",
            "tls_negotiated_protocol_is_mutual": False,
        }
    )
    return out


def _channel(channel: Channel, include_clients: bool, topic: str | None) -> dict[str, Any]:
    subscribers = cast("list[ClientSession]", channel.subscribers)
    # nsqd leaves the slice nil (JSON null) when clients are not asked for
    clients = [client_stats(c, topic) for c in subscribers] if include_clients else None
    return {
        "channel_name": channel.name,
        "depth": len(channel.queue),
        "backend_depth": 0,
        "in_flight_count": len(channel.in_flight),
        "deferred_count": channel.deferred_count,
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(channel.subscribers),
        "clients": clients,
        "paused": channel.paused,
        "e2e_processing_latency": dict(_NO_LATENCY),
    }


def _topic(
    topic: Topic, channel: str | None, include_clients: bool, topic_filter: str | None
) -> dict[str, Any]:
    channels = [
        _channel(c, include_clients, topic_filter)
        for name, c in sorted(topic.channels.items())
        if channel is None or name == channel
    ]
    return {
        "topic_name": topic.name,
        "channels": channels,
        "depth": len(topic.held),
        "backend_depth": 0,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": dict(_NO_LATENCY),
    }


def stats(
    broker: BrokerState,
    topic: str | None = None,
    channel: str | None = None,
    include_clients: bool = True,
    include_mem: bool = True,
) -> dict[str, Any]:
    """The ``/stats?format=json`` document, optionally for one topic/channel.

    Like nsqd's ``GetStats`` (``stats.go``): an unknown ``topic`` gives
    ``"topics": null`` and ``"producers": null``; with ``channel``, topics
    lacking that channel are left out; ``producers`` lists every client that
    has published (whatever ``topic``; only its ``pub_counts`` are filtered)
    and is ``null`` when there is none or clients are not included, as are
    the channels' ``clients``.
    """
    topics: list[dict[str, Any]] | None
    producers: list[dict[str, Any]] | None = None
    if topic is not None and topic not in broker.topics:
        topics = None
    else:
        topics = []
        for name, t in sorted(broker.topics.items()):
            if topic is not None and name != topic:
                continue
            if channel is not None and channel not in t.channels:
                continue
            topics.append(_topic(t, channel, include_clients, topic))
        if include_clients:
            producers = [
                client_stats(c, topic)
                for c in sorted(cast("set[ClientSession]", broker.clients), key=lambda c: c.id)
                if c.pub_counts
            ] or None
    out: dict[str, Any] = {
        "version": broker.version,
        "health": "OK",
        "start_time": broker.start_time,
        "topics": topics,
    }
    if include_mem:
        out["memory"] = dict(_MEMORY)
    out["producers"] = producers
    return out


def info(broker: BrokerState) -> dict[str, Any]:
    """The ``/info`` document (durations in ns, as Go encodes them)."""
    o = broker.options
    return {
        "version": broker.version,
        "broadcast_address": broker.broadcast_address,
        "hostname": broker.hostname,
        "http_port": broker.http_port,
        "tcp_port": broker.tcp_port,
        "start_time": broker.start_time,
        "max_heartbeat_interval": round(o.max_heartbeat_interval * 1e9),
        "max_output_buffer_size": o.max_output_buffer_size,
        "max_output_buffer_timeout": round(o.max_output_buffer_timeout * 1e9),
        "max_deflate_level": o.max_deflate_level,
    }


def stats_text(document: dict[str, Any]) -> str:
    """A plain-text rendering of a stats document (``/stats`` without format=json)."""
    lines = [f"nsqd v{document['version']}", f"start_time {document['start_time']}", ""]
    lines.append(f"Health: {document['health']}")
    lines.append("")
    if not document["topics"]:
        lines.append("NO_TOPICS")
    for t in document["topics"] or ():
        lines.append(
            f"[{t['topic_name']:<20}] depth: {t['depth']:<5} be-depth: {t['backend_depth']:<5}"
            f" msgs: {t['message_count']:<8}"
        )
        for c in t["channels"]:
            lines.append(
                f"    [{c['channel_name']:<20}] depth: {c['depth']:<5}"
                f" be-depth: {c['backend_depth']:<5} inflt: {c['in_flight_count']:<4}"
                f" def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5}"
                f" timeout: {c['timeout_count']:<5} msgs: {c['message_count']:<8}"
            )
            for cl in c["clients"] or ():
                lines.append(
                    f"        [{cl['version']} {cl['client_id']:<20}] state: {cl['state']}"
                    f" inflt: {cl['in_flight_count']:<4} rdy: {cl['ready_count']:<4}"
                    f" fin: {cl['finish_count']:<8} re-q: {cl['requeue_count']:<8}"
                    f" msgs: {cl['message_count']:<8}"
                )
    return "\n".join(lines) + "\n"
