// verdict-bench: what the signed verdict (`assertion.verdict_header`) adds to a forwarded request,
// on one thread: the gateway's own call, `VerdictToken.sign` over a typical claim set (claims JSON,
// base64url of header and claims, ECDSA P-256 over SHA-256 by OpenSSL, DER → JOSE r ‖ s), plus the
// body's SHA-256 (1 KiB by default), against the bare ECDSA signature (`ECPrivateKey.signature`) of
// the same input. bench/verdict-vs-openssl sets it against `openssl speed ecdsap256` on the same core.
//
// Before timing, a token is checked with `ES256JWT.verify`.
// Options: --seconds S (3, of user CPU time), --body-bytes N (1024). Output: one JSON object on stdout,
// rates per second of user CPU time (what `openssl speed` divides by).
import Foundation
import GatewayCrypto
import GatewayPolicy
import GatewayWire
import Glibc

var seconds = 3.0
var bodyBytes = 1024
var args = CommandLine.arguments.dropFirst()
while let a = args.popFirst() {
    switch a {
    case "--seconds": seconds = Double(args.popFirst() ?? "") ?? seconds
    case "--body-bytes": bodyBytes = Int(args.popFirst() ?? "") ?? bodyBytes
    default:
        FileHandle.standardError.write(Data("usage: verdict-bench [--seconds S] [--body-bytes N]\n".utf8))
        exit(2)
    }
}

/// The measurement (a type, not top-level code: main.swift's globals are MainActor-isolated).
struct VerdictBench {
    let seconds: Double
    let bodyBytes: Int

    func run() {
        guard let signing = VerdictSigningKey(ECPrivateKey(curve: .p256)) else { fatalError("a P-256 key") }
        let body = [UInt8](repeating: 0x5a, count: bodyBytes)
        func claims() -> VerdictClaims {
            VerdictClaims(
                issuer: "attest-gateway", audience: "purchase", issuedAt: 1_765_000_000, expiresAt: 1_765_000_060,
                id: "0f3c2a9e-77d1-4c5b-9a51-3c2f9f0e8b11", subject: "n4bQgYhMfWWaL-qgxVrQFaO_TxsrC4Is0V1sFbDwCgg",
                appID: "ABCDE12345.com.example.shop", environment: "production", verdict: "accepted", mode: "enforce", method: "POST",
                target: "/api/purchase?order=7", bodySHA256: Hex.encode(SHA256.hash(body)), riskMetric: 1)
        }
        guard let token = VerdictToken.sign(claims(), with: signing), let pub = signing.key.p256PublicKey,
            (try? ES256JWT.verify(token, publicKey: pub)) != nil
        else { fatalError("the token does not verify") }

        // Per second of the process's user CPU time, as `openssl speed` divides (without -elapsed):
        // on a busy machine wall time counts the other processes' turns too.
        func cpu() -> Double {
            var u = rusage()
            getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
            return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6
        }
        func rate(_ body: () -> Void) -> Double {
            var n = 0
            let start = cpu()
            while true {
                for _ in 0..<50 { body() }
                n += 50
                let t = cpu() - start
                if t >= seconds { return Double(n) / t }
            }
        }

        var sink = 0
        let input = Array(token.split(separator: ".").prefix(2).joined(separator: ".").utf8)
        let bare = rate { sink &+= signing.key.signature(for: input).count }
        let full = rate { sink &+= VerdictToken.sign(claims(), with: signing)?.utf8.count ?? 0 }
        print(
            "{\"token_bytes\":\(token.utf8.count),\"body_bytes\":\(bodyBytes),\"ecdsa_sign_per_s\":\(Int(bare)),"
                + "\"verdict_per_s\":\(Int(full)),\"us_per_verdict\":\(String(format: "%.2f", 1e6 / full)),"
                + "\"us_per_ecdsa_sign\":\(String(format: "%.2f", 1e6 / bare)),\"sink\":\(sink % 2)}")
    }
}

VerdictBench(seconds: seconds, bodyBytes: bodyBytes).run()
