"""Saving the broker's topics, channels and messages to ``data_path`` and back.

Like nsqd on a clean exit, every non-ephemeral topic and channel is written
with its queued, in-flight and deferred messages (in that order); on the
next start they all come back as queued messages, with their ids,
timestamps and attempt counts. The file is JSON (bodies base64) written to a
temporary name and renamed, so a crash mid-write leaves the old file.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .queues import BrokerMessage, Topic

__all__ = ["FILE_NAME", "ChannelRecord", "TopicRecord", "save", "load"]

FILE_NAME = "gnsqlite-nsqd.json"
_FORMAT = 1


@dataclass
class ChannelRecord:
    """A channel read back from the file."""

    name: str
    paused: bool
    messages: list[BrokerMessage]


@dataclass
class TopicRecord:
    """A topic read back from the file; ``messages`` are the ones it held."""

    name: str
    paused: bool
    messages: list[BrokerMessage]
    channels: list[ChannelRecord]


def _dump(messages: Iterable[BrokerMessage]) -> list[list[Any]]:
    return [
        [m.id.decode("ascii"), m.timestamp, m.attempts, base64.b64encode(m.body).decode("ascii")]
        for m in messages
    ]


def _parse(items: list[list[Any]]) -> list[BrokerMessage]:
    return [
        BrokerMessage(str(i).encode("ascii"), base64.b64decode(b), int(ts), int(att))
        for i, ts, att, b in items
    ]


def save(path: str, topics: Iterable[Topic]) -> None:
    """Write every non-ephemeral topic and channel to ``path`` (atomically)."""
    data = {
        "format": _FORMAT,
        "topics": [
            {
                "name": topic.name,
                "paused": topic.paused,
                "messages": _dump(topic.held),
                "channels": [
                    {
                        "name": channel.name,
                        "paused": channel.paused,
                        "messages": _dump(channel.all_messages()),
                    }
                    for channel in topic.channels.values()
                    if not channel.ephemeral
                ],
            }
            for topic in topics
            if not topic.ephemeral
        ],
    }
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: str) -> list[TopicRecord]:
    """Read what :func:`save` wrote. Raises ``ValueError`` for a file it cannot read."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"{path}: not a gnsqlite broker state file (format {_FORMAT})")
    return [
        TopicRecord(
            name=t["name"],
            paused=bool(t.get("paused")),
            messages=_parse(t.get("messages", [])),
            channels=[
                ChannelRecord(c["name"], bool(c.get("paused")), _parse(c.get("messages", [])))
                for c in t.get("channels", [])
            ],
        )
        for t in data.get("topics", [])
    ]
