"""The client side of an NSQ connection as a sans-IO state machine.

Bytes in, events out, bytes to send; no sockets, no clocks. The I/O layer
around it is short::

    machine = ClientConnection()
    sock.sendall(machine.start(config.identify_body(client_id, hostname)))
    while True:
        machine.receive_data(sock.recv(65536))
        for event in machine.events():
            ...                       # route messages, answer requests
        sock.sendall(machine.data_to_send())   # NOPs for heartbeats

The handshake order is enforced: magic and IDENTIFY, then the upgrades nsqd
agreed to (TLS, then snappy or deflate), then AUTH when nsqd requires it, and
only then SUB or publishing. A command out of order raises
:class:`~gnsqlite.errors.LocalProtocolError` and nothing is sent.

At an upgrade, :meth:`ClientConnection.events` stops after the
:class:`~.events.Identified` (or previous :class:`~.events.Upgraded`) event;
the caller takes the undecoded bytes with :meth:`take_unprocessed`, wraps its
transport, feeds those bytes back through the new codec, and calls
:meth:`upgrade_started`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final, cast

from ..errors import (
    LocalProtocolError,
    NegotiationError,
    RemoteProtocolError,
    error_from_frame,
)
from . import commands
from .commands import MESSAGE_ID_LENGTH, Body
from .defaults import MAX_FRAME_SIZE, MAX_RDY_COUNT
from .events import (
    Authenticated,
    CloseWait,
    ErrorReceived,
    Event,
    Heartbeat,
    Identified,
    MessageReceived,
    Response,
    Upgraded,
)
from .frames import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    OK,
    FrameDecoder,
    MessageFields,
    WireMessage,
    decode_message,
    encode_frame,
)
from .replies import agreed_upgrades, auth_identity, identify_features
from .states import PUBLISH_STATES, RESPOND_STATES, ClientState

__all__ = ["ClientState", "ClientConnection", "ANSWERED_COMMANDS"]

#: The requests whose answer goes back to the caller (the handshake's and
#: CLS's answers are the machine's own business).
ANSWERED_COMMANDS: Final = frozenset({"SUB", "PUB", "MPUB", "DPUB"})

_NON_FATAL_CODES: Final = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})
_PUBLISH_COMMANDS: Final = ("PUB", "MPUB", "DPUB")
# Final here: the compiled build keeps them in C globals (a plain global is a dict lookup).
_PUBLISH_STATES: Final = PUBLISH_STATES
_RESPOND_STATES: Final = RESPOND_STATES


# Events built without the frozen dataclass's __init__ (which goes through
# object.__setattr__ once per field): one per message or publish on the hot paths.
# Final, as above: the compiled build reads these on every read or publish.
_new: Final = object.__new__
_set_data: Final = vars(Response)["data"].__set__
_set_command: Final = vars(Response)["command"].__set__
_set_waiter: Final = vars(Response)["waiter"].__set__
_set_message: Final = vars(MessageReceived)["message"].__set__
_OK_FRAME: Final = encode_frame(FRAME_TYPE_RESPONSE, OK)  # a whole OK answer, as nsqd frames it
_OK_FRAME_SIZE: Final = len(_OK_FRAME)
# The states the per-read paths test (an enum member is a class attribute: a
# dict lookup for the class and one for the member each time, compiled or not).
_READY: Final = ClientState.READY
_SUBSCRIBED: Final = ClientState.SUBSCRIBED


class _Pending:
    """A request sent and not yet answered: its name, and who wants the answer."""

    __slots__ = ("command", "waiter")

    def __init__(self, command: str, waiter: Any = None) -> None:
        self.command = command
        self.waiter: Any = waiter


class ClientConnection:
    """One client connection's protocol state; see the module docstring.

    It keeps the one queue of requests waiting for nsqd's answer, in the
    order they were sent. The I/O layer attaches a *waiter* (any object) to
    a request whose answer its caller wants (:meth:`await_answer`); the
    :class:`Response` or :class:`ErrorReceived` that answers it carries that
    waiter back, and :meth:`connection_lost` hands back the waiters nsqd
    never answered.

    ``message_class`` (a :class:`~.frames.MessageFields` subclass, such as a
    :class:`~.events.Delivery` subclass) makes each message an event of that
    class rather than a :class:`MessageReceived` (see :class:`~.events.Delivery`);
    ``None``: :class:`MessageReceived`.
    ``bytes`` makes each message its frame's data, undecoded: the
    :data:`~.frames.MESSAGE_HEADER_SIZE`-byte header (timestamp in ns,
    attempts, id; big-endian), then the body. A receiver that decodes many
    messages at once (the Spark taker builds Arrow columns from them) pays
    no Python object per message.
    """

    def __init__(
        self,
        max_frame_size: int = MAX_FRAME_SIZE,
        message_class: type[MessageFields] | type[bytes] | None = None,
    ) -> None:
        # A subclass of bytes would not be the type of its events (they are bytes).
        if (
            message_class is not None
            and message_class is not bytes
            and issubclass(message_class, bytes)
        ):
            raise TypeError(
                f"message_class {message_class.__name__}: bytes itself (each message's"
                " frame data) or a MessageFields subclass"
            )
        self.state = ClientState.INIT
        self.message_class = message_class
        self.features: dict[str, Any] = {}
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: deque[_Pending] = deque()
        self._outbox: list[bytes] = []
        self._requested: dict[str, Any] = {}
        self._upgrades: deque[str] = deque()
        self._auth_required = False
        self.close_wait_received = False

    # -- what IDENTIFY negotiated (nsqd's defaults until then) ---------------

    @property
    def max_rdy_count(self) -> int:
        """The largest RDY nsqd accepts (:data:`.defaults.MAX_RDY_COUNT` if not negotiated)."""
        return int(self.features.get("max_rdy_count", MAX_RDY_COUNT))

    @property
    def msg_timeout(self) -> float:
        """nsqd's message timeout, in seconds (60 if not negotiated)."""
        return float(self.features.get("msg_timeout", 60000)) / 1000.0

    @property
    def max_msg_timeout(self) -> float:
        """How far TOUCH can extend a message, in seconds (nsqd's max_msg_timeout)."""
        return float(self.features.get("max_msg_timeout", 900000)) / 1000.0

    # -- sending -----------------------------------------------------------

    def _require(self, allowed: Iterable[ClientState], command: str) -> None:
        if self.state not in allowed:
            raise LocalProtocolError(f"cannot send {command} in state {self.state.value!r}")

    def start(self, identify: Mapping[str, Any]) -> bytes:
        """The magic and IDENTIFY with ``identify`` as its JSON body."""
        self._require((ClientState.INIT,), "IDENTIFY")
        self._requested = dict(identify)
        self.state = ClientState.IDENTIFYING
        self._pending.append(_Pending("IDENTIFY"))
        return commands.MAGIC_V2 + commands.identify(identify)

    def auth(self, secret: bytes | str) -> bytes:
        """AUTH with ``secret``; only when nsqd said ``auth_required``."""
        if self.state is ClientState.READY and not self._auth_required:
            raise LocalProtocolError("nsqd did not ask for AUTH; a client must not send it")
        self._require((ClientState.AUTH_REQUIRED,), "AUTH")
        self.state = ClientState.AUTHENTICATING
        self._pending.append(_Pending("AUTH"))
        return commands.auth(secret)

    def sub(self, topic: str, channel: str) -> bytes:
        """SUB to ``topic``/``channel``; once per connection."""
        if self.state in (ClientState.SUBSCRIBING, ClientState.SUBSCRIBED):
            raise LocalProtocolError("this connection is already subscribed; SUB is allowed once")
        self._require((ClientState.READY,), "SUB")
        data = commands.sub(topic, channel)
        self.state = ClientState.SUBSCRIBING
        self._pending.append(_Pending("SUB"))
        return data

    def pub(self, topic: str, body: Body) -> bytes:
        """PUB one message; the answer is a :class:`Response` for ``"PUB"``."""
        if self.state not in _PUBLISH_STATES:
            self._require(_PUBLISH_STATES, "PUB")
        data = commands.pub(topic, body)
        self._pending.append(_Pending("PUB"))
        return data

    def mpub(self, topic: str, bodies: Iterable[Body]) -> bytes:
        """MPUB a batch; the answer is a :class:`Response` for ``"MPUB"``."""
        self._require(_PUBLISH_STATES, "MPUB")
        data = commands.mpub(topic, bodies)
        self._pending.append(_Pending("MPUB"))
        return data

    def mpub_encoded(self, topic: str, payload: bytes | memoryview) -> bytes:
        """MPUB a ready body (see :func:`~gnsqlite.protocol.commands.mpub_encoded`)."""
        self._require(_PUBLISH_STATES, "MPUB")
        data = commands.mpub_encoded(topic, payload)
        self._pending.append(_Pending("MPUB"))
        return data

    def publish_encoded(self, command: str, data: bytes, waiter: Any = None) -> bytes:
        """Record a whole ``PUB``/``MPUB``/``DPUB`` built elsewhere and return it.

        ``data`` must be what :func:`~gnsqlite.protocol.commands.pub`,
        :func:`~gnsqlite.protocol.commands.dpub` or
        :func:`~gnsqlite.protocol.commands.mpub_encoded` built (names and
        sizes checked there), and ``command`` its name. The same bytes serve
        any connection, so a producer builds them once per publish rather
        than once per connection tried. ``waiter`` is attached as by
        :meth:`await_answer`.
        """
        if command not in _PUBLISH_COMMANDS:
            raise LocalProtocolError(f"publish_encoded takes PUB, MPUB or DPUB, not {command!r}")
        state = self.state  # READY by identity first: ``in`` compares with == (compiled)
        if state is not _READY and state not in _PUBLISH_STATES:
            self._require(_PUBLISH_STATES, command)
        self._pending.append(_Pending(command, waiter))
        return data

    def dpub(self, topic: str, delay: float, body: Body) -> bytes:
        """DPUB one message deferred by ``delay`` seconds."""
        self._require(_PUBLISH_STATES, "DPUB")
        data = commands.dpub(topic, delay, body)
        self._pending.append(_Pending("DPUB"))
        return data

    def rdy(self, count: int) -> bytes:
        """RDY ``count``; no answer unless it is refused."""
        state = self.state  # SUBSCRIBED by identity first: ``in`` compares with == (compiled)
        if state is not _SUBSCRIBED and state not in _RESPOND_STATES:
            self._require(_RESPOND_STATES, "RDY")
        if type(count) is int and count >= 0:
            return b"RDY %d\n" % count  # a copy of commands.rdy's common case (tested)
        return commands.rdy(count)

    def fin(self, message_id: bytes | str) -> bytes:
        """FIN a message."""
        state = self.state  # SUBSCRIBED by identity first: ``in`` compares with == (compiled)
        if state is not _SUBSCRIBED and state not in _RESPOND_STATES:
            self._require(_RESPOND_STATES, "FIN")
        if type(message_id) is bytes and len(message_id) == MESSAGE_ID_LENGTH:
            return b"FIN %s\n" % message_id  # a copy of commands.fin's common case (tested)
        return commands.fin(message_id)

    def req(self, message_id: bytes | str, delay: float = 0.0) -> bytes:
        """REQ a message, redelivered after ``delay`` seconds."""
        self._require(_RESPOND_STATES, "REQ")
        return commands.req(message_id, delay)

    def touch(self, message_id: bytes | str) -> bytes:
        """TOUCH a message to reset its timeout at nsqd."""
        self._require(_RESPOND_STATES, "TOUCH")
        return commands.touch(message_id)

    def cls(self) -> bytes:
        """CLS: ask nsqd to stop sending; it answers with :class:`CloseWait`."""
        self._require((ClientState.SUBSCRIBED,), "CLS")
        self.state = ClientState.CLOSING
        self._pending.append(_Pending("CLS"))
        return commands.cls()

    def nop(self) -> bytes:
        """NOP, allowed at any point after :meth:`start`."""
        if self.state in (ClientState.INIT, ClientState.CLOSED):
            raise LocalProtocolError(f"cannot send NOP in state {self.state.value!r}")
        return commands.nop()

    def data_to_send(self) -> bytes:
        """Bytes queued by the machine itself (NOPs answering heartbeats)."""
        if not self._outbox:
            return b""
        data = b"".join(self._outbox)
        self._outbox.clear()
        return data

    def await_answer(self, waiter: Any) -> None:
        """Attach ``waiter`` to the request just built; its answer event will carry it.

        Only a request in :data:`ANSWERED_COMMANDS` (SUB, PUB, MPUB, DPUB)
        takes a waiter, once. Raises :class:`LocalProtocolError` otherwise.
        """
        last = self._pending[-1] if self._pending else None
        if last is None or last.command not in ANSWERED_COMMANDS or last.waiter is not None:
            what = "none" if last is None else last.command
            raise LocalProtocolError(
                f"cannot attach a waiter (the last request is {what}): attach one right"
                " after building SUB, PUB, MPUB or DPUB"
            )
        last.waiter = waiter

    def connection_lost(self) -> list[Any]:
        """The transport is gone; every further command raises.

        Returns the waiters of the requests nsqd never answered, in order.
        """
        self.state = ClientState.CLOSED
        pending, self._pending = self._pending, deque()
        return [p.waiter for p in pending if p.waiter is not None]

    # -- upgrades ----------------------------------------------------------

    @property
    def pending_upgrade(self) -> str | None:
        """The upgrade the I/O layer must perform now, or ``None``."""
        if self.state is ClientState.UPGRADING:
            return self._upgrades[0]
        return None

    def take_unprocessed(self) -> bytes:
        """Bytes read but not decoded; at an upgrade they belong to the new codec."""
        return self._decoder.take_unprocessed()

    def upgrade_started(self) -> None:
        """The transport is wrapped for :attr:`pending_upgrade`; expect its ``OK``."""
        if self.state is not ClientState.UPGRADING:
            raise LocalProtocolError(f"no upgrade is pending in state {self.state.value!r}")
        self.state = ClientState.AWAITING_UPGRADE_OK
        self._pending.append(_Pending("UPGRADE"))

    # -- receiving ---------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes read from nsqd (already decrypted and decompressed)."""
        self._decoder.feed(data)

    def publish_answers(self, data: bytes) -> list[Any] | None:
        """The waiters of the publishes ``data`` answers, when it is only their ``OK`` frames.

        A publisher's usual read, matched without decoding frames or building
        events: in ``READY`` (where every request waiting is a publish), with
        nothing buffered and no more answers than requests waiting, those leave
        the queue in order; their waiters (``None`` where none was attached) are
        answered :data:`~.frames.OK`. Else ``None``, having taken nothing.
        The waiters are those :meth:`events` would carry (its copy of
        ``_other_event``'s rule; tests/unit/test_client_fast_paths.py checks it).
        """
        count = len(data) // _OK_FRAME_SIZE
        pending = self._pending
        if self.state is not _READY or not 0 < count <= len(pending):
            return None
        # One answer is a blocking publisher's read: no bytes built, no bound method.
        if data != (_OK_FRAME if count == 1 else _OK_FRAME * count) or self._decoder.buffered:
            return None
        if count == 1:
            return [pending.popleft().waiter]
        take = pending.popleft
        return [take().waiter for _ in range(count)]

    def events(self) -> list[Event]:
        """Decode every complete frame into events, stopping at an upgrade point.

        Raises :class:`RemoteProtocolError` when nsqd breaks the protocol.
        """
        out: list[Event] = []
        # Two fast paths below copy the rule for one frame, _other_event (the
        # original: every other state goes through it); they skip its state
        # check and, for a publish's answer, the frozen dataclass's __init__.
        # tests/unit/test_client_fast_paths.py checks that they agree with it.
        if self.state is _SUBSCRIBED:
            # The hot path: messages, heartbeats and the odd error.
            into = self.message_class
            if into is bytes:  # each message is its frame's data (__init__ refuses a subclass)
                for frame_type, data in self._decoder.frames():
                    if frame_type == FRAME_TYPE_MESSAGE:  # its header is whole (the decoder checks)
                        out.append(data)  # type: ignore[arg-type]
                    else:
                        out.append(self._frame_event(frame_type, data))
                return out
            if into is not None:  # each message is its own event, built by the decoder
                others: list[int] = []
                fields = cast("type[MessageFields]", into)  # not bytes (above)
                items: list[Any] = self._decoder.frames_decoding_messages(fields, others)
                for index in others:  # the other frames become their events, in order
                    items[index] = self._frame_event(*items[index])
                return items
            received = _new
            set_message = _set_message
            for item in self._decoder.frames_decoding_messages():
                if type(item) is WireMessage:  # a message frame, decoded
                    event = received(MessageReceived)
                    set_message(event, item)
                    out.append(event)
                else:
                    out.append(self._frame_event(*item))  # type: ignore[misc]
            return out
        if self.state is ClientState.READY:
            # A publisher's answers: no upgrade can follow, so every frame at once.
            pending = self._pending
            for frame_type, data in self._decoder.frames():
                if (
                    frame_type == FRAME_TYPE_RESPONSE
                    and pending
                    and pending[0].command in _PUBLISH_COMMANDS
                    and data != HEARTBEAT
                ):  # a copy of _frame_event's answer to a publish (see above)
                    answered = pending.popleft()
                    answer: Response = _new(Response)  # no frozen __init__
                    _set_data(answer, data)
                    _set_command(answer, answered.command)
                    _set_waiter(answer, answered.waiter)
                    out.append(answer)
                else:
                    out.append(self._other_event(frame_type, data))
            return out
        while self.state is not ClientState.UPGRADING:
            frame = self._decoder.next_frame()
            if frame is None:
                break
            out.append(self._other_event(*frame))
        return out

    def _other_event(self, frame_type: int, data: bytes) -> Event:
        """The event of one frame outside the subscribed hot path."""
        if frame_type == FRAME_TYPE_MESSAGE:
            if self.state not in _RESPOND_STATES:
                raise RemoteProtocolError(
                    f"nsqd sent a message in state {self.state.value!r}, before SUB"
                )
            into = self.message_class
            if into is not None and issubclass(into, bytes):
                return data  # type: ignore[return-value]  # sized for its header (the decoder checks)
            if into is not None:
                return decode_message(data, into)  # type: ignore[return-value]  # its own event
            return MessageReceived(decode_message(data))
        return self._frame_event(frame_type, data)

    def _frame_event(self, frame_type: int, data: bytes) -> Event:
        if frame_type == FRAME_TYPE_ERROR:
            error = error_from_frame(data)
            if error.code in _NON_FATAL_CODES:
                return ErrorReceived(error, None)
            if not self._pending:
                self.state = ClientState.CLOSED
                return ErrorReceived(error, None)
            pending = self._pending.popleft()
            self.state = ClientState.CLOSED
            return ErrorReceived(error, pending.command, pending.waiter)
        if data == HEARTBEAT:
            self._outbox.append(commands.nop())
            return Heartbeat()
        if not self._pending:
            raise RemoteProtocolError(f"nsqd sent a response nobody asked for: {data[:64]!r}")
        pending = self._pending.popleft()
        command = pending.command
        if command == "IDENTIFY":
            return self._identified(data)
        if command == "UPGRADE":
            return self._upgraded(data)
        if command == "AUTH":
            return self._authenticated(data)
        if command == "SUB":
            self._expect_ok(data, command)
            self.state = ClientState.SUBSCRIBED
        elif command == "CLS":
            if data != CLOSE_WAIT:
                raise RemoteProtocolError(f"nsqd answered CLS with {data[:64]!r}, not CLOSE_WAIT")
            # Stay in CLOSING: messages already in flight may still be
            # answered with FIN, REQ or TOUCH until the socket is closed.
            self.close_wait_received = True
            return CloseWait()
        return Response(data, command, pending.waiter)

    @staticmethod
    def _expect_ok(data: bytes, command: str) -> None:
        if data != OK:
            raise RemoteProtocolError(f"nsqd answered {command} with {data[:64]!r}, not OK")

    def _identified(self, data: bytes) -> Event:
        features, negotiated = identify_features(data)
        if self._requested.get("tls_v1") and not features.get("tls_v1"):
            self.state = ClientState.CLOSED
            raise NegotiationError(
                "TLS was required (tls_v1=True) but nsqd did not agree to it;"
                " start nsqd with --tls-cert and --tls-key, or set tls_v1=False"
            )
        self.features = features
        self._auth_required = bool(features.get("auth_required"))
        self._upgrades = deque(agreed_upgrades(self._requested, features))
        self._after_upgrades()
        return Identified(features, tuple(self._upgrades), negotiated)

    def _upgraded(self, data: bytes) -> Event:
        kind = self._upgrades.popleft()
        self._expect_ok(data, f"the {kind} upgrade")
        self._after_upgrades()
        return Upgraded(kind)

    def _after_upgrades(self) -> None:
        if self._upgrades:
            self.state = ClientState.UPGRADING
        elif self._auth_required:
            self.state = ClientState.AUTH_REQUIRED
        else:
            self.state = ClientState.READY

    def _authenticated(self, data: bytes) -> Event:
        identity = auth_identity(data)
        self.state = ClientState.READY
        return Authenticated(identity)

    @property
    def auth_required(self) -> bool:
        """Whether nsqd asked for AUTH in its IDENTIFY reply."""
        return self._auth_required

    @property
    def awaited_answers(self) -> int:
        """Requests sent with a waiter attached whose answer has not arrived yet."""
        return sum(1 for p in self._pending if p.waiter is not None)

    @property
    def pending_requests(self) -> int:
        """Requests sent whose answer has not arrived yet."""
        return len(self._pending)
