"""Just enough HTTP/2 (RFC 9113) to send hostile requests byte for byte: frames written by hand,
header blocks encoded by a minimal HPACK encoder (literal fields, never indexed, no Huffman), so
that names and values go out exactly as written (uppercase names, connection-specific fields,
pseudo-headers in any order). Responses are read frame by frame; their header blocks are decoded
with the `hpack` package when it is importable (the project venv, scripts/install-deps.sh),
otherwise with a small decoder that gives up on Huffman-coded strings (the status then reads "?").
"""

import socket
import struct
import time

try:
    import hpack  # type: ignore
except ImportError:  # pragma: no cover - depends on the interpreter
    hpack = None

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
ERRORS = {0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR", 0x3: "FLOW_CONTROL_ERROR",
          0x4: "SETTINGS_TIMEOUT", 0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM",
          0x8: "CANCEL", 0x9: "COMPRESSION_ERROR", 0xA: "CONNECT_ERROR", 0xB: "ENHANCE_YOUR_CALM",
          0xC: "INADEQUATE_SECURITY", 0xD: "HTTP_1_1_REQUIRED"}

STATIC = [None, (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
          (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
          (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"), (":status", "404"),
          (":status", "500"), ("accept-charset", ""), ("accept-encoding", "gzip, deflate"),
          ("accept-language", ""), ("accept-ranges", ""), ("accept", ""), ("access-control-allow-origin", ""),
          ("age", ""), ("allow", ""), ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
          ("content-encoding", ""), ("content-language", ""), ("content-length", ""), ("content-location", ""),
          ("content-range", ""), ("content-type", ""), ("cookie", ""), ("date", ""), ("etag", ""),
          ("expect", ""), ("expires", ""), ("from", ""), ("host", ""), ("if-match", ""),
          ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""), ("if-unmodified-since", ""),
          ("last-modified", ""), ("link", ""), ("location", ""), ("max-forwards", ""),
          ("proxy-authenticate", ""), ("proxy-authorization", ""), ("range", ""), ("referer", ""),
          ("refresh", ""), ("retry-after", ""), ("server", ""), ("set-cookie", ""),
          ("strict-transport-security", ""), ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""),
          ("via", ""), ("www-authenticate", "")]


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream & 0x7FFFFFFF) + payload


def _int(value, prefix_bits, first):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _string(b):
    return _int(len(b), 7, 0) + b


def encode(fields):
    """A header block of literal fields never indexed (0x10), names and values as given."""
    out = bytearray()
    for name, value in fields:
        n = name.encode("latin-1") if isinstance(name, str) else name
        v = value.encode("latin-1") if isinstance(value, str) else value
        out += b"\x10" + _string(n) + _string(v)
    return bytes(out)


class _Decoder:
    """HPACK decoding without Huffman: enough when the peer sends plain strings."""

    def __init__(self):
        self.dynamic = []

    def _entry(self, i):
        if i < len(STATIC):
            return STATIC[i]
        return self.dynamic[i - len(STATIC)]

    @staticmethod
    def _read_int(buf, i, prefix_bits):
        limit = (1 << prefix_bits) - 1
        v = buf[i] & limit
        i += 1
        if v < limit:
            return v, i
        m = 0
        while True:
            b = buf[i]
            i += 1
            v += (b & 0x7F) << m
            m += 7
            if not b & 0x80:
                return v, i

    def _read_str(self, buf, i):
        huff = buf[i] & 0x80
        n, i = self._read_int(buf, i, 7)
        s = buf[i:i + n]
        return ("?" if huff else s.decode("latin-1")), i + n

    def decode(self, buf):
        out, i = [], 0
        while i < len(buf):
            b = buf[i]
            if b & 0x80:
                idx, i = self._read_int(buf, i, 7)
                out.append(self._entry(idx))
            elif b & 0x40 or (b & 0xF0) in (0x00, 0x10):
                bits = 6 if b & 0x40 else 4
                idx, i = self._read_int(buf, i, bits)
                name = self._entry(idx)[0] if idx else None
                if name is None:
                    name, i = self._read_str(buf, i)
                value, i = self._read_str(buf, i)
                if b & 0x40:
                    self.dynamic.insert(0, (name, value))
                out.append((name, value))
            elif b & 0x20:
                _, i = self._read_int(buf, i, 5)
            else:
                raise ValueError("bad HPACK byte")
        return out


def decoder():
    if hpack is not None:
        d = hpack.Decoder()
        d.max_allowed_table_size = 1 << 16

        class Wrapped:
            def decode(self, buf):
                return [(n.decode("latin-1") if isinstance(n, bytes) else n,
                         v.decode("latin-1") if isinstance(v, bytes) else v) for n, v in d.decode(buf, raw=True)]

        return Wrapped()
    return _Decoder()


def exchange(port, actions, deadline=1.5, streams=(1,)):
    """Sends the preface, an empty SETTINGS and `actions` (raw frame bytes, or ("wait", seconds)),
    then reads until every stream in `streams` ended (response END_STREAM or RST_STREAM), GOAWAY,
    EOF or the deadline. Returns {"statuses", "rst", "goaway", "closed", "bodies"}."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    result = {"statuses": {}, "rst": {}, "goaway": None, "closed": False, "bodies": {}, "errors": []}
    dec = decoder()
    buf = bytearray()
    ended = set()
    header_acc = {}

    def pump(until):
        while time.monotonic() < until:
            if all(s in ended for s in streams) or result["goaway"] is not None or result["closed"]:
                return
            sock.settimeout(max(0.01, until - time.monotonic()))
            try:
                data = sock.recv(65536)
            except socket.timeout:
                return
            except OSError:
                result["closed"] = True
                return
            if not data:
                result["closed"] = True
                return
            buf.extend(data)
            while len(buf) >= 9:
                n = int.from_bytes(buf[0:3], "big")
                if len(buf) < 9 + n:
                    break
                ftype, flags = buf[3], buf[4]
                sid = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                payload = bytes(buf[9:9 + n])
                del buf[:9 + n]
                if ftype == SETTINGS and not flags & ACK:
                    sock.sendall(frame(SETTINGS, ACK, 0))
                elif ftype == PING and not flags & ACK:
                    sock.sendall(frame(PING, ACK, 0, payload))
                elif ftype in (HEADERS, CONTINUATION):
                    if ftype == HEADERS:
                        pad = payload[0] if flags & 0x8 else 0
                        start = (1 if flags & 0x8 else 0) + (5 if flags & 0x20 else 0)
                        payload = payload[start:len(payload) - pad]
                        header_acc[sid] = [bytearray(payload), flags & END_STREAM]
                    else:
                        header_acc.setdefault(sid, [bytearray(), 0])[0].extend(payload)
                    if flags & END_HEADERS:
                        block, es = header_acc.pop(sid)
                        try:
                            fields = dec.decode(bytes(block))
                        except Exception as e:  # a decoding problem is reported, not fatal
                            result["errors"].append("hpack: %s" % e)
                            fields = []
                        status = next((v for k, v in fields if k == ":status"), "?")
                        if not status.startswith("1"):
                            result["statuses"][sid] = status
                        if es:
                            ended.add(sid)
                elif ftype == DATA:
                    result["bodies"][sid] = result["bodies"].get(sid, b"") + payload
                    if payload:
                        sock.sendall(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", len(payload)))
                                     + frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", len(payload))))
                    if flags & END_STREAM:
                        ended.add(sid)
                elif ftype == RST_STREAM:
                    result["rst"][sid] = ERRORS.get(int.from_bytes(payload[:4], "big"), "?")
                    ended.add(sid)
                elif ftype == GOAWAY:
                    code = int.from_bytes(payload[4:8], "big")
                    result["goaway"] = ERRORS.get(code, hex(code))

    try:
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        for a in actions:
            if isinstance(a, tuple) and a[0] == "wait":
                pump(time.monotonic() + a[1])
            else:
                try:
                    sock.sendall(a)
                except OSError:
                    result["closed"] = True
                    break
        pump(time.monotonic() + deadline)
    finally:
        sock.close()
    return result


def headers_frame(stream, fields, end_stream=True, end_headers=True):
    flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
    return frame(HEADERS, flags, stream, encode(fields))


def data_frame(stream, data, end_stream=True):
    return frame(DATA, END_STREAM if end_stream else 0, stream, data)
