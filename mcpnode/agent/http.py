"""The metrics endpoint of `mcpnode agent`: HTTP on the agent's one event loop (`loop.py`),
serving the exposition of `AgentMetrics` (`metrics.py`).

`MetricsServer` is a minimal HTTP/1.x responder on the `Loop`: no thread (prometheus_client's
`start_http_server` starts one, and the agent's state has no locks), one request per
connection, `Connection: close` always. It answers `GET`/`HEAD` of `/metrics` and `/`, with
`Vary: Accept, Accept-Encoding` (the body depends on both).
Every connection has a deadline (a client that connects and sends nothing is closed without
an answer), request heads are capped at 8 KiB, and at most `max_connections` are open at
once; beyond that a new connection is closed at once. None of this may stall the loop that
keeps the node tuned.
"""

from __future__ import annotations

import errno
import gzip
import http
import ipaddress
import socket
from dataclasses import dataclass, field
from functools import partial

from mcpnode.agent.loop import Loop, Timer
from mcpnode.agent.metrics import AgentMetrics
from mcpnode.codec.promtext import gzip_accepted
from mcpnode.errors import McpnodeError
from mcpnode.logs import EventLog

MAX_HEAD_BYTES = 8192
DEFAULT_DEADLINE_S = 5.0
# A scraper sends its request as soon as it is connected (Prometheus: one write); a client that
# has not finished its request head by then is idle or slow, and gives its slot up.
DEFAULT_HEAD_DEADLINE_S = 1.0
DEFAULT_MAX_CONNECTIONS = 32
_RECV_BYTES = 4096
_BACKLOG = 64
_ACCEPTS_PER_WAKEUP = 64  # then let the loop's other sources run
_SEND_RETRY_S = 0.01
_SNDBUF_MAX_BYTES = 1 << 20  # a scrape is ~30 KB; beyond this, memory for one client is waste
_ACCEPT_BACKOFF_S = 1.0
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

_INDEX = b'<html><body><a href="/metrics">/metrics</a></body></html>\n'


class MetricsBindError(McpnodeError):
    """The metrics listener could not be set up: address in use (EADDRINUSE), a privileged
    port (EACCES), an address this host does not have (EADDRNOTAVAIL), no IPv6, or not an IP
    address at all. `address` is HOST:PORT ([V6]:PORT), `errno` the OS error or None."""

    def __init__(self, address: str, errno: int | None, detail: str) -> None:
        super().__init__(f"metrics listener {address}: {detail}")
        self.address = address
        self.errno = errno
        self.detail = detail


def format_address(host: str, port: int) -> str:
    """HOST:PORT, with an IPv6 host in brackets ([::1]:9847), as `metrics.listen` is written."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None  # the response still to send; None while reading the request
    deadline: Timer | None = None
    retry: Timer | None = None


class MetricsServer:
    """Serves `metrics` over HTTP on `host`:`port` from `loop`. `port` 0 picks a free port;
    `.port` is the one bound. Listens from construction until `close()`.

    Writing the response: the Loop watches readers only, so the response is sent with
    non-blocking `send`, after raising the socket's send buffer to the response's size (a
    scrape is 10–30 KB; raised to 1 MiB at most, and the kernel caps it at net.core.wmem_max,
    208 KiB by default, doubled). Whatever a slow reader leaves unsent is retried every 10 ms
    until it is sent or the connection's deadline closes it: timers only while a client owes
    us a read, bounded by the deadline, and the loop is never blocked (a blocking `sendall`
    with a timeout would stall drift remediation for as long as a stuck scraper wanted).

    Raises MetricsBindError when the listener cannot be bound."""

    def __init__(
        self,
        loop: Loop,
        metrics: AgentMetrics,
        host: str,
        port: int,
        log: EventLog,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        head_deadline_s: float = DEFAULT_HEAD_DEADLINE_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self._loop = loop
        self.metrics = metrics
        self.log = log
        self.host = host
        self._deadline_s = deadline_s
        self._head_deadline_s = min(head_deadline_s, deadline_s)
        self._max_connections = max_connections
        # In accept order (dicts keep insertion order): the oldest idle one is evicted first.
        self._conns: dict[_Conn, None] = {}
        self._accept_backoff: Timer | None = None
        self._listener: socket.socket | None = _listen(host, port)
        self.port: int = self._listener.getsockname()[1]
        loop.add_reader(self._listener, self._on_acceptable, "metrics.listen")
        log.info("metrics.listening", address=self.address)

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    @property
    def connections(self) -> int:
        """Connections open now (reading a request or sending a response)."""
        return len(self._conns)

    def close(self) -> None:
        """Stop listening and close every connection, answered or not. Idempotent."""
        if self._accept_backoff is not None:
            self._accept_backoff.cancel()
            self._accept_backoff = None
        if self._listener is not None:
            self._loop.remove_reader(self._listener)
            self._listener.close()
            self._listener = None
        for conn in list(self._conns):
            self._drop(conn)

    # -- accepting ------------------------------------------------------------------------------

    def _on_acceptable(self) -> None:
        listener = self._listener
        if listener is None:
            return
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                sock, _peer = listener.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in _OUT_OF_FDS:
                    # The pending connection stays queued and the listener readable: watching
                    # it now would spin the loop. Look again in a second.
                    self._pause_accepting(err)
                    return
                continue  # ECONNABORTED, EPROTO: that client gave up before we took it
            if len(self._conns) >= self._max_connections and not self._evict_idle():
                self.metrics.count_dropped_connection("busy")
                sock.close()
                continue
            self._open(sock)

    def _evict_idle(self) -> bool:
        """Make room by closing the oldest connection still waiting for its request: idle or
        slow clients (500 of them held open answered 0 of 30 real scrapes when new connections
        were refused instead) must not starve a scraper that sends its request at once. One
        being answered is never evicted. False when every connection is being answered."""
        for conn in self._conns:
            if conn.out is None:
                self.metrics.count_dropped_connection("evicted")
                self._drop(conn)
                return True
        return False

    def _pause_accepting(self, err: OSError) -> None:
        assert self._listener is not None
        self.log.warning(
            "metrics.accept-paused",
            address=self.address,
            error=f"{type(err).__name__}: {err}",
            retry_s=_ACCEPT_BACKOFF_S,
        )
        self._loop.remove_reader(self._listener)
        self._accept_backoff = self._loop.call_later(
            _ACCEPT_BACKOFF_S, self._resume_accepting, "metrics.accept-resume"
        )

    def _resume_accepting(self) -> None:
        self._accept_backoff = None
        if self._listener is not None:
            self._loop.add_reader(self._listener, self._on_acceptable, "metrics.listen")

    def _open(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        conn = _Conn(sock)
        # The request head must arrive within the short deadline; the answer then gets the
        # full one (_respond re-arms it).
        conn.deadline = self._loop.call_later(
            self._head_deadline_s, partial(self._expire, conn), "metrics.deadline"
        )
        self._conns[conn] = None
        self._loop.add_reader(sock, partial(self._on_readable, conn), "metrics.conn")

    def _expire(self, conn: _Conn) -> None:
        conn.deadline = None
        self.metrics.count_dropped_connection("timeout")
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        # Unregister before closing: the fd number is reused by the next accept.
        self._loop.remove_reader(conn.sock)
        for timer in (conn.deadline, conn.retry):
            if timer is not None:
                timer.cancel()
        conn.deadline = conn.retry = None
        self._conns.pop(conn, None)
        conn.sock.close()

    # -- one request ----------------------------------------------------------------------------

    def _on_readable(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return
        except OSError:  # ECONNRESET: the client went away mid-request
            self._drop(conn)
            return
        if not chunk:  # EOF before the end of the head: nobody to answer
            self._drop(conn)
            return
        conn.head += chunk
        end = _head_end(conn.head)
        if end is None and len(conn.head) <= MAX_HEAD_BYTES:
            return  # more to come
        if end is None or end > MAX_HEAD_BYTES:
            self._respond(conn, _error(http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE))
        else:
            self._respond(conn, self._answer(bytes(conn.head[:end])))

    def _answer(self, head: bytes) -> bytes:
        line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _error(http.HTTPStatus.BAD_REQUEST)
        method, target, _version = parts
        path = target.split("?", 1)[0]
        head_only = method == "HEAD"
        if path not in ("/metrics", "/"):
            return _error(http.HTTPStatus.NOT_FOUND, head_only=head_only)
        if method not in ("GET", "HEAD"):
            return _error(http.HTTPStatus.METHOD_NOT_ALLOWED, ("Allow", "GET, HEAD"))
        if path != "/metrics":
            return _response(
                http.HTTPStatus.OK, "text/html; charset=utf-8", _INDEX, head_only=head_only
            )
        self.metrics.count_scrape()
        headers = _headers(head)
        body, content_type = self.metrics.exposition(headers.get("accept", ""))
        extra = [("Vary", "Accept, Accept-Encoding")]
        if gzip_accepted(headers.get("accept-encoding", "")):
            # Measured: a 12 KB exposition (60 drifting keys) becomes 2 KB in 0.6 ms on one
            # busy core, so compressing on the loop thread costs less than one drift check.
            body = gzip.compress(body, compresslevel=6)
            extra.append(("Content-Encoding", "gzip"))
        return _response(http.HTTPStatus.OK, content_type, body, *extra, head_only=head_only)

    def _respond(self, conn: _Conn, data: bytes) -> None:
        self._loop.remove_reader(conn.sock)  # one request per connection; the rest is ignored
        conn.out = memoryview(data)
        if conn.deadline is not None:
            conn.deadline.cancel()
        conn.deadline = self._loop.call_later(
            self._deadline_s, partial(self._expire, conn), "metrics.deadline"
        )
        want = min(len(data), _SNDBUF_MAX_BYTES)
        try:
            if want > conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, want)
        except OSError:
            pass  # only an optimisation: the retries below send it anyway
        self._send(conn)

    def _send(self, conn: _Conn) -> None:
        conn.retry = None
        out = conn.out
        assert out is not None
        try:
            while out:
                out = out[conn.sock.send(out) :]
        except BlockingIOError:
            conn.out = out
            conn.retry = self._loop.call_later(
                _SEND_RETRY_S, partial(self._send, conn), "metrics.send"
            )
            return
        except OSError:  # EPIPE, ECONNRESET: the client left; nothing to tell it
            pass
        self._drop(conn)


def _listen(host: str, port: int) -> socket.socket:
    address = format_address(host, port)
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        raise MetricsBindError(address, None, "not an IP address") from None
    family = socket.AF_INET6 if version == 6 else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as err:  # EAFNOSUPPORT: IPv6 disabled on this host
        raise MetricsBindError(address, err.errno, err.strerror or str(err)) from err
    try:
        # Rebinding right after a restart must not fail on the last scrape's TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise MetricsBindError(address, err.errno, err.strerror or str(err)) from err
    return sock


def _head_end(buf: bytearray) -> int | None:
    """Where the request head ends (after its blank line), or None if it has not yet.
    A bare LF blank line is accepted too (`printf 'GET / HTTP/1.0\\n\\n' | nc`)."""
    ends = [i + len(sep) for sep in (b"\r\n\r\n", b"\n\n") if (i := buf.find(sep)) >= 0]
    return min(ends) if ends else None


def _headers(head: bytes) -> dict[str, str]:
    """The request's header fields after the request line, names lower-cased; a repeated field
    is joined with commas (RFC 9110, 5.3). `head` is already capped at MAX_HEAD_BYTES."""
    out: dict[str, str] = {}
    for raw in head.decode("latin-1").split("\n")[1:]:
        name, sep, value = raw.rstrip("\r").partition(":")
        if not sep or not name or name != name.strip():
            continue  # the blank line, or not a field (a space before the colon is invalid)
        key = name.lower()
        value = value.strip()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _response(
    status: http.HTTPStatus,
    content_type: str,
    body: bytes,
    *extra: tuple[str, str],
    head_only: bool = False,
) -> bytes:
    headers = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in extra),
    ]
    head = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


def _error(status: http.HTTPStatus, *extra: tuple[str, str], head_only: bool = False) -> bytes:
    body = f"{status.value} {status.phrase}\n".encode()
    return _response(status, "text/plain; charset=utf-8", body, *extra, head_only=head_only)
