import GatewayHTTP

/// What the upstream sees: the one writer of the request head the gateway sends an upstream, for
/// HTTP/1.1 and HTTP/2 clients alike (an HTTP/2 stream's head is first laid out as HTTP/1.1 bytes,
/// `HeadBytes.set(_:reusing:)`), and for the in-process demo upstream, which shows what it wrote.
///
/// From the client's head, in one pass over its field lines, copied as bytes:
/// 1. Request line: the method and target as received (an absolute-form target was made
///    origin-form, its authority the Host), always `HTTP/1.1`.
/// 2. Each client field, in order, unless it is
///    - a foldable name (`_`, `.`…: `FoldedNames`): all of them with the listener's
///      `underscores_in_headers: drop` (`dropFoldableNames`), else those folding into a field the
///      gateway interprets;
///    - hop-by-hop (RFC 9110 §7.6.1, Go's ReverseProxy rules): the fixed list (`HopByHop`) and every
///      field a Connection field names, Host excepted; a `TE` listing `trailers` comes back as
///      `TE: trailers`;
///    - a forwarding field (`isForwardingField`: X-Forwarded-For/-Proto/-Host, Forwarded, Via),
///      rewritten below;
///    - `Expect` (the gateway answers 100-continue itself);
///    - gateway-owned in any spelling (`GatewayOwnedFields`), or removed by the route (`HeaderEdit`);
///    - a framing field the framing below replaces (Content-Length when the request has a body,
///      Transfer-Encoding when it has a length).
/// 3. The gateway's fields, each unless the route removes it: `X-Forwarded-For` (the peer's
///    address; from a trusted proxy, `trustedPeer`, its list extended with it), `X-Forwarded-Proto`
///    (`http`/`https` of the listener; a trusted proxy's own kept), `X-Forwarded-Host` (the
///    client's Host, when it sent one; a trusted proxy's own kept), `Via` (the client's list, then
///    ours: `via`), `X-Request-Id` (the exchange's id, `RequestID`: the client's own when it sent a
///    valid one), a `Host` naming the upstream when the client sent none (HTTP/1.0). What a peer
///    that is not a trusted proxy says in the first three is replaced: a client cannot pose as a
///    proxy (`ClientAddress` reads the client address the same way).
/// 4. The route's added fields (e.g. the verified key id), then the framing: `Transfer-Encoding:
///    chunked` or `Content-Length` as `framing` says (a buffered body goes with its length).
///
/// Tests hold it byte for byte to a readable reference model of these rules over random heads
/// (`UpstreamHeadTests`). `@_spi(Fuzzing)`: fuzz/'s FuzzHTTP1 parses what it writes again.
@_spi(Fuzzing) public enum UpstreamRequestHead {
    /// The gateway's `Via` entry (requests and responses).
    static let via: StaticString = "1.1 attest-gateway"

    /// Writes the upstream request head of `head`, whose ranges point into `buf`. `client` (the
    /// peer's address: the socket's, or a PROXY protocol header's), `proto` and `requestID` (none
    /// when empty) are ASCII, written as they are; `trustedPeer`: the peer is a trusted proxy
    /// (`TrustedProxies`), whose forwarding fields are kept; `defaultHost` is asked only when the
    /// client sent no Host.
    @_spi(Fuzzing) public static func write(
        _ head: HTTPRequestHeadLines, _ buf: UnsafeRawBufferPointer, client: UnsafeRawBufferPointer,
        proto: UnsafeRawBufferPointer, trustedPeer: Bool = false, requestID: UnsafeRawBufferPointer,
        framing: BodyFraming, edit: HeaderEdit,
        dropFoldableNames: Bool, defaultHost: () -> String, to out: inout HeadWriter
    ) {
        let fields = head.fields
        let remove = edit.removeNames
        let clientRemove = edit.clientRemoveNames
        @inline(__always) func bytes(_ r: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buf[r]) }
        out.append(bytes(head.method))
        out.append(0x20)
        out.append(bytes(head.target))
        out.append(" HTTP/1.1\r\n")
        // What the rewrite needs to know of the client's fields, in one pass.
        var hasListed = false
        var hasConnection = false
        var hasForwarding = false
        for f in fields {
            let name = bytes(f.name)
            if HopByHop.isListed(name) {
                hasListed = true
                if name.count == 10 && equalsIgnoringCase(name, "Connection") { hasConnection = true }
            } else if isForwardingField(name) {
                hasForwarding = true
            }
        }
        let dropContentLength: Bool
        switch framing {
        case .chunked, .contentLength: dropContentLength = true
        case .none, .untilClose: dropContentLength = false
        }
        let dropTransferEncoding: Bool = if case .contentLength = framing { true } else { false }
        /// Whether a field named `name` is written: the route's removals, then the framing fields.
        func passes(_ name: UnsafeRawBufferPointer, editable: Bool = true) -> Bool {
            if editable && remove.contains(name) { return false }
            return framingPasses(name)
        }
        func framingPasses(_ name: UnsafeRawBufferPointer) -> Bool {
            switch name.count {
            case 14 where dropContentLength: return !equalsIgnoringCase(name, "Content-Length")
            case 17 where dropTransferEncoding: return !equalsIgnoringCase(name, "Transfer-Encoding")
            default: return true
            }
        }
        func namedInConnection(_ name: UnsafeRawBufferPointer) -> Bool {
            for c in fields where c.name.count == 10 && equalsIgnoringCase(bytes(c.name), "Connection") {
                if listContains(bytes(c.value), name) { return true }
            }
            return false
        }
        /// A client's X-Forwarded-For or Via, carried into the gateway's: a field named in Connection
        /// is hop-by-hop, dropped rather than carried.
        func priorField(_ f: HTTPFieldRange, _ name: StaticString) -> Bool {
            equalsIgnoringCase(bytes(f.name), name) && !(hasConnection && namedInConnection(bytes(f.name)))
        }
        /// Whether the client sent `name` with a value (its values joined are not empty).
        func hasPrior(_ name: StaticString) -> Bool {
            guard hasForwarding else { return false }
            var count = 0
            var total = 0
            for f in fields where priorField(f, name) {
                count += 1
                total += f.value.count
            }
            return count > 0 && total + 2 * (count - 1) > 0
        }
        /// The client's values of `name` joined with ", " (when `hasPrior`).
        func writeJoined(_ name: StaticString) {
            var k = 0
            for f in fields where priorField(f, name) {
                if k > 0 { out.append(", ") }
                out.append(bytes(f.value))
                k += 1
            }
        }
        /// The client's values of `name` joined with ", " and followed by ", " (a list extended);
        /// nothing when there is none or their join is empty.
        func writePrior(_ name: StaticString) {
            guard hasPrior(name) else { return }
            writeJoined(name)
            out.append(", ")
        }
        var keepTrailersTE = false
        for f in fields {
            let name = bytes(f.name)
            if head.foldableNames && FoldedNames.isFoldable(name) && FoldedNames.drops(name, dropAll: dropFoldableNames) { continue }
            if hasListed {
                if HopByHop.isListed(name) {
                    if name.count == 2 && equalsIgnoringCase(name, "TE") && listContains(bytes(f.value), "trailers") {
                        keepTrailersTE = true
                    }
                    continue
                }
                if hasConnection && !equalsIgnoringCase(name, "Host") && namedInConnection(name) { continue }
            }
            if hasForwarding && isForwardingField(name) { continue }
            if name.count == 6 && equalsIgnoringCase(name, "Expect") { continue }
            guard !clientRemove.contains(name) && framingPasses(name) else { continue }
            out.appendFieldLine(buf, f)
        }
        if keepTrailersTE && passes(UnsafeRawBufferPointer(staticString: "TE")) { out.append("TE: trailers\r\n") }
        if passes(UnsafeRawBufferPointer(staticString: "X-Forwarded-For")) {
            out.append("X-Forwarded-For: ")
            if trustedPeer { writePrior("X-Forwarded-For") }
            out.append(client)
            out.crlf()
        }
        if passes(UnsafeRawBufferPointer(staticString: "X-Forwarded-Proto")) {
            out.append("X-Forwarded-Proto: ")
            if trustedPeer && hasPrior("X-Forwarded-Proto") { writeJoined("X-Forwarded-Proto") } else { out.append(proto) }
            out.crlf()
        }
        if passes(UnsafeRawBufferPointer(staticString: "X-Forwarded-Host")) {
            if trustedPeer && hasPrior("X-Forwarded-Host") {
                out.append("X-Forwarded-Host: ")
                writeJoined("X-Forwarded-Host")
                out.crlf()
            } else if let host = head.host {
                out.append("X-Forwarded-Host: ")
                out.append(bytes(host))
                out.crlf()
            }
        }
        if passes(UnsafeRawBufferPointer(staticString: "Via")) {
            out.append("Via: ")
            writePrior("Via")
            out.append(via)
            out.crlf()
        }
        if !requestID.isEmpty && passes(UnsafeRawBufferPointer(staticString: "X-Request-Id")) {
            out.append("X-Request-Id: ")
            out.append(requestID)
            out.crlf()
        }
        if head.host == nil, passes(UnsafeRawBufferPointer(staticString: "Host")) { out.appendField("Host", defaultHost()) }
        for (name, value) in edit.add {
            var n = name
            if n.withUTF8({ passes(UnsafeRawBufferPointer($0), editable: false) }) { out.appendField(name, value) }
        }
        out.appendFraming(framing)
        out.crlf()
    }

    /// X-Forwarded-For, -Proto, -Host, Forwarded and Via: the fields the gateway rewrites.
    static func isForwardingField(_ name: UnsafeRawBufferPointer) -> Bool {
        switch name.count {
        case 3: equalsIgnoringCase(name, "Via")
        case 9: equalsIgnoringCase(name, "Forwarded")
        case 15: equalsIgnoringCase(name, "X-Forwarded-For")
        case 16: equalsIgnoringCase(name, "X-Forwarded-Host")
        case 17: equalsIgnoringCase(name, "X-Forwarded-Proto")
        default: false
        }
    }
}

extension Forward {
    /// The upstream request head of `head` (ranges of `buf`), framed as `framing`, with this route's
    /// edit: `UpstreamRequestHead.write`, the host defaulting to the upstream's address.
    func writeUpstreamHead(
        _ head: HTTPRequestHeadLines, _ buf: UnsafeRawBufferPointer, client: String, proto: String,
        trustedPeer: Bool = false, requestID: RequestID, framing: BodyFraming, dropFoldableNames: Bool = true,
        to out: inout HeadWriter
    ) {
        var client = client
        var proto = proto
        client.withUTF8 { c in
            proto.withUTF8 { p in
                requestID.withBytes { i in
                    UpstreamRequestHead.write(
                        head, buf, client: UnsafeRawBufferPointer(c), proto: UnsafeRawBufferPointer(p),
                        trustedPeer: trustedPeer, requestID: i, framing: framing, edit: editHeaders,
                        dropFoldableNames: dropFoldableNames,
                        defaultHost: { pool.target.address.description }, to: &out)
                }
            }
        }
    }
}

extension UnsafeRawBufferPointer {
    init(staticString s: StaticString) { self.init(start: s.utf8Start, count: s.utf8CodeUnitCount) }
}

extension BufferedRequest {
    /// The fields an upstream named `upstream` would receive for this request (body framed by its
    /// length), read back from what `UpstreamRequestHead` writes: the in-process demo upstream shows
    /// them, so it answers from the same rules as a real upstream sees.
    public func upstreamFields(edit: HeaderEdit, upstream: String) -> HTTPFields {
        var client = forwardingPeer.map { $0.address } ?? (peer?.host ?? "unknown")
        var proto = scheme
        var out: [UInt8] = []
        let bytes = HeadBytes()
        let lines = bytes.set(head, reusing: [])
        bytes.with { buf in
            client.withUTF8 { c in
                proto.withUTF8 { p in
                    requestID.withBytes { i in
                        HeadWriter.appendHead(to: &out) {
                            UpstreamRequestHead.write(
                                lines, buf, client: UnsafeRawBufferPointer(c), proto: UnsafeRawBufferPointer(p),
                                trustedPeer: forwardingPeer?.trusted ?? false, requestID: i,
                                framing: .whole(head.framing, count: body.count), edit: edit,
                                dropFoldableNames: dropFoldableNames, defaultHost: { upstream }, to: &$0)
                        }
                    }
                }
            }
        }
        // The writer's lines are `name: value` CRLF, after the request line; values hold no CR or LF.
        var fields = HTTPFields()
        let text = out.split(separator: 0x0a, omittingEmptySubsequences: false).dropFirst()
        for line in text {
            let l = line.last == 0x0d ? line.dropLast() : line
            guard let colon = l.firstIndex(of: 0x3a) else { continue }
            let value = l[(colon + 1)...].drop { $0 == 0x20 }
            fields.append(latin1(l[..<colon]), latin1(value))
        }
        return fields
    }

    private func latin1(_ b: ArraySlice<UInt8>) -> String { String(String.UnicodeScalarView(b.map { Unicode.Scalar($0) })) }
}
