#!/usr/bin/env python3
"""A fixed number of HTTP/1.1 keep-alive requests over a few connections, one at a time per
connection (no pipelining), for instruction counting: the server's cost per request is the
difference of two runs divided by the difference of their request counts.

    keepalive-client.py PORT REQUESTS [--conns N] [--path /] [--body BYTES]
Exits 1 if any response is not 200 or a connection breaks.
"""
import argparse
import selectors
import socket
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("requests", type=int)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--path", default="/")
    ap.add_argument("--body", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    a = ap.parse_args()
    method = "POST" if a.body else "GET"
    req = f"{method} {a.path} HTTP/1.1\r\nHost: {a.host}:{a.port}\r\n"
    if a.body:
        req += f"Content-Length: {a.body}\r\n"
    req = req.encode() + b"\r\n" + b"x" * a.body
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(min(a.conns, a.requests)):
        s = socket.create_connection((a.host, a.port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        state = {"sock": s, "buf": b""}
        conns.append(state)
        sel.register(s, selectors.EVENT_READ, state)
    sent = done = 0
    for st in conns:
        st["sock"].sendall(req)
        sent += 1
    while done < a.requests:
        events = sel.select(timeout=30)
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
                if not head[0].startswith("HTTP/1.1 200"):
                    print("unexpected: " + head[0], file=sys.stderr)
                    return 1
                length = 0
                for line in head[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v.strip())
                if len(buf) < end + 4 + length:
                    break
                st["buf"] = buf[end + 4 + length:]
                done += 1
                if sent < a.requests:
                    st["sock"].sendall(req)
                    sent += 1
    for st in conns:
        st["sock"].close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
