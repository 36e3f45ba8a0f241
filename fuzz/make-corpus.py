#!/usr/bin/env python3
"""Rebuilds fuzz/corpus/<Target>/ from the real device vectors in Tests/AppAttestTests/Vectors.

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
    }
    for target, items in sets.items():
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
