#!/usr/bin/env python3
"""Sends one hostile HTTP/2 frame sequence to a server on loopback and prints a JSON verdict.

    hostile.py SCENARIO --port PORT [--stall-path /stall/x]
    hostile.py --list

The client is h2's H2Connection (client side; header validation and normalisation off, so it
sends invalid fields as given); frames h2 refuses to build (HEADERS on stream 0, even or
decreasing stream ids, invalid SETTINGS, WINDOW_UPDATE 0, oversized frames…) are written by
hand on the same socket, with the same HPACK encoder. What the server sends back is parsed
frame by frame (not by h2's state machine, which would raise on the very violations we
provoke). Every read has a timeout; the script never waits more than a few seconds.

The verdict (one JSON object on stdout):
  scenario        the scenario name
  rst             [{"stream": id, "code": "PROTOCOL_ERROR"}, …] RST_STREAM frames received
  goaway          {"code": "…", "last_stream_id": n} of the first GOAWAY, or null
  closed          true when the server closed the connection (EOF or reset)
  statuses        {"stream id": response :status} of the responses received
  same_conn_status  :status of a valid GET sent on the same connection after a stream error
                    (null when not tried or not answered)
  fresh_status    :status of a valid GET on a new connection afterwards (the server survived)
  detail          scenario-specific numbers
"""

import argparse
import json
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import h2.settings
import hpack

ERRORS = {
    0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR", 0x3: "FLOW_CONTROL_ERROR",
    0x4: "SETTINGS_TIMEOUT", 0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM",
    0x8: "CANCEL", 0x9: "COMPRESSION_ERROR", 0xA: "CONNECT_ERROR", 0xB: "ENHANCE_YOUR_CALM",
    0xC: "INADEQUATE_SECURITY", 0xD: "HTTP_1_1_REQUIRED",
}
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


def frame(ftype, flags, stream, payload=b"", length=None):
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes([ftype, flags]) + struct.pack(">I", stream & 0x7FFFFFFF) + payload


class Client:
    """One connection: h2 for the preface and header blocks, raw frames for the rest."""

    def __init__(self, port, read_timeout=3.0, rcvbuf=None, tls=False):
        self.port = port
        self.scheme = "https" if tls else "http"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        if tls:
            # HTTP/2 by ALPN over TLS (a test certificate: not verified).
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            self.sock = ctx.wrap_socket(self.sock, server_hostname="localhost")
        self.sock.settimeout(read_timeout)
        cfg = h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False,
            validate_inbound_headers=False)
        self.conn = h2.connection.H2Connection(config=cfg)
        self.conn.initiate_connection()
        self.buf = b""
        self.closed = False
        self.rst = []
        self.goaway = None
        self.statuses = {}
        self.ended = set()     # streams whose response ended (END_STREAM) or were reset
        self.settings_seen = False
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 20
        self.partial = {}      # stream → header block awaiting CONTINUATION
        self.frames = 0
        self.ping_acks = 0
        self.reset = False      # the close was a TCP reset
        self.send_failed = False  # a send was refused (EPIPE or reset): the server is gone

    @property
    def authority(self):
        return "127.0.0.1:%d" % self.port

    def request_headers(self, path="/", method="GET"):
        return [(":method", method), (":scheme", self.scheme), (":authority", self.authority), (":path", path)]

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.send(data)

    def send(self, data):
        """False when the data could not all be sent. A refused send (the server closed or reset
        the connection) does not end reading: what the server wrote before is still read."""
        if self.send_failed:
            return False
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.send_failed = True
            return False
        except socket.timeout:
            return False
        return True

    def headers(self, stream, fields, end_stream=True):
        """A HEADERS frame through h2 (any field, valid or not)."""
        self.conn.send_headers(stream, fields, end_stream=end_stream)
        self.flush()

    def block(self, fields):
        """An HPACK block from the connection's own encoder (keeps the server's decoder in sync)."""
        return self.conn.encoder.encode(fields)

    def raw(self, data):
        self.send(data)

    def settings_ack(self):
        self.raw(frame(SETTINGS, ACK, 0))

    # Reading -------------------------------------------------------------------------------

    def _fill(self):
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            self.closed = True
            self.reset = True
            return False
        except ssl.SSLError:
            self.closed = True
            return False
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def _parse(self):
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                return
            ftype, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + n]
            self.buf = self.buf[9 + n:]
            self.frames += 1
            self._on_frame(ftype, flags, stream, payload)

    def _on_frame(self, ftype, flags, stream, payload):
        if ftype == RST_STREAM:
            code = int.from_bytes(payload[:4], "big")
            self.rst.append({"stream": stream, "code": ERRORS.get(code, hex(code))})
            self.ended.add(stream)
        elif ftype == GOAWAY and self.goaway is None:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            code = int.from_bytes(payload[4:8], "big")
            self.goaway = {"code": ERRORS.get(code, hex(code)), "last_stream_id": last,
                           "debug": payload[8:].decode("latin-1")}
        elif ftype == PING and flags & ACK:
            self.ping_acks += 1
        elif ftype == SETTINGS and not flags & ACK:
            self.settings_seen = True
        elif ftype in (HEADERS, CONTINUATION):
            block = payload
            if ftype == HEADERS:
                pad = 0
                if flags & 0x8:
                    pad = block[0]
                    block = block[1:]
                if flags & 0x20:
                    block = block[5:]
                if pad:
                    block = block[:-pad]
                self.partial[stream] = (block, flags & END_STREAM)
            else:
                prev, es = self.partial.get(stream, (b"", 0))
                self.partial[stream] = (prev + block, es)
            if flags & END_HEADERS:
                block, es = self.partial.pop(stream)
                for name, value in self.decoder.decode(block, raw=True):
                    if name == b":status" and stream not in self.statuses:
                        self.statuses[stream] = int(value)
                if es:
                    self.ended.add(stream)
        elif ftype == DATA and flags & END_STREAM:
            self.ended.add(stream)

    def read_until(self, done, timeout=5.0):
        """Reads frames until done(self) is true, the connection closed, or `timeout` passed."""
        deadline = time.monotonic() + timeout
        while not done(self) and not self.closed and time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
            if self._fill():
                self._parse()
        self._parse()
        return done(self)

    def read_to_close(self, timeout=5.0):
        """After a GOAWAY: read what is left until the server closes (or the timeout)."""
        return self.read_until(lambda c: False, timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# Helpers shared by the scenarios -------------------------------------------------------------

def start(port, **kw):
    c = Client(port, **kw)
    c.flush()
    c.read_until(lambda c: c.settings_seen, 3)
    c.settings_ack()
    return c


def rst_on(stream):
    return lambda c: any(r["stream"] == stream for r in c.rst) or c.goaway is not None


def goaway(c):
    return c.goaway is not None


def stream_error(c, stream, fields, end_stream=True):
    """Sends one bad request on `stream`, waits for the reaction, then tries a good request on the
    same connection (a stream error must leave the connection usable)."""
    c.headers(stream, fields, end_stream=end_stream)
    c.read_until(rst_on(stream), 4)
    same_conn(c, stream + 2)


def same_conn(c, stream):
    if c.goaway is None and not c.closed:
        c.headers(stream, c.request_headers("/after"))
        c.read_until(lambda c: stream in c.ended or c.goaway is not None, 4)
        c.same_conn_status = c.statuses.get(stream)


def fresh(port):
    try:
        c = start(port)
        c.headers(1, c.request_headers("/fresh"))
        c.read_until(lambda c: 1 in c.ended, 5)
        status = c.statuses.get(1)
        c.close()
        return status
    except OSError as e:
        return "error: %s" % e


def with_fields(c, extra, base=None, path="/bad"):
    return (base if base is not None else c.request_headers(path)) + extra


# Scenarios ---------------------------------------------------------------------------------------

def s_uppercase_header(c, a):
    stream_error(c, 1, with_fields(c, [("X-Upper", "1")]))


def s_connection_header(c, a):
    stream_error(c, 1, with_fields(c, [("connection", "keep-alive")]))


def s_transfer_encoding(c, a):
    stream_error(c, 1, with_fields(c, [("transfer-encoding", "chunked")], path="/te"), end_stream=False)


def s_te_gzip(c, a):
    stream_error(c, 1, with_fields(c, [("te", "gzip")]))


def s_missing_path(c, a):
    stream_error(c, 1, [(":method", "GET"), (":scheme", "http"), (":authority", c.authority)])


def s_pseudo_after_regular(c, a):
    stream_error(c, 1, [(":method", "GET"), (":scheme", "http"), ("accept", "*/*"),
                        (":authority", c.authority), (":path", "/late")])


def s_unknown_pseudo(c, a):
    stream_error(c, 1, with_fields(c, [(":protocol-x", "1")]))


def s_duplicate_method(c, a):
    stream_error(c, 1, [(":method", "GET"), (":method", "POST")] + c.request_headers("/dup")[1:])


def s_content_length_mismatch(c, a):
    c.headers(1, with_fields(c, [("content-length", "10")], c.request_headers("/cl", "POST")), end_stream=False)
    c.raw(frame(DATA, END_STREAM, 1, b"12345"))
    c.read_until(rst_on(1), 4)
    same_conn(c, 3)


def s_data_half_closed(c, a):
    # HEADERS with END_STREAM and a DATA frame right behind it, in one write: the stream is
    # half-closed (remote) when the DATA arrives (RFC 9113 §5.1: STREAM_CLOSED).
    c.conn.send_headers(1, c.request_headers("/hc"), end_stream=True)
    c.raw(c.conn.data_to_send() + frame(DATA, 0, 1, b"late"))
    c.read_until(lambda c: rst_on(1)(c) and 1 in c.ended, 4)


def s_data_closed_stream(c, a):
    # A complete exchange, then DATA on the closed stream (RFC 9113 §5.1 "closed": the receiver MAY
    # treat it as a connection error STREAM_CLOSED; ignoring it is allowed too).
    c.headers(1, c.request_headers("/done"))
    c.read_until(lambda c: 1 in c.ended, 4)
    c.detail["first_status"] = c.statuses.get(1)
    c.raw(frame(DATA, END_STREAM, 1, b"after the end"))
    c.read_until(goaway, 1.5)
    same_conn(c, 3)


def s_data_over_window(c, a):
    # A request whose body cannot be consumed yet (the route's upstream never accepts), then more
    # DATA than the stream window (RFC 9113 §6.9.1 → FLOW_CONTROL_ERROR).
    c.headers(1, c.request_headers(a.stall_path, "POST"), end_stream=False)
    chunk = b"x" * 16384
    sent = 0
    for _ in range(6):  # 96 KiB > the 64 KiB stream window
        c.raw(frame(DATA, 0, 1, chunk))
        sent += len(chunk)
    c.detail["body_sent"] = sent
    c.read_until(rst_on(1), 5)


def s_window_update_zero_stream(c, a):
    c.headers(1, c.request_headers(a.stall_path, "POST"), end_stream=False)
    c.raw(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 0)))
    c.read_until(rst_on(1), 4)
    same_conn(c, 3)


def s_window_update_zero_connection(c, a):
    c.raw(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0)))
    c.read_until(goaway, 4)


def s_window_update_overflow(c, a):
    # Our connection send window (65 535) + 2^31-1 > 2^31-1 (RFC 9113 §6.9.1).
    c.raw(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF)))
    c.read_until(goaway, 4)


def s_window_update_overflow_stream(c, a):
    c.headers(1, c.request_headers(a.stall_path, "POST"), end_stream=False)
    c.raw(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 0x7FFFFFFF)))
    c.read_until(rst_on(1), 4)
    same_conn(c, 3)


def s_even_stream_id(c, a):
    c.raw(frame(HEADERS, END_STREAM | END_HEADERS, 2, c.block(c.request_headers("/even"))))
    c.read_until(goaway, 4)


def s_decreasing_stream_id(c, a):
    c.raw(frame(HEADERS, END_STREAM | END_HEADERS, 5, c.block(c.request_headers("/five"))))
    c.read_until(lambda c: 5 in c.ended, 4)
    c.detail["stream5_status"] = c.statuses.get(5)
    c.raw(frame(HEADERS, END_STREAM | END_HEADERS, 3, c.block(c.request_headers("/three"))))
    c.read_until(goaway, 4)


def s_headers_stream_zero(c, a):
    c.raw(frame(HEADERS, END_STREAM | END_HEADERS, 0, c.block(c.request_headers("/zero"))))
    c.read_until(goaway, 4)


def s_settings_enable_push_2(c, a):
    c.raw(frame(SETTINGS, 0, 0, struct.pack(">HI", 0x2, 2)))
    c.read_until(goaway, 4)


def s_settings_initial_window_too_big(c, a):
    c.raw(frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, 0x80000000)))
    c.read_until(goaway, 4)


def s_settings_max_frame_size_small(c, a):
    c.raw(frame(SETTINGS, 0, 0, struct.pack(">HI", 0x5, 16383)))
    c.read_until(goaway, 4)


def s_frame_too_large(c, a):
    # A HEADERS frame of 20 000 bytes with MAX_FRAME_SIZE 16 384 (RFC 9113 §4.2: a frame carrying a
    # field block is a connection error FRAME_SIZE_ERROR).
    block = c.block(c.request_headers("/big"))
    c.raw(frame(HEADERS, END_STREAM | END_HEADERS, 1, block + b"\x00" * (20000 - len(block))))
    c.read_until(goaway, 4)


def s_rapid_reset(c, a):
    # CVE-2023-44487: open and cancel streams at once, far more than the 200-per-10-s budget.
    n = 400
    out = bytearray()
    for i in range(n):
        sid = 1 + 2 * i
        out += frame(HEADERS, END_HEADERS, sid, c.block(c.request_headers(a.stall_path, "POST")))
        out += frame(RST_STREAM, 0, sid, struct.pack(">I", 0x8))
    c.raw(bytes(out))
    c.detail["streams_reset"] = n
    c.read_until(goaway, 5)
    c.read_to_close(3)


def s_continuation_flood(c, a):
    # CVE-2024-27316 / CVE-2024-28182: HEADERS without END_HEADERS followed by endless CONTINUATION.
    block = c.block(c.request_headers("/cont"))
    out = bytearray(frame(HEADERS, END_STREAM, 1, block))
    filler = c.block([("x-fill", "a" * 50)])
    n = 64
    for _ in range(n):
        out += frame(CONTINUATION, 0, 1, filler)
    c.raw(bytes(out))
    c.detail["continuations"] = n
    c.read_until(goaway, 4)
    c.read_to_close(3)


def s_hpack_bomb(c, a):
    # RFC 7541 §4.1: one 4 000-byte field enters the dynamic table, then a request references it
    # 4 000 times (16 MB decoded from a 4 KB block). Must be refused (431) without the server
    # copying it, the HPACK state staying in sync (the next request on the connection works).
    big = ("x-bomb", "b" * 4000)
    c.headers(1, c.request_headers("/seed") + [big])  # literal with incremental indexing
    c.read_until(lambda c: 1 in c.ended, 4)
    c.detail["seed_status"] = c.statuses.get(1)
    # index 62 is the newest dynamic entry: the big field (the encoder added it after the
    # request's own pseudo fields, which are static-table hits or earlier entries).
    index = 62
    refs = hpack_index(index) * 4000
    # The request's own fields are sent never-indexed, so they do not evict the big entry.
    head = [hpack.NeverIndexedHeaderTuple(k, v) for k, v in c.request_headers("/bomb")]
    c.raw(frame(HEADERS, END_STREAM | END_HEADERS, 3, c.block(head) + refs))
    c.read_until(lambda c: 3 in c.ended or c.goaway is not None, 5)
    c.detail["bomb_block_bytes"] = len(refs)
    same_conn(c, 5)


def s_continuation_3(c, a):
    # A valid request split into HEADERS and 3 CONTINUATION frames: within the default limit (8),
    # over a configured max_continuations of 2.
    fields = c.request_headers("/cont3") + [("x-a", "1"), ("x-b", "2"), ("x-c", "3")]
    parts = [c.block(fields[:4])] + [c.block([f]) for f in fields[4:]]
    out = bytearray(frame(HEADERS, END_STREAM, 1, parts[0]))
    for i, p in enumerate(parts[1:]):
        out += frame(CONTINUATION, END_HEADERS if i == len(parts) - 2 else 0, 1, p)
    c.raw(bytes(out))
    c.read_until(lambda c: 1 in c.ended or c.goaway is not None, 4)


def s_settings_10_entries(c, a):
    # One SETTINGS frame with 10 entries (unknown ids, which RFC 9113 §6.5.2 says to ignore): within
    # the default max_settings_entries (32), over a configured 8. Then a request on the connection.
    c.raw(frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", 0x100 + i, i) for i in range(10))))
    c.read_until(goaway, 0.5)
    same_conn(c, 1)


def s_ping_burst_50(c, a):
    # 50 PINGs in one write: the server owes 50 ACKs at once. Within the default max_outbound_ack
    # (1000), over a configured 20.
    c.raw(frame(PING, 0, 0, b"burst-50") * 50)
    c.read_until(lambda c: c.ping_acks >= 50 or c.goaway is not None, 4)
    c.detail["ping_acks_read"] = c.ping_acks


def s_goaway_then_trickle(c, a):
    # A connection error (an even stream id → GOAWAY PROTOCOL_ERROR), after which the client keeps
    # sending a PING every 100 ms for up to 8 s: the server's linger after the GOAWAY is bounded
    # (2 s), so it closes while the client is still sending.
    c.raw(frame(HEADERS, END_STREAM | END_HEADERS, 2, c.block(c.request_headers("/even"))))
    c.read_until(goaway, 4)
    deadline = time.monotonic() + 8
    sent = 0
    while time.monotonic() < deadline and not c.closed and not c.send_failed:
        c.raw(frame(PING, 0, 0, b"trickle!"))
        sent += 1
        c.read_until(lambda c: False, 0.1)
    c.detail["pings_after_goaway"] = sent
    c.detail["closed_while_sending"] = c.closed or c.send_failed


def hpack_index(i):
    if i < 127:
        return bytes([0x80 | i])
    i -= 127
    out = bytearray([0xFF])
    while i >= 128:
        out.append((i & 0x7F) | 0x80)
        i >>= 7
    out.append(i)
    return bytes(out)


def s_ping_flood(c, a):
    # RFC 9113 §10.5: PINGs sent without ever reading their ACKs (small receive buffer).
    sent = 0
    c.sock.settimeout(1.0)
    batch = frame(PING, 0, 0, b"12345678") * 1000
    for _ in range(200):  # up to 200 000 PINGs
        if c.closed or not c.send(batch):
            break
        sent += 1000
    c.detail["pings_sent"] = sent
    c.read_until(goaway, 8)
    c.read_to_close(3)
    c.detail["ping_acks_read"] = c.ping_acks
    c.detail["reset"] = c.reset
    c.detail["send_failed"] = c.send_failed
    c.detail["frames_read"] = c.frames


def s_settings_flood(c, a):
    # RFC 9113 §10.5: SETTINGS frames (each owes an ACK) sent without ever reading the ACKs.
    sent = 0
    c.sock.settimeout(1.0)
    batch = frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, 65535)) * 1000
    for _ in range(200):  # up to 200 000 SETTINGS frames
        if c.closed or not c.send(batch):
            break
        sent += 1000
    c.detail["settings_sent"] = sent
    c.read_until(goaway, 8)
    c.read_to_close(3)
    c.detail["send_failed"] = c.send_failed
    c.detail["frames_read"] = c.frames


def paced_resets(c, stream_frames, batch=10, limit=1000):
    """Streams the server ends up resetting, sent `batch` at a time, each batch followed by a PING
    whose ACK is awaited: the server has counted every reset of a batch before the next one leaves,
    so `streams_sent` says after how many the connection ended (GOAWAY or close)."""
    sent = 0
    sid = 1
    while sent < limit and c.goaway is None and not c.closed and not c.send_failed:
        out = bytearray()
        for _ in range(batch):
            out += stream_frames(sid)
            sid += 2
        acks = c.ping_acks
        c.raw(bytes(out) + frame(PING, 0, 0, b"pacedrst"))
        sent += batch
        c.read_until(lambda c: c.ping_acks > acks or c.goaway is not None, 5)
    c.detail["streams_sent"] = sent
    c.read_to_close(3)


def s_reset_flood(c, a):
    # CVE-2025-8671 (MadeYouReset): requests the server must reset (an uppercase field name →
    # RST_STREAM PROTOCOL_ERROR), far more than the reset budget (200 per 10 s by default).
    block = lambda sid: frame(HEADERS, END_STREAM | END_HEADERS, sid,
                              c.block(c.request_headers("/bad") + [("X-Upper", "1")]))
    paced_resets(c, block)
    c.detail["resets_read"] = len(c.rst)


def s_rapid_reset_paced(c, a):
    # CVE-2023-44487, paced: each stream opened and cancelled at once, in batches of 10.
    def pair(sid):
        return (frame(HEADERS, END_HEADERS, sid, c.block(c.request_headers(a.stall_path, "POST")))
                + frame(RST_STREAM, 0, sid, struct.pack(">I", 0x8)))
    paced_resets(c, pair)


def s_too_many_streams(c, a):
    # RFC 9113 §5.1.2: more streams than SETTINGS_MAX_CONCURRENT_STREAMS (128). Sent before our
    # SETTINGS ACK: refused per stream (REFUSED_STREAM), the first 128 stay open.
    n = 130
    out = bytearray()
    for i in range(n):
        out += frame(HEADERS, END_HEADERS, 1 + 2 * i, c.block(c.request_headers(a.stall_path, "POST")))
    c.raw(bytes(out))
    last = 1 + 2 * (n - 1)
    c.read_until(rst_on(last), 5)
    c.detail["streams_opened"] = n


SCENARIOS = {name[2:]: fn for name, fn in globals().items() if name.startswith("s_")}
NO_SETTINGS_ACK = {"too_many_streams"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", nargs="?")
    p.add_argument("--port", type=int)
    p.add_argument("--stall-path", default="/stall/x",
                   help="a path whose upstream never answers nor reads (the request stays open)")
    p.add_argument("--list", action="store_true")
    a = p.parse_args()
    if a.list:
        print("\n".join(sorted(SCENARIOS)))
        return 0
    if a.scenario not in SCENARIOS or not a.port:
        p.error("unknown scenario or no --port (see --list)")
    if a.scenario in NO_SETTINGS_ACK:
        c = Client(a.port)
        c.flush()
    elif a.scenario in ("ping_flood", "settings_flood"):
        c = start(a.port, rcvbuf=4096)
    else:
        c = start(a.port)
    c.detail = {}
    c.same_conn_status = None
    SCENARIOS[a.scenario](c, a)
    if not c.closed and c.goaway is not None:
        c.read_to_close(2)
    c.close()
    verdict = {
        "scenario": a.scenario,
        "rst": c.rst,
        "goaway": c.goaway,
        "closed": c.closed,
        "statuses": {str(k): v for k, v in sorted(c.statuses.items())},
        "same_conn_status": c.same_conn_status,
        "fresh_status": fresh(a.port),
        "detail": c.detail,
    }
    print(json.dumps(verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
