"""nsqd v1.3.0's defaults (and nsqlookupd's), named once: sizes in bytes, durations in seconds.

The embedded broker's option defaults, the server state machine's limits and
the client's assumptions (what nsqd allows when IDENTIFY negotiates nothing)
all read these names; ``tests/broker/test_defaults.py`` compares them with
the real nsqd's ``--help`` when ``GNSQLITE_NSQD`` is set. Where nsqd's flag is
a Go duration (``--msg-timeout 1m0s``) the value here is its float seconds.

The last block holds defaults that are not nsqd's flags but client-side
choices that come from the same protocol (the frame ceiling, go-nsq's
``low_rdy_timeout``); each says whose it is. Pure: constants only, no I/O.
"""

from __future__ import annotations

__all__ = [
    "MAX_MSG_SIZE",
    "MAX_BODY_SIZE",
    "MAX_RDY_COUNT",
    "MSG_TIMEOUT",
    "MAX_MSG_TIMEOUT",
    "MAX_REQ_TIMEOUT",
    "CLIENT_TIMEOUT",
    "HEARTBEAT_INTERVAL",
    "MAX_HEARTBEAT_INTERVAL",
    "OUTPUT_BUFFER_SIZE",
    "MAX_OUTPUT_BUFFER_SIZE",
    "OUTPUT_BUFFER_TIMEOUT",
    "MIN_OUTPUT_BUFFER_TIMEOUT",
    "MAX_OUTPUT_BUFFER_TIMEOUT",
    "MAX_DEFLATE_LEVEL",
    "HTTP_CLIENT_CONNECT_TIMEOUT",
    "HTTP_CLIENT_REQUEST_TIMEOUT",
    "INACTIVE_PRODUCER_TIMEOUT",
    "TOMBSTONE_LIFETIME",
    "MAX_FRAME_SIZE",
    "LOW_RDY_TIMEOUT",
]

#: ``--max-msg-size``: the largest message body nsqd accepts (bytes).
MAX_MSG_SIZE = 1024 * 1024
#: ``--max-body-size``: the largest command body, an MPUB's included (bytes).
MAX_BODY_SIZE = 5 * 1024 * 1024
#: ``--max-rdy-count``: the largest RDY nsqd accepts, and what a client
#: assumes when nsqd answers IDENTIFY with a plain ``OK``.
MAX_RDY_COUNT = 2500
#: ``--msg-timeout``: how long a delivered message waits for FIN before it is requeued (s).
MSG_TIMEOUT = 60.0
#: ``--max-msg-timeout``: the largest ``msg_timeout`` a client may ask for in IDENTIFY (s).
MAX_MSG_TIMEOUT = 900.0
#: ``--max-req-timeout``: the longest REQ delay (s).
MAX_REQ_TIMEOUT = 3600.0
#: nsqd's ``ClientTimeout`` (no flag): a client's heartbeat interval is half of it (s).
CLIENT_TIMEOUT = 60.0
#: The heartbeat interval nsqd uses when IDENTIFY asks for none (``ClientTimeout / 2``, s).
HEARTBEAT_INTERVAL = CLIENT_TIMEOUT / 2
#: ``--max-heartbeat-interval``: the longest interval a client may ask for (s).
MAX_HEARTBEAT_INTERVAL = 60.0
#: nsqd's per-client output buffer when IDENTIFY asks for none (bytes, no flag).
OUTPUT_BUFFER_SIZE = 16 * 1024
#: ``--max-output-buffer-size``: the largest output buffer a client may ask for (bytes).
MAX_OUTPUT_BUFFER_SIZE = 64 * 1024
#: ``--output-buffer-timeout``: how long nsqd buffers writes to a client (s).
OUTPUT_BUFFER_TIMEOUT = 0.25
#: ``--min-output-buffer-timeout``: the shortest buffer timeout a client may ask for (s).
MIN_OUTPUT_BUFFER_TIMEOUT = 0.025
#: ``--max-output-buffer-timeout``: the longest buffer timeout a client may ask for (s).
MAX_OUTPUT_BUFFER_TIMEOUT = 30.0
#: ``--max-deflate-level``: the highest deflate level a client may negotiate.
MAX_DEFLATE_LEVEL = 6
#: ``--http-client-connect-timeout``: an auth server or lookupd HTTP connect (s).
HTTP_CLIENT_CONNECT_TIMEOUT = 2.0
#: ``--http-client-request-timeout``: a whole auth server or lookupd HTTP request (s).
HTTP_CLIENT_REQUEST_TIMEOUT = 5.0

# -- nsqlookupd v1.3.0's -----------------------------------------------------

#: nsqlookupd's ``--inactive-producer-timeout``: a producer silent this long is hidden (s).
INACTIVE_PRODUCER_TIMEOUT = 300.0
#: nsqlookupd's ``--tombstone-lifetime``: how long a tombstoned producer stays hidden (s).
TOMBSTONE_LIFETIME = 45.0

# -- client-side choices from the same protocol ------------------------------

#: The client's ceiling for one frame (bytes): above :data:`MAX_MSG_SIZE`,
#: with ample room for an nsqd configured larger. Not an nsqd flag.
MAX_FRAME_SIZE = 16 * 1024 * 1024
#: go-nsq's ``low_rdy_timeout``: the longest a connection holds a rotating RDY (s).
LOW_RDY_TIMEOUT = 30.0
