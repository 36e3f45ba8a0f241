#!/usr/bin/env python3
"""Replays the HTTP/2 conformance cases (h2spec's) that leave a stream waiting on the client's
flow-control window, then leaves: closes the socket, or stays connected and never opens the window.
Prints a JSON verdict. The caller (HTTP2DeadlineTests) counts the server's sockets afterwards.

    leftovers.py CASE --port PORT [--tls] [--leave close|stay] [--stay-seconds S] [--path P]
    leftovers.py --list

Cases (h2spec's names; each sets a small or zero SETTINGS_INITIAL_WINDOW_SIZE, so the response's
DATA waits on a window the client controls):
  generic/2/2     IWS 0, GET, WINDOW_UPDATE 1 on the stream, read the one DATA byte
  generic/2/3     the same with a PRIORITY frame before the WINDOW_UPDATE
  http2/6.5.3/1   IWS 100 then 1 in one SETTINGS, GET, read a DATA of length 1
  http2/6.9.1/1   IWS 1, GET, read a DATA of length 1
  http2/6.9.2/1   IWS 0, GET, IWS 1, read a DATA of length 1
  http2/6.9.2/2   IWS 3, GET, read DATA, IWS 2 (window negative), WINDOW_UPDATE 2, read DATA
  body-after-response  a POST declaring 10 body bytes, sending 1, refused from its head (the
                  response is complete, the request is not): the stream waits on the client's DATA

The verdict: {"case", "data_bytes" (DATA payload bytes received before leaving), "status" (:status
of stream 1), "rst" (RST_STREAM frames: stream, code, seconds after leaving began), "goaway",
"closed" (the server closed while we stayed), "closed_after" (seconds)}.
"""

import argparse
import json
import struct
import sys
import time

from hostile import (DATA, END_HEADERS, END_STREAM, HEADERS, PRIORITY, SETTINGS, WINDOW_UPDATE, ACK,
                     start, frame)

IWS = 0x4


def settings(c, *pairs):
    c.raw(frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs)))


def window_update(c, stream, n):
    c.raw(frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", n)))


class DataCounter:
    """Counts DATA payload bytes per stream as frames are parsed."""

    def __init__(self, c):
        self.bytes = {}
        self.settings_acks = 0
        original = c._on_frame

        def on_frame(ftype, flags, stream, payload):
            if ftype == DATA:
                self.bytes[stream] = self.bytes.get(stream, 0) + len(payload)
            if ftype == SETTINGS and flags & ACK:
                self.settings_acks += 1
            original(ftype, flags, stream, payload)

        c._on_frame = on_frame


def wait_data(c, counter, at_least, timeout=3):
    c.read_until(lambda _: counter.bytes.get(1, 0) >= at_least, timeout)


def wait_settings_ack(c, counter, n, timeout=3):
    c.read_until(lambda _: counter.settings_acks >= n, timeout)


def get(c, path):
    c.headers(1, c.request_headers(path))


def case_generic_2_2(c, k, a):
    settings(c, (IWS, 0))
    get(c, a.path)
    window_update(c, 1, 1)
    wait_data(c, k, 1)


def case_generic_2_3(c, k, a):
    settings(c, (IWS, 0))
    get(c, a.path)
    c.raw(frame(PRIORITY, 0, 1, struct.pack(">IB", 0, 255)))
    window_update(c, 1, 1)
    wait_data(c, k, 1)


def case_6_5_3_1(c, k, a):
    settings(c, (IWS, 100), (IWS, 1))
    wait_settings_ack(c, k, 2)
    get(c, a.path)
    wait_data(c, k, 1)


def case_6_9_1_1(c, k, a):
    settings(c, (IWS, 1))
    wait_settings_ack(c, k, 2)
    get(c, a.path)
    wait_data(c, k, 1)


def case_6_9_2_1(c, k, a):
    settings(c, (IWS, 0))
    wait_settings_ack(c, k, 2)
    get(c, a.path)
    settings(c, (IWS, 1))
    wait_data(c, k, 1)


def case_6_9_2_2(c, k, a):
    settings(c, (IWS, 3))
    wait_settings_ack(c, k, 2)
    get(c, a.path)
    wait_data(c, k, 3)
    settings(c, (IWS, 2))
    wait_settings_ack(c, k, 3)
    window_update(c, 1, 2)
    wait_data(c, k, 4)


def case_body_after_response(c, k, a):
    # A declared length that fits the window: the gateway lets the rest come (some clients report
    # an upload error instead of the response when a reset cuts their upload), and waits for it.
    c.headers(1, c.request_headers(a.path, "POST") + [("content-length", "10")], end_stream=False)
    c.raw(frame(DATA, 0, 1, b"x"))
    c.read_until(lambda c: 1 in c.ended or 1 in c.statuses, 3)


CASES = {
    "generic/2/2": case_generic_2_2, "generic/2/3": case_generic_2_3, "http2/6.5.3/1": case_6_5_3_1,
    "http2/6.9.1/1": case_6_9_1_1, "http2/6.9.2/1": case_6_9_2_1, "http2/6.9.2/2": case_6_9_2_2,
    "body-after-response": case_body_after_response,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", nargs="?")
    p.add_argument("--port", type=int)
    p.add_argument("--tls", action="store_true")
    p.add_argument("--leave", choices=["close", "stay"], default="close")
    p.add_argument("--stay-seconds", type=float, default=5)
    p.add_argument("--path", default="/")
    p.add_argument("--list", action="store_true")
    a = p.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    if a.case not in CASES or not a.port:
        p.error("unknown case or no --port (see --list)")
    c = start(a.port, tls=a.tls)
    k = DataCounter(c)
    k.settings_acks = 1 if c.settings_seen else 0  # start() waited for the server's SETTINGS only
    CASES[a.case](c, k, a)
    verdict = {"case": a.case, "data_bytes": k.bytes.get(1, 0), "status": c.statuses.get(1)}
    began = time.monotonic()
    rst_seen = len(c.rst)
    timed = []
    if a.leave == "stay":
        # Connected, reading, never opening a window nor answering a PING: what does the server do,
        # and when? (A GOAWAY does not make us leave: the server must close by itself.)
        deadline = began + a.stay_seconds
        while not c.closed and time.monotonic() < deadline:
            c.read_until(lambda c: len(c.rst) > rst_seen, deadline - time.monotonic())
            for r in c.rst[rst_seen:]:
                timed.append(dict(r, after=round(time.monotonic() - began, 2)))
            rst_seen = len(c.rst)
    verdict.update({"rst": timed if a.leave == "stay" else c.rst, "goaway": c.goaway, "closed": c.closed,
                    "closed_after": round(time.monotonic() - began, 2)})
    c.close()
    print(json.dumps(verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
