"""A software App Attest device in pure Python (stdlib only), for the attack suite's positive cases.

It plays what `attest-sim` plays (docs/attest-sim.md), byte for byte the same layouts: a P-256 key,
a credential certificate issued by the intermediate of a test CA made with `attest-sim ca` (the
CA's `intermediate.pem` and `intermediate-key.pem`, P-384), the CBOR attestation object
{"fmt":"apple-appattest","attStmt":{"x5c","receipt"},"authData"} and assertions
{"signature","authenticatorData"} with an increasing counter. The gateway under test must list the
CA's root.pem in trust.extra_roots. Never useful against a production gateway (Apple's root only).

The elliptic-curve arithmetic is textbook (Jacobian coordinates, random nonces from `secrets`): fine
for a few dozen signatures in a test, not a crypto library.
"""

import base64
import datetime
import hashlib
import json
import secrets
import struct

# --- elliptic curves (short Weierstrass, a = -3) -------------------------------------------------


class Curve:
    def __init__(self, name, p, b, n, gx, gy, size, hashfn):
        self.name, self.p, self.a, self.b, self.n = name, p, p - 3, b, n
        self.g = (gx, gy)
        self.size = size
        self.hashfn = hashfn

    def _double(self, P):
        X, Y, Z = P
        if Y == 0 or Z == 0:
            return (0, 1, 0)
        p = self.p
        S = 4 * X * Y * Y % p
        M = (3 * X * X + self.a * pow(Z, 4, p)) % p
        X3 = (M * M - 2 * S) % p
        Y3 = (M * (S - X3) - 8 * pow(Y, 4, p)) % p
        Z3 = 2 * Y * Z % p
        return (X3, Y3, Z3)

    def _add(self, P, Q):
        if P[2] == 0:
            return Q
        if Q[2] == 0:
            return P
        p = self.p
        X1, Y1, Z1 = P
        X2, Y2, Z2 = Q
        Z1s, Z2s = Z1 * Z1 % p, Z2 * Z2 % p
        U1, U2 = X1 * Z2s % p, X2 * Z1s % p
        S1, S2 = Y1 * Z2s * Z2 % p, Y2 * Z1s * Z1 % p
        if U1 == U2:
            return self._double(P) if S1 == S2 else (0, 1, 0)
        H, R = (U2 - U1) % p, (S2 - S1) % p
        H2 = H * H % p
        H3 = H * H2 % p
        U1H2 = U1 * H2 % p
        X3 = (R * R - H3 - 2 * U1H2) % p
        Y3 = (R * (U1H2 - X3) - S1 * H3) % p
        Z3 = H * Z1 * Z2 % p
        return (X3, Y3, Z3)

    def mul(self, k, point=None):
        x, y = point or self.g
        R, P = (0, 1, 0), (x, y, 1)
        while k:
            if k & 1:
                R = self._add(R, P)
            P = self._double(P)
            k >>= 1
        X, Y, Z = R
        if Z == 0:
            raise ValueError("point at infinity")
        zi = pow(Z, -1, self.p)
        return (X * zi * zi % self.p, Y * zi * zi * zi % self.p)

    def public_point(self, d):
        x, y = self.mul(d)
        return b"\x04" + x.to_bytes(self.size, "big") + y.to_bytes(self.size, "big")

    def sign(self, d, message):
        """ECDSA over hash(message) (SHA-256 for P-256, SHA-384 for P-384); DER signature."""
        z = int.from_bytes(self.hashfn(message).digest(), "big")
        while True:
            k = secrets.randbelow(self.n - 1) + 1
            r = self.mul(k)[0] % self.n
            if r == 0:
                continue
            s = pow(k, -1, self.n) * (z + r * d) % self.n
            if s:
                return der_seq(der_int(r), der_int(s))


P256 = Curve(
    "P-256",
    0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF,
    0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B,
    0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
    0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5,
    32, hashlib.sha256)

P384 = Curve(
    "P-384",
    0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEFFFFFFFF0000000000000000FFFFFFFF,
    0xB3312FA7E23EE7E4988E056BE3F82D19181D9C6EFE8141120314088F5013875AC656398D8A2ED19D2A85C8EDD3EC2AEF,
    0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973,
    0xAA87CA22BE8B05378EB1C71EF320AD746E1D3B628BA79B9859F741E082542A385502F25DBF55296C3A545E3872760AB7,
    0x3617DE4A96262C6F5D9E98BF9292DC29F8F41DBD289A147CE9DA3113B5F0B8C00A60B1CE1D7E819D7A431D7C90EA0E5F,
    48, hashlib.sha384)

# --- DER -----------------------------------------------------------------------------------------


def der_tlv(tag, content):
    n = len(content)
    if n < 0x80:
        length = bytes([n])
    else:
        raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(raw)]) + raw
    return bytes([tag]) + length + content


def der_seq(*items):
    return der_tlv(0x30, b"".join(items))


def der_set(*items):
    return der_tlv(0x31, b"".join(items))


def der_int(v):
    raw = v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big")
    return der_tlv(0x02, raw)


def der_oid(dotted):
    parts = [int(x) for x in dotted.split(".")]
    out = bytearray([parts[0] * 40 + parts[1]])
    for p in parts[2:]:
        chunk = [p & 0x7F]
        p >>= 7
        while p:
            chunk.append(0x80 | (p & 0x7F))
            p >>= 7
        out += bytes(reversed(chunk))
    return der_tlv(0x06, bytes(out))


def der_octets(b):
    return der_tlv(0x04, b)


def der_bits(b):
    return der_tlv(0x03, b"\x00" + b)


def der_explicit(n, content):
    return der_tlv(0xA0 | n, content)


def der_utf8(s):
    return der_tlv(0x0C, s.encode())


def der_time(t):
    if 1950 <= t.year < 2050:
        return der_tlv(0x17, t.strftime("%y%m%d%H%M%SZ").encode())
    return der_tlv(0x18, t.strftime("%Y%m%d%H%M%SZ").encode())


def der_read(buf, i=0):
    """(tag, content start, content end) of the TLV at i."""
    tag = buf[i]
    n = buf[i + 1]
    j = i + 2
    if n & 0x80:
        k = n & 0x7F
        n = int.from_bytes(buf[j:j + k], "big")
        j += k
    return tag, j, j + n


def der_children(buf, start, end):
    out = []
    i = start
    while i < end:
        tag, s, e = der_read(buf, i)
        out.append((tag, i, s, e))
        i = e
    return out


def pem_blocks(text, label):
    out = []
    begin, end = "-----BEGIN %s-----" % label, "-----END %s-----" % label
    while begin in text:
        a = text.index(begin) + len(begin)
        b = text.index(end, a)
        out.append(base64.b64decode("".join(text[a:b].split())))
        text = text[b + len(end):]
    return out


def certificate_subject(cert_der):
    """The raw DER of a certificate's subject Name."""
    _, s, e = der_read(cert_der)                      # Certificate
    tbs = der_children(cert_der, s, e)[0]
    fields = der_children(cert_der, tbs[2], tbs[3])
    k = 1 if fields[0][0] == 0xA0 else 0               # [0] version
    _, start, _, end = fields[k + 4]                   # serial, sigAlg, issuer, validity, subject
    return cert_der[start:end]


def pkcs8_ec_scalar(der):
    """The private scalar of an unencrypted PKCS#8 EC key."""
    _, s, e = der_read(der)
    items = der_children(der, s, e)
    octets = items[2]                                  # version, algorithm, privateKey OCTET STRING
    inner = der[octets[2]:octets[3]]
    _, s2, e2 = der_read(inner)                        # ECPrivateKey
    fields = der_children(inner, s2, e2)
    return int.from_bytes(inner[fields[1][2]:fields[1][3]], "big")

# --- CBOR (the subset App Attest uses) -----------------------------------------------------------


def cbor_head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for add, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | add]) + n.to_bytes(size, "big")
    raise ValueError("too large")


def cbor(v):
    if isinstance(v, bool):
        return b"\xf5" if v else b"\xf4"
    if isinstance(v, int):
        return cbor_head(0, v) if v >= 0 else cbor_head(1, -1 - v)
    if isinstance(v, (bytes, bytearray)):
        return cbor_head(2, len(v)) + bytes(v)
    if isinstance(v, str):
        b = v.encode()
        return cbor_head(3, len(b)) + b
    if isinstance(v, list):
        return cbor_head(4, len(v)) + b"".join(cbor(x) for x in v)
    if isinstance(v, dict):
        return cbor_head(5, len(v)) + b"".join(cbor(k) + cbor(x) for k, x in v.items())
    raise TypeError(type(v))

# --- the device ----------------------------------------------------------------------------------

DEVELOPMENT_AAGUID = b"appattestdevelop"
PRODUCTION_AAGUID = b"appattest" + b"\x00" * 7
NONCE_OID = "1.2.840.113635.100.8.2"
EC_PUBLIC_KEY = der_seq(der_oid("1.2.840.10045.2.1"), der_oid("1.2.840.10045.3.1.7"))
ECDSA_SHA384 = der_seq(der_oid("1.2.840.10045.4.3.3"))


def b64(b):
    return base64.b64encode(b).decode()


def sha256(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


class TestCAFiles:
    """The parts of an `attest-sim ca` directory a device needs: the intermediate and its key."""

    def __init__(self, directory):
        with open(directory + "/intermediate.pem") as f:
            self.intermediate = pem_blocks(f.read(), "CERTIFICATE")[0]
        with open(directory + "/intermediate-key.pem") as f:
            self.intermediate_key = pkcs8_ec_scalar(pem_blocks(f.read(), "PRIVATE KEY")[0])
        self.issuer = certificate_subject(self.intermediate)


class Device:
    def __init__(self, ca, app_id, environment="development"):
        self.ca = ca
        self.app_id = app_id
        self.aaguid = DEVELOPMENT_AAGUID if environment == "development" else PRODUCTION_AAGUID
        self.d = secrets.randbelow(P256.n - 1) + 1
        self.point = P256.public_point(self.d)
        self.key_id = sha256(self.point)
        self.counter = 0

    @property
    def key_id_b64(self):
        return b64(self.key_id)

    def _cose_key(self):
        return cbor({1: 2, 3: -7, -1: 1, -2: self.point[1:33], -3: self.point[33:65]})

    def _credential_certificate(self, nonce):
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        name = der_seq(der_set(der_seq(der_oid("2.5.4.3"), der_utf8(self.key_id.hex()))),
                       der_set(der_seq(der_oid("2.5.4.11"), der_utf8("AAA Certification TEST"))))
        extensions = der_seq(
            der_seq(der_oid("2.5.29.19"), der_tlv(0x01, b"\xff"), der_octets(der_seq())),
            der_seq(der_oid("2.5.29.15"), der_tlv(0x01, b"\xff"), der_octets(der_tlv(0x03, b"\x07\x80"))),
            der_seq(der_oid(NONCE_OID), der_octets(der_seq(der_explicit(1, der_octets(nonce))))))
        tbs = der_seq(
            der_explicit(0, der_int(2)),
            der_int(secrets.randbits(63) | 1 << 62),
            ECDSA_SHA384,
            self.ca.issuer,
            der_seq(der_time(now - datetime.timedelta(minutes=5)), der_time(now + datetime.timedelta(days=3))),
            name,
            der_seq(EC_PUBLIC_KEY, der_bits(self.point)),
            der_explicit(3, extensions))
        return der_seq(tbs, ECDSA_SHA384, der_bits(P384.sign(self.ca.intermediate_key, tbs)))

    def attestation(self, challenge):
        """The attestation object for clientDataHash = SHA256(challenge text)."""
        auth = (sha256(self.app_id.encode()) + b"\x40" + struct.pack(">I", 0) + self.aaguid
                + struct.pack(">H", len(self.key_id)) + self.key_id + self._cose_key())
        nonce = sha256(auth, sha256(challenge.encode()))
        leaf = self._credential_certificate(nonce)
        statement = {"x5c": [leaf, self.ca.intermediate],
                     "receipt": b"attest-gateway simulated receipt (not from Apple)"}
        return cbor({"fmt": "apple-appattest", "attStmt": statement, "authData": auth})

    def assertion(self, client_data):
        self.counter += 1
        auth = sha256(self.app_id.encode()) + b"\x40" + struct.pack(">I", self.counter)
        nonce = sha256(auth, sha256(client_data))
        return cbor({"signature": P256.sign(self.d, nonce), "authenticatorData": auth})

    def signed_headers(self, challenge, method, target, body=b"", authority=None):
        """The three headers of a `bind: request` protected request (docs/client-contract.md):
        client data version 2 (with the request's normalised authority) when `authority` is
        given, version 1 without it."""
        client_data = "%s\n%s\n%s\n%s" % (challenge, method, target, hashlib.sha256(body).hexdigest())
        if authority is not None:
            client_data += "\n" + normalise_authority(authority)
        client_data = client_data.encode()
        return [("X-App-Attest-Key-Id", self.key_id_b64), ("X-App-Attest-Challenge", challenge),
                ("X-App-Assertion", b64(self.assertion(client_data)))]

    def register_body(self, challenge):
        return json.dumps({"keyId": self.key_id_b64, "attestation": b64(self.attestation(challenge)),
                           "challenge": challenge}).encode()


def normalise_authority(authority, scheme="http"):
    """The authority's normal form (docs/client-contract.md, "The authority"): ASCII letters
    lowercased, one trailing dot removed, the scheme's default port dropped."""
    host, port = authority, None
    if authority.startswith("["):
        end = authority.index("]")
        host, rest = authority[:end + 1], authority[end + 1:]
        if rest.startswith(":"):
            port = rest[1:]
    elif ":" in authority:
        host, port = authority.rsplit(":", 1)
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if port is not None:
        port = str(int(port))
        if port == {"http": "80", "https": "443"}[scheme]:
            port = None
    return host if port is None else "%s:%s" % (host, port)


def _name(common_name, organization):
    return der_seq(der_set(der_seq(der_oid("2.5.4.3"), der_utf8(common_name))),
                   der_set(der_seq(der_oid("2.5.4.10"), der_utf8(organization))),
                   der_set(der_seq(der_oid("2.5.4.8"), der_utf8("Test"))))


def _ca_certificate(subject, issuer, subject_point, issuer_key, path_length):
    ski = hashlib.sha1(subject_point).digest()
    constraints = der_seq(der_tlv(0x01, b"\xff"), *([der_int(path_length)] if path_length is not None else []))
    extensions = der_seq(
        der_seq(der_oid("2.5.29.19"), der_tlv(0x01, b"\xff"), der_octets(constraints)),
        der_seq(der_oid("2.5.29.15"), der_tlv(0x01, b"\xff"), der_octets(der_tlv(0x03, b"\x01\x06"))),
        der_seq(der_oid("2.5.29.14"), der_octets(der_octets(ski))))
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    end = datetime.datetime(2060, 1, 1, tzinfo=datetime.timezone.utc)
    tbs = der_seq(
        der_explicit(0, der_int(2)), der_int(secrets.randbits(63) | 1 << 62), ECDSA_SHA384, issuer,
        der_seq(der_time(start), der_time(end)), subject,
        der_seq(der_seq(der_oid("1.2.840.10045.2.1"), der_oid("1.3.132.0.34")), der_bits(subject_point)),
        der_explicit(3, extensions))
    return der_seq(tbs, ECDSA_SHA384, der_bits(P384.sign(issuer_key, tbs)))


def pem(der, label="CERTIFICATE"):
    text = base64.b64encode(der).decode()
    return "-----BEGIN %s-----\n%s\n-----END %s-----\n" % (
        label, "\n".join(text[i:i + 64] for i in range(0, len(text), 64)), label)


class TestCA:
    """A root → intermediate test CA shaped like Apple's App Attest CA (P-384 both), made in memory.
    `root_pem` goes into the gateway's trust.extra_roots; devices get credential certificates from
    the intermediate. (`attest-sim ca` makes the same shape; `TestCAFiles` loads one of those.)"""

    def __init__(self, name="Attest Gateway ATTACK SUITE TEST"):
        root_key = secrets.randbelow(P384.n - 1) + 1
        self.intermediate_key = secrets.randbelow(P384.n - 1) + 1
        root_name = _name(name + " Root CA", name)
        self.issuer = _name(name + " CA 1", name)
        self.root = _ca_certificate(root_name, root_name, P384.public_point(root_key), root_key, None)
        self.intermediate = _ca_certificate(self.issuer, root_name, P384.public_point(self.intermediate_key),
                                            root_key, 0)

    @property
    def root_pem(self):
        return pem(self.root)
