#!/usr/bin/env python3
"""Rebuilds fuzz/corpus/<Target>/ (every target, or those named on the command line) from the real
device vectors in Tests/AppAttestTests/Vectors and the inputs of the test suite.

Standard library only. Every file is named by the SHA-1 of its bytes (as libFuzzer names corpus
entries), so re-running is idempotent and duplicates collapse.

  FuzzAttestation        every distinct attestation object (decoded attestation_b64)
  FuzzAssertion          every distinct assertion (decoded assertion_b64), plus the iOS 14.4 assertion
                         re-encoded with iOS-27-style authenticator data (extensions map after the
                         counter, with and without the ED flag 0x80)
  FuzzAuthenticatorData  authData taken out of every attestation and assertion, plus iOS-27-style
                         variants of one attestation authData and one assertion authData
  FuzzCBOR               every assertion, the smallest attestation objects, the COSE keys and
                         extension maps, and a few hand-written items (floats, negatives, nesting)
  FuzzHTTP1 … FuzzStoreFiles
                         see the functions below and fuzz/README.md, "Seeds"; each input starts with
                         the bytes its harness reads first (split selector, options, mode)
"""
import base64
import glob
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "Tests", "AppAttestTests", "Vectors")
OUT = os.path.join(HERE, "corpus")


# --- minimal CBOR (definite lengths, what App Attest uses) -------------------------------------
def head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | info]) + n.to_bytes(size, "big")
    raise ValueError(n)


def enc(v):
    if v is None:
        return b"\xf6"
    if isinstance(v, bool):
        return b"\xf5" if v else b"\xf4"
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, bytes):
        return head(2, len(v)) + v
    if isinstance(v, str):
        u = v.encode()
        return head(3, len(u)) + u
    if isinstance(v, list):
        return head(4, len(v)) + b"".join(enc(x) for x in v)
    if isinstance(v, dict):
        return head(5, len(v)) + b"".join(enc(k) + enc(x) for k, x in v.items())
    raise TypeError(type(v))


def skip(b, i):
    """Offset just past the CBOR item at b[i] (definite lengths only)."""
    major, info = b[i] >> 5, b[i] & 0x1F
    i += 1
    if info < 24:
        n = info
    else:
        size = {24: 1, 25: 2, 26: 4, 27: 8}[info]
        n = int.from_bytes(b[i:i + size], "big")
        i += size
    if major in (0, 1, 7):
        return i
    if major in (2, 3):
        return i + n
    if major == 4:
        for _ in range(n):
            i = skip(b, i)
        return i
    if major == 5:
        for _ in range(2 * n):
            i = skip(b, i)
        return i
    raise ValueError("tag")


def top_map(b):
    """Top-level CBOR map as {text key: raw value bytes}."""
    assert b[0] >> 5 == 5
    info = b[0] & 0x1F
    n, i = (info, 1) if info < 24 else (b[1], 2)
    out = {}
    for _ in range(n):
        k_end = skip(b, i)
        key = b[i:k_end]
        v_end = skip(b, k_end)
        out[key[1:].decode()] = b[k_end:v_end]
        i = v_end
    return out


def bstr(raw):
    """Contents of an encoded byte string."""
    info = raw[0] & 0x1F
    if info < 24:
        return raw[1:]
    size = {24: 1, 25: 2, 26: 4, 27: 8}[info]
    return raw[1 + size:]


# iOS 27 extensions map, as the brief and AuthenticatorData.swift describe it.
EXTENSIONS = enc({"apple_validation_category_01": bytes([4, 0, 0, 0]), "apple_bundle_version_01": "4.2"})


def ios27(auth, ed_flag):
    b = bytearray(auth + EXTENSIONS)
    if ed_flag:
        b[32] |= 0x80
    return bytes(b)


# --- PROXY protocol (Tests/GatewayIOTests/ProxyProtocolTests.swift) ----------------------------
V2_SIGNATURE = bytes([0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A])


def proxy_v2(family, body, command=1):
    return V2_SIGNATURE + bytes([0x20 | command, family, len(body) >> 8, len(body) & 0xFF]) + body


def proxy_protocol_seeds():
    lines = [
        "PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\n\x16\x03\x01rest of the stream",
        "PROXY TCP6 2001:db8::7 2001:db8::1 65535 0\r\nGET / HTTP/1.1\r\n",
        "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
        "PROXY TCP6 ::ffff:192.0.2.1 ::1 1 2\r\n",
        "PROXY UNKNOWN\r\n",
        "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n",
        "PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\n",
        "PROXY TCP4 203.0.113.7 192.0.2.1 56324\r\n",
        "PROXY TCP4 203.0.113.7 192.0.2.1 0443 443\r\n",
        "PROXY TCP4 203.0.113.07 192.0.2.1 1 2\r\n",
        "PROXY TCP4 2001:db8::7 192.0.2.1 1 2\r\n",
        "PROXY UNKNOWN " + "x" * 92,
        "GET / HTTP/1.1\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ]
    body4 = bytes([203, 0, 113, 7, 192, 0, 2, 1, 0xDC, 0x04, 0x01, 0xBB])
    body6 = bytes([0x20, 0x01, 0x0D, 0xB8] + [0] * 11 + [7] + [0x20, 0x01, 0x0D, 0xB8] + [0] * 11 + [1] + [0x12, 0x34, 0x00, 0x50])
    tlvs = bytes([0x01, 0x00, 0x02]) + b"h2" + bytes([0xEA, 0x00, 0x05, 0x01]) + b"vpce" + bytes([0x04, 0x00, 0x00])
    binary = [
        proxy_v2(0x11, body4) + b"GET / HTTP/1.1\r\n",
        proxy_v2(0x21, body6 + tlvs) + bytes([0x16, 0x03, 0x01]),
        proxy_v2(0x12, body4),
        proxy_v2(0x00, b"", command=0),
        proxy_v2(0x11, bytes([10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2]), command=0),
        proxy_v2(0x00, bytes([0x04, 0x00, 0x00])),
        proxy_v2(0x31, bytes([0x2F]) * 216),
        proxy_v2(0x11, body4 + bytes([0x01, 0x00])),
        V2_SIGNATURE + bytes([0x21, 0x11, 0x10, 0x00]) + body4,
        proxy_v2(0x11, body4)[:20],
    ]
    return [l.encode("latin-1") for l in lines] + binary


# --- HTTP/1.1 (Tests/GatewayHTTPTests/Resources/http1, the conformance and smuggling cases) -------
HTTP1_CASES = os.path.join(HERE, "..", "Tests", "GatewayHTTPTests", "Resources", "http1")


def http1_seeds():
    """[split selector] [options] [request]: each case once whole, the ok and chunk cases also cut and
    with the other options (FuzzHTTP1.swift says what the option bits do)."""
    out = []
    for path in sorted(glob.glob(os.path.join(HTTP1_CASES, "*.http"))):
        raw = open(path, "rb").read()
        message = raw.split(b"\n", 1)[1]  # the first line is "# expect: …"
        name = os.path.basename(path)
        out.append(bytes([0, 0]) + message)
        if name.startswith("ok-") or name.startswith("chunk-"):
            out.append(bytes([5, 0x0A]) + message)  # cut in 5, edit 1, a trusted peer
            out.append(bytes([3, 0x35]) + message)  # cut in 3, small limits, edit 2, foldable names dropped
    handmade = [
        b"GET /api//x/./y/../z%2e%41?q=1 HTTP/1.1\r\nHost: a.example\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n"
        b"X-Forwarded-For: 10.0.0.1\r\nVia: 1.0 lb\r\nTE: trailers, gzip\r\nExpect: 100-continue\r\nX_App_Attest_Key_Id: f\r\n\r\n",
        b"POST http://shop.example:8080/api/x;jsessionid=1.json HTTP/1.1\r\nHost: other\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n",
        b"POST /u HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n",
        b"GET /a/b.%20./c;p HTTP/1.0\r\nCookie: a=b\r\nUser-Agent: t\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: [2001:db8::1]:443\r\nContent-Length: 0\r\n\r\n",
    ]
    out += [bytes([0, 0]) + h for h in handmade] + [bytes([7, 0x1E]) + h for h in handmade]
    out.append(bytes([4, 0x80]) + b"4\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\n")
    out.append(bytes([6, 0xA0]) + b"3;a=b\r\nabc\r\n0\r\nTrailer-Field: v\r\n\r\n")
    return out


# --- RESP2 replies (Tests/GatewayRedisTests/RESPReaderTests.swift) --------------------------------
def resp_encode(v):
    if isinstance(v, bytes):
        return b"$%d\r\n" % len(v) + v + b"\r\n"
    if isinstance(v, int):
        return b":%d\r\n" % v
    if isinstance(v, list):
        return b"*%d\r\n" % len(v) + b"".join(resp_encode(x) for x in v)
    if v is None:
        return b"$-1\r\n"
    kind, text = v  # ("+", "OK") or ("-", "ERR x")
    return kind.encode() + text.encode() + b"\r\n"


def resp_random(rng, depth):
    k = rng.randrange(7 if depth > 0 else 6)
    if k in (0, 1):
        n = rng.randrange(25) if rng.random() < 0.7 else rng.randrange(300)
        alphabet = b"\x00\r\n$*:-+a\xff"
        return bytes(rng.choice(alphabet) if rng.random() < 0.5 else rng.randrange(256) for _ in range(n))
    if k == 2:
        return rng.choice([-(2 ** 63), 2 ** 63 - 1, 0, -1, rng.randrange(-(2 ** 40), 2 ** 40)])
    if k == 3:
        text = "".join(chr(rng.randrange(0x20, 0x7F)) for _ in range(rng.randrange(20)))
        return ("+", text) if rng.random() < 0.5 else ("-", "ERR " + text)
    if k == 4:
        return None
    if k == 5:
        return []
    return [resp_random(rng, depth - 1) for _ in range(rng.randrange(1, 5))]


def resp_seeds():
    """[split selector] [reply stream]."""
    import random
    fixed = [
        b"+OK\r\n", b"+\r\n", b"-NOSCRIPT No matching script. Please use EVAL.\r\n", b":0\r\n",
        b":-9223372036854775808\r\n", b":9223372036854775807\r\n", b"$0\r\n\r\n", b"$-1\r\n", b"*-1\r\n", b"*0\r\n",
        b"$6\r\na\r\nb\r\n\r\n", b"*3\r\n+committed\r\n:41\r\n*2\r\n$3\r\nctr\r\n$-1\r\n", b"*2\r\n*1\r\n*0\r\n:1\r\n",
        b"!5\r\nhello\r\n", b"%1\r\n+a\r\n+b\r\n", b"_\r\n", b":12a\r\n", b":\r\n", b":99999999999999999999\r\n",
        b"$x\r\n", b"$-2\r\n", b"$3\r\nabcXY", b"$536870913\r\n", b"*-5\r\n", b"*4294967296\r\n", b"*1\r\n*1\r\n\x07\r\n",
        b"*1\r\n" * 9 + b":1\r\n", b"*1\r\n" * 7 + b":1\r\n", b"$+3\r\nabc\r\n", b":+5\r\n", b":-0\r\n",
        b"+OK\r\n*2\r\n$5\r\nhel", b"+a\rb\r\n",
    ]
    rng = random.Random(0x5EED)
    streams = []
    for _ in range(40):
        streams.append(b"".join(resp_encode(resp_random(rng, 3)) for _ in range(rng.randrange(1, 5))))
    out = [bytes([0]) + f for f in fixed] + [bytes([3]) + f for f in fixed[:12]]
    out += [bytes([rng.randrange(256)]) + st for st in streams]
    return out


# --- HTTP/2 (frames after the preface; HPACK literals without Huffman) ----------------------------
def hpack_int(value, prefix_bits, first):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes(out + [value])


def hpack(fields, indexing=False):
    """Literal fields (with incremental indexing when asked), names and values as raw strings."""
    out = b""
    for name, value in fields:
        n, v = name.encode("latin-1"), value.encode("latin-1")
        out += bytes([0x40 if indexing else 0x00]) + hpack_int(len(n), 7, 0) + n + hpack_int(len(v), 7, 0) + v
    return out


def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


DATA, HEADERS, PRIORITY, RST, SETTINGS, PING, GOAWAY, WINDOW, CONTINUATION = 0, 1, 2, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20


def get(path="/", authority="a.example", extra=(), method="GET"):
    return [(":method", method), (":scheme", "https"), (":authority", authority), (":path", path)] + list(extra)


def http2_seeds():
    """[split selector] [options] [frames after the preface]."""
    client_settings = frame(SETTINGS, 0, 0, bytes([0, 4, 0, 1, 0, 0, 0, 3, 0, 0, 0, 100]))
    start = client_settings + frame(SETTINGS, ACK, 0)
    post = get("/api/purchase", extra=[("content-length", "5"), ("content-type", "application/json")], method="POST")
    scenarios = [
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get())),
        start + frame(HEADERS, END_HEADERS, 1, hpack(post)) + frame(DATA, END_STREAM, 1, b"hello"),
        start + frame(HEADERS, END_HEADERS, 1, hpack(get("/up", extra=[("te", "trailers")], method="PUT")))
        + frame(DATA, 0, 1, b"abc") + frame(WINDOW, 0, 1, (65535).to_bytes(4, "big"))
        + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack([("x-trailer", "1")])),
        start + frame(HEADERS, END_STREAM, 1, hpack(get()[:2])) + frame(CONTINUATION, END_HEADERS, 1, hpack(get()[2:])),
        start + b"".join(frame(HEADERS, END_HEADERS | END_STREAM, i, hpack(get("/s%d" % i), indexing=True)) for i in (1, 3, 5, 7, 9)),
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get(extra=[("x-big", "v" * 1500)]))),
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack([(":method", "GET"), (":path", "/")])),
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get(extra=[("Upper", "x")]))),
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get(extra=[("connection", "close")]))),
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get(extra=[("host", "b.example")]))),
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get("*", method="OPTIONS"))),
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get("/a b"))),
        start + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get(extra=[("cookie", "a=1"), ("cookie", "b=2"), ("x-v", "a\x01b")]))),
        start + frame(HEADERS, END_HEADERS, 1, hpack(post)) + frame(RST, 0, 1, (8).to_bytes(4, "big")),
        start + b"".join(frame(HEADERS, END_HEADERS, i, hpack(get())) + frame(RST, 0, i, (8).to_bytes(4, "big")) for i in range(1, 40, 2)),
        start + frame(PING, 0, 0, b"12345678") * 4 + frame(SETTINGS, 0, 0) * 3,
        start + frame(HEADERS, END_HEADERS | END_STREAM, 3, hpack(get())) + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get())),
        start + frame(HEADERS, END_HEADERS | END_STREAM | PADDED | PRIO, 1, bytes([4]) + bytes(5) + hpack(get()) + bytes(4)),
        start + frame(PRIORITY, 0, 3, bytes(5)) + frame(GOAWAY, 0, 0, bytes(8)),
        start + frame(HEADERS, END_HEADERS, 1, hpack(post)) + frame(DATA, PADDED, 1, bytes([2]) + b"hel" + bytes(2))
        + frame(DATA, END_STREAM, 1, b"lo"),
        start + frame(WINDOW, 0, 0, (0x7FFFFFFF).to_bytes(4, "big")) + frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get())),
        frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack(get())),
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    ]
    out = []
    for i, sc in enumerate(scenarios):
        out.append(bytes([0, 0x10]) + sc)
        out.append(bytes([3 + i % 5, 0x21 + 2 * i]) + sc)
    return out


# --- gateway.yaml (the shipped files, and the YAML of Tests/GatewayConfigTests) --------------------
def config_seeds():
    import re
    import textwrap
    root = os.path.join(HERE, "..")
    files = ["gateway.yaml", "deploy/systemd/gateway.yaml", "deploy/container/gateway.yaml", "samples/simulator/gateway.yaml"]
    out = [open(os.path.join(root, f), "rb").read() for f in files]
    minimal = open(os.path.join(root, "Tests", "GatewayConfigTests", "ConfigFixture.swift")).read()
    minimal = textwrap.dedent(re.search(r'static let minimal = """\n(.*?)\n\s*"""', minimal, re.S).group(1)) + "\n"
    for path in sorted(glob.glob(os.path.join(root, "Tests", "GatewayConfigTests", "*.swift"))):
        for m in re.finditer(r'"""\n(.*?)\n\s*"""', open(path).read(), re.S):
            block = textwrap.dedent(m.group(1))
            if ":" not in block or "\\(" in block:
                continue  # not YAML, or interpolated
            out.append(block.encode())
            if not block.lstrip().startswith("listeners"):
                out.append((minimal + block + "\n").encode())
    out += [
        b"listeners: &l\n  - {name: public, address: 0.0.0.0:${GW_PORT}}\nupstreams:\n  - {name: demo, url: demo}\n"
        b"routes:\n  - {name: default, match: {path_prefix: /}, upstream: demo}\nadmin: {<<: *l}\n",
        b"a: &a [*a]\n",
        b"x: &x [1, 2]\ny: &y [*x, *x, *x]\nz: [*y, *y, *y]\n",
        b"listeners:\r\n  - {name: p, address: ':8080'}\r\n\tbad\r\n",
        b"%YAML 1.1\n---\nlisteners: !!str x\n...\n",
    ]
    return out


# --- the attest endpoints' JSON bodies -------------------------------------------------------------
def attest_body_seeds(attestations):
    key = "YmbJO4x5nEHUvncp9zdWuVZjNBEMgJn3cdSToAXQe3M="
    challenge = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")
    smallest = base64.b64encode(attestations[0]).decode()
    bodies = [
        "", "  \r\n", "{}", "[]", "null", "\"x\"", "{\"purpose\":\"register\"}", "{\"purpose\":\"assert\",\"keyId\":\"%s\"}" % key,
        "{\"purpose\":\"other\"}", "{\"purpose\":1}", "{\"keyId\":\"%s\"}" % ("ab" * 32), "{\"keyId\":\"AAAA\"}",
        "{\"keyId\":\"%s\",\"extra\":[1,2,{\"a\":null}],\"purpose\":\"register\"}" % key,
        "{\"keyId\":\"%s\",\"attestation\":\"%s\",\"challenge\":\"%s\"}" % (key, smallest, challenge),
        "{\"keyId\":\"%s\",\"attestation\":\"o2NmbXQ=\",\"challenge\":\"%s\"}" % (key, challenge),
        "{\"keyId\":\"%s\",\"attestation\":\"!!\",\"challenge\":\"%s\"}" % (key, challenge),
        "{\"keyId\":\"%s\",\"attestation\":\"o2NmbXQ=\",\"challenge\":\"short\"}" % key,
        "{\"challenge\":\"%s\"}" % challenge, "{\"challenge\":5}", "{\"keyId\":\"x\",\"attestation\":\"y\"}",
        "{\"keyId\":\"\\u0041\\ud83d\\ude00\",\"challenge\":\"\\/\"}", "{\"a\":1e999,\"b\":-0.0,\"c\":12345678901234567890}",
        "[" * 40 + "]" * 40, "{\"purpose\":\"register\"", "{\"purpose\":\"register\"}}",
    ]
    return [b.encode() for b in bodies]


# --- receipts (Tests/AppAttestTests/Vectors/receipts-*.json) and their payloads --------------------
def ber(b, i):
    """(tag, contents, end) of the BER item at b[i]: contents are bytes (primitive) or a list of items."""
    tag = b[i]
    n = b[i + 1]
    i += 2
    if n == 0x80:  # indefinite: items up to 00 00
        items = []
        while b[i] != 0 or b[i + 1] != 0:
            item = ber(b, i)
            items.append(item)
            i = item[2]
        return tag, items, i + 2
    if n > 0x80:
        size = n & 0x7F
        n = int.from_bytes(b[i:i + size], "big")
        i += size
    if tag & 0x20:  # constructed
        items, j = [], i
        while j < i + n:
            item = ber(b, j)
            items.append(item)
            j = item[2]
        return tag, items, i + n
    return tag, b[i:i + n], i + n


def octets(item):
    tag, contents, _ = item
    return contents if tag == 0x04 else b"".join(octets(x) for x in contents)


def receipt_payload(receipt):
    content_info = ber(receipt, 0)
    signed_data = content_info[1][1][1][0]           # [0] EXPLICIT SignedData
    encap = signed_data[1][2]                          # version, digestAlgorithms, encapContentInfo
    return octets(encap[1][1][1][0])                   # eContent [0] EXPLICIT OCTET STRING


def receipt_seeds():
    """[mode] [bytes]: mode 0 a receipt (CMS), mode 1 a payload."""
    out = []
    for path in sorted(glob.glob(os.path.join(VECTORS, "receipts-*.json"))):
        for case in json.load(open(path))["cases"]:
            r = base64.b64decode(case["receipt_b64"])
            out.append(b"\x00" + r)
            out.append(b"\x01" + receipt_payload(r))
    return out


# --- Apple's answers: the data service's receipt refresh, DeviceCheck ------------------------------
APPLE_STATUSES = [200, 304, 400, 401, 403, 404, 429, 500, 502, 503, 599, 204, 301, 0, 99, 199, 600, 999, -1]


def apple_answer(service, status, header, body):
    return bytes([service, APPLE_STATUSES.index(status)]) + header.encode() + b"\x00" + body


def apple_answer_seeds():
    """[service] [status index] [header] 0x00 [body] (FuzzAppleAnswers.swift)."""
    cases = json.load(open(os.path.join(VECTORS, "receipts-veehaitch-devicecheck-appattest.json")))["cases"]
    by_name = {c["name"]: c["receipt_b64"] for c in cases}
    valid = by_name["veehaitch-ios-14.4-receipt-db4be8c9"]
    out = [
        apple_answer(0, 200, "", valid.encode()),
        apple_answer(0, 200, "", b"  " + valid.encode() + b"\r\n"),
        apple_answer(0, 200, "", by_name["veehaitch-ios-14.4-attest-5a296111"].encode()),
        apple_answer(0, 200, "", b"not base64"),
        apple_answer(0, 200, "", b""),
        apple_answer(0, 304, "", b""),
        apple_answer(0, 404, "", b""),
        apple_answer(0, 429, "120", b""),
        apple_answer(0, 503, "Sat, 23 Jan 2021 12:30:00 GMT", b""),
        apple_answer(0, 500, "Sun, 06 Nov 1994 08:49:37 GMT", b""),
        apple_answer(0, 401, " 5 ", b""),
        apple_answer(0, 400, "", b"Bad request"),
    ]
    for call in (0, 1, 2):  # validate, query, update
        service = 1 + 2 * call
        out += [
            apple_answer(service, 200, "bit0=1; bit1=0", b"{\"bit0\":0,\"bit1\":1,\"last_update_time\":\"2021-01\"}"),
            apple_answer(service, 200, "bit1=true", b"Bit State Not Found"),
            apple_answer(service, 200, "", b"{\"bit0\":true,\"bit1\":false}"),
            apple_answer(service, 400, "", b"Missing or incorrectly formatted device token payload"),
            apple_answer(service, 400, "", b"Invalid time stamp"),
            apple_answer(service, 400, "", b"Unable to verify authorization token"),
            apple_answer(service, 401, "", b""),
            apple_answer(service, 429, "30", b""),
            apple_answer(service, 503, "Mon, 07 Dec 2026 12:00:00 GMT", b""),
        ]
    out.append(apple_answer(3, 200, base64.b64encode(bytes(range(40))).decode(), b"{}"))
    return out


# --- damage to the memory store's files (FuzzStoreFiles.swift: 4-byte operations) -----------------
def store_op(kind, file, offset, arg=0):
    """file: 0 journal segment 2, 1 segment 3 (the last), 2 receipts.dat, 3 snapshot.dat (name order)."""
    return bytes([kind * 16 + file, offset >> 8, offset & 0xFF, arg])


def store_file_seeds():
    XOR, CUT, TO_END, ZERO, DELETE, SET = 0, 8, 10, 11, 12, 13
    out = [b""]
    for f in (0, 1):
        for off in (24, 25, 28, 33, 40, 70, 130, 200, 400):  # lengths, checksums, types, keys, counters
            out.append(store_op(XOR, f, off, 0x40))
        out += [store_op(CUT, f, 100), store_op(CUT, f, 24), store_op(CUT, f, 10), store_op(TO_END, f, 24), store_op(TO_END, f, 24, 0xF8),
                store_op(ZERO, f, 60, 31), store_op(SET, f, 24, 0), store_op(SET, f, 24, 3), store_op(XOR, f, 5, 1),
                store_op(XOR, f, 13, 1), store_op(XOR, f, 16, 1)]
    out += [store_op(DELETE, 1, 0), store_op(DELETE, 0, 0), store_op(XOR, 3, 100, 2), store_op(CUT, 3, 0), store_op(DELETE, 3, 0),
            store_op(XOR, 2, 10, 0xFF), store_op(CUT, 2, 0), store_op(XOR, 0, 40, 1) + store_op(XOR, 0, 140, 1),
            store_op(TO_END, 0, 24) + store_op(XOR, 1, 60, 8), store_op(CUT, 1, 300) + store_op(XOR, 0, 90, 4)]
    return out


def main():
    attestations, assertions = [], []
    for path in sorted(glob.glob(os.path.join(VECTORS, "appattest-*.json"))):
        for case in json.load(open(path))["cases"]:
            if case.get("attestation_b64"):
                attestations.append(base64.b64decode(case["attestation_b64"]))
            if case.get("assertion_b64"):
                assertions.append(base64.b64decode(case["assertion_b64"]))
    attestations = sorted(set(attestations), key=len)
    assertions = sorted(set(assertions), key=len)

    att_auth = [bstr(top_map(a)["authData"]) for a in attestations]
    ass_auth = [bstr(top_map(a)["authenticatorData"]) for a in assertions]
    cose = []
    for ad in att_auth:
        if ad[32] & 0x40 and len(ad) >= 55:
            start = 55 + int.from_bytes(ad[53:55], "big")
            cose.append(ad[start:skip(ad, start)])

    # The veehaitch iOS 14.4 assertion: the fixed context of FuzzAssertion.
    ios144 = base64.b64decode(
        "omlzaWduYXR1cmVYRjBEAiBJ6BT/QR689UKy84YyN3RDydYD9KVQ2BTRK+x1i8ezqAIgGM7BsZbSuF6TjmK6xtOFekyVyjf8akGvp5qFRGm9"
        "LTxxYXV0aGVudGljYXRvckRhdGFYJUVlEup+JpR2q5Pht5cWhVkv9z+JSsDsL9VICKCL+2yPQAAAAAE=")
    m = top_map(ios144)
    sig, ad = bstr(m["signature"]), bstr(m["authenticatorData"])
    ios27_assertions = [enc({"signature": sig, "authenticatorData": ios27(ad, f)}) for f in (False, True)]
    ios27_auth = [ios27(ass_auth[0], f) for f in (False, True)] + [ios27(att_auth[0], f) for f in (False, True)]

    handmade = [
        bytes.fromhex("f93c00"),  # 1.0 half
        bytes.fromhex("f90001"),  # smallest half subnormal
        bytes.fromhex("f97e00"),  # half NaN
        bytes.fromhex("fa47c35000"),  # 100000.0 single
        bytes.fromhex("fb3ff199999999999a"),  # 1.1 double
        bytes.fromhex("3bffffffffffffffff"),  # -2^64
        bytes.fromhex("1bffffffffffffffff"),  # 2^64 - 1
        bytes.fromhex("f8ff"),  # simple(255)
        enc([1, [2, [3, [4, {"a": b"\x00", -7: "\u00e9"}]]], True, False, None]),
        EXTENSIONS,
    ]

    sets = {
        "FuzzAttestation": attestations,
        "FuzzAssertion": assertions + ios27_assertions,
        "FuzzAuthenticatorData": att_auth + ass_auth + ios27_auth,
        "FuzzCBOR": assertions + ios27_assertions + attestations[:2] + cose + handmade,
        "FuzzProxyProtocol": proxy_protocol_seeds(),
        "FuzzHTTP1": http1_seeds(),
        "FuzzRESP": resp_seeds(),
        "FuzzHTTP2": http2_seeds(),
        "FuzzConfig": config_seeds(),
        "FuzzAttestBody": attest_body_seeds(attestations),
        "FuzzReceipt": receipt_seeds(),
        "FuzzAppleAnswers": apple_answer_seeds(),
        "FuzzStoreFiles": store_file_seeds(),
    }
    wanted = sys.argv[1:] or list(sets)
    for target, items in sets.items():
        if target not in wanted:
            continue
        d = os.path.join(OUT, target)
        os.makedirs(d, exist_ok=True)
        names = set()
        for b in items:
            name = hashlib.sha1(b).hexdigest()
            names.add(name)
            with open(os.path.join(d, name), "wb") as f:
                f.write(b)
        total = sum(len(b) for b in set(items))
        print(f"{target}: {len(names)} files, {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
