#!/usr/bin/env python3
"""Replays requests pre-signed by `attest-sim presign` (one per line, tab-separated: method,
request-target, key id, challenge or "-", assertion, body) over a few HTTP/1.1 keep-alive
connections, one request at a time per connection, for instruction counting (bench/enforce-callgrind).

    presigned-client.py PORT FILE REQUESTS [--conns N] [--skip K] [--expect 200]

Line i (after the first K) goes to connection i % N: with a number of keys divisible by N (presign
writes the lines round-robin over the keys), each key's requests travel on one connection, in
order, so its counters arrive in order. Exits 1 if a response has another status than --expect, a
connection breaks, or the file holds fewer than REQUESTS lines after the skipped ones.
"""
import argparse
import selectors
import socket
import sys


def build(line: str, host: str) -> bytes:
    method, target, key, challenge, assertion, body = line.rstrip("\n").split("\t", 5)
    fields = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"X-App-Attest-Key-Id: {key}", f"X-App-Assertion: {assertion}"]
    if challenge != "-":
        fields.append(f"X-App-Attest-Challenge: {challenge}")
    data = body.encode("latin-1")
    if data or method in ("POST", "PUT", "PATCH"):
        fields.append(f"Content-Length: {len(data)}")
        fields.append("Content-Type: application/octet-stream")
    return ("\r\n".join(fields) + "\r\n\r\n").encode("latin-1") + data


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("file")
    ap.add_argument("requests", type=int)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--expect", default="200")
    ap.add_argument("--host", default="127.0.0.1")
    a = ap.parse_args()
    with open(a.file, encoding="latin-1") as f:
        lines = f.readlines()[a.skip:a.skip + a.requests]
    if len(lines) < a.requests:
        print(f"the file has {len(lines)} requests after {a.skip}, not {a.requests}", file=sys.stderr)
        return 1
    host = f"{a.host}:{a.port}"
    queues = [[] for _ in range(a.conns)]
    for i, line in enumerate(lines):
        queues[i % a.conns].append(build(line, host))
    sel = selectors.DefaultSelector()
    conns = []
    for q in queues:
        if not q:
            continue
        s = socket.create_connection((a.host, a.port), timeout=60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        st = {"sock": s, "buf": b"", "queue": q, "next": 1}
        s.sendall(q[0])
        s.setblocking(False)
        conns.append(st)
        sel.register(s, selectors.EVENT_READ, st)
    done = 0
    while done < a.requests:
        events = sel.select(timeout=60)
        if not events:
            print("timeout", file=sys.stderr)
            return 1
        for key, _ in events:
            st = key.data
            chunk = st["sock"].recv(65536)
            if not chunk:
                print("connection closed by server", file=sys.stderr)
                return 1
            st["buf"] += chunk
            while True:
                buf = st["buf"]
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = buf[:end].decode("latin-1").split("\r\n")
                length = 0
                for h in head[1:]:
                    k, _, v = h.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v.strip())
                if len(buf) < end + 4 + length:
                    break
                if not head[0].startswith("HTTP/1.1 " + a.expect):
                    print("unexpected: " + head[0] + " " + buf[end + 4:end + 4 + length].decode("latin-1"), file=sys.stderr)
                    return 1
                st["buf"] = buf[end + 4 + length:]
                done += 1
                if st["next"] < len(st["queue"]):
                    st["sock"].setblocking(True)
                    st["sock"].sendall(st["queue"][st["next"]])
                    st["sock"].setblocking(False)
                    st["next"] += 1
    for st in conns:
        st["sock"].close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
