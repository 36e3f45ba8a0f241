// libFuzzer target: the PROXY protocol header (ProxyHeader.parse, versions 1 and 2) on arbitrary bytes.
//
// Properties checked (a violation traps):
//   1. parse never crashes, and is deterministic.
//   2. A header: its version is 1 (the input starts with "PROXY ") or 2 (the 12-byte signature); its
//      length is within the input and at most ProxyHeader.maximumBytes (v1: 107); a v1 header ends
//      with CRLF; a source is named exactly when a destination is, of the same family.
//   3. Incremental reading (what ProxyHeaderReader does with MSG_PEEK): every prefix shorter than the
//      header is .needMore, the header's own bytes give the same header, and what follows it changes
//      nothing.
//   4. .needMore only below maximumBytes (the reader never waits for a header that cannot come);
//      .invalid only with a reason of the fixed list.
//   5. A v1 TCP4/TCP6 header written back from its addresses parses to the same addresses and ports.
import FuzzSupport
import GatewayIO
import Glibc

let reasons: Set<String> = ["not_proxy_protocol", "malformed", "too_large"]

func parse(_ bytes: ArraySlice<UInt8>) -> ProxyHeader.Parse { bytes.withUnsafeBytes { ProxyHeader.parse($0) } }

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = FuzzInput.bytes(data, size)
    let result = parse(bytes[...])
    guard parse(bytes[...]) == result else { fuzzFail("parse is not deterministic") }
    switch result {
    case .needMore:
        guard bytes.count < ProxyHeader.maximumBytes else { fuzzFail("needMore after \(bytes.count) bytes") }
    case .invalid(let reason):
        guard reasons.contains(reason) else { fuzzFail("invalid with reason \(reason)") }
    case .header(let h):
        check(h, bytes)
    }
    return 0
}

func check(_ h: ProxyHeader, _ bytes: [UInt8]) {
    guard h.length > 0, h.length <= bytes.count, h.length <= ProxyHeader.maximumBytes else {
        fuzzFail("header length \(h.length) of \(bytes.count) input bytes")
    }
    switch h.version {
    case 1:
        guard bytes.starts(with: Array("PROXY ".utf8)), h.length <= 107 else { fuzzFail("v1 header of \(h.length) bytes") }
        guard bytes[h.length - 2] == 0x0d, bytes[h.length - 1] == 0x0a else { fuzzFail("v1 header does not end with CRLF") }
    case 2:
        let signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]
        guard bytes.starts(with: signature), h.length >= 16 else { fuzzFail("v2 header without its signature") }
        guard h.length == 16 + (Int(bytes[14]) << 8 | Int(bytes[15])) else { fuzzFail("v2 length is not 16 + the declared length") }
    default:
        fuzzFail("version \(h.version)")
    }
    guard (h.source == nil) == (h.destination == nil) else { fuzzFail("a source without a destination, or the reverse") }
    if let s = h.source, let d = h.destination, s.family != d.family { fuzzFail("source and destination of different families") }

    for k in 0..<h.length where parse(bytes[0..<k]) != .needMore {
        fuzzFail("the \(k)-byte prefix of a \(h.length)-byte header is \(parse(bytes[0..<k])), not needMore")
    }
    guard parse(bytes[0..<h.length]) == .header(h) else { fuzzFail("the header's own bytes parse differently") }
    guard parse(bytes[0..<h.length] + [0x47, 0x45, 0x54]) == .header(h) else { fuzzFail("bytes after the header change it") }

    if h.version == 1, let s = h.source, let d = h.destination {
        let family = s.family == AF_INET6 ? "TCP6" : "TCP4"
        let line = Array("PROXY \(family) \(s.host) \(d.host) \(s.port) \(d.port)\r\n".utf8)
        guard case .header(let again) = parse(line[...]) else { fuzzFail("v1 header written back does not parse: \(line)") }
        guard again.source == s, again.destination == d, again.length == line.count else {
            fuzzFail("v1 header written back names other addresses")
        }
    }
}
