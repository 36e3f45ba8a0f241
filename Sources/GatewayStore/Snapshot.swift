import Dispatch
import GatewayCrypto
import Glibc

/// What one snapshot wrote.
public struct SnapshotReport: Sendable, Equatable {
    public var keys: Int
    public var challenges: Int
    public var bytes: Int
    public var seconds: Double

    public init(keys: Int, challenges: Int, bytes: Int, seconds: Double) {
        self.keys = keys
        self.challenges = challenges
        self.bytes = bytes
        self.seconds = seconds
    }
}

/// `snapshot.dat`:
///
/// header (80 bytes): magic `AGSNAPS1`, version (u32), shard count (u32), record stride (u32),
/// challenge stride (u32), layout fingerprint (u64), generation (u64, random), first journal
/// segment to replay (u64), key count (u64), challenge count (u64), created at (i64, Unix ms),
/// receipts file generation (u64: 0 `receipts.dat`, n `receipts-<n, 16 hex>.dat`); then per shard: string count (u32) and strings (u32 length ‖ UTF-8), record count (u64) and the
/// records as in memory (`KeyRecord`, fixed stride; version 3 added the counter window's open
/// counters), challenge count (u64) and the challenges (`ChallengeEntry`); then (version 4 on) the
/// DeviceCheck token claims: count (u64) and per claim the digest's first 16 bytes and the expiry
/// (i64, Unix ms); then (version 5 on) the keys' account associations: count (u64) and per
/// association the key (32), the account's SHA-256 (32), the time (u32, Unix s) and the account's
/// key count (u32); then SHA-256 of everything before it (32 bytes). Integers little-endian.
enum SnapshotFormat {
    static let fileName = "snapshot.dat"
    static let magic: [UInt8] = Array("AGSNAPS1".utf8)
    static let version: UInt32 = 5
    static let headerSize = 80
    /// Version 2 (before the receipt's risk fields): the same 80-byte header, `KeyRecordV2` records.
    /// Still read.
    /// Version 1 (before the re-registration window and receipt compaction): a 72-byte header,
    /// `KeyRecordV1` records, receipts in `receipts.dat`. Still read.
    static let headerSizeV1 = 72
    /// Version 2 (before the counter window): the version 3 header, `KeyRecordV2` records (144
    /// bytes: no open counters). Still read.

    /// Changes whenever the in-memory layout of a record or challenge changes, so a snapshot
    /// written by a differently laid-out build is refused rather than misread.
    static var layoutFingerprint: UInt64 {
        fingerprint(records: [
            MemoryLayout<KeyRecord>.offset(of: \.key), MemoryLayout<KeyRecord>.offset(of: \.point),
            MemoryLayout<KeyRecord>.offset(of: \.receiptOffset), MemoryLayout<KeyRecord>.offset(of: \.counter),
            MemoryLayout<KeyRecord>.offset(of: \.receiptLength), MemoryLayout<KeyRecord>.offset(of: \.appIndex),
            MemoryLayout<KeyRecord>.offset(of: \.bundleIndex), MemoryLayout<KeyRecord>.offset(of: \.category),
            MemoryLayout<KeyRecord>.offset(of: \.firstSeen), MemoryLayout<KeyRecord>.offset(of: \.lastSeen),
            MemoryLayout<KeyRecord>.offset(of: \.flags), MemoryLayout<KeyRecord>.offset(of: \.reregistrations),
            MemoryLayout<KeyRecord>.offset(of: \.reregistrationWindow), MemoryLayout<KeyRecord>.offset(of: \.riskMetric),
            MemoryLayout<KeyRecord>.offset(of: \.receiptCreated), MemoryLayout<KeyRecord>.offset(of: \.receiptNotBefore),
            MemoryLayout<KeyRecord>.offset(of: \.receiptExpires), MemoryLayout<KeyRecord>.offset(of: \.nextRefresh),
            MemoryLayout<KeyRecord>.offset(of: \.gaps),
            MemoryLayout<KeyRecord>.size,
        ])
    }

    /// The fingerprint version 2 snapshots carry (their records are `KeyRecordV2`).
    static var layoutFingerprintV2: UInt64 {
        fingerprint(records: [
            MemoryLayout<KeyRecordV2>.offset(of: \.key), MemoryLayout<KeyRecordV2>.offset(of: \.point),
            MemoryLayout<KeyRecordV2>.offset(of: \.receiptOffset), MemoryLayout<KeyRecordV2>.offset(of: \.counter),
            MemoryLayout<KeyRecordV2>.offset(of: \.receiptLength), MemoryLayout<KeyRecordV2>.offset(of: \.appIndex),
            MemoryLayout<KeyRecordV2>.offset(of: \.bundleIndex), MemoryLayout<KeyRecordV2>.offset(of: \.category),
            MemoryLayout<KeyRecordV2>.offset(of: \.firstSeen), MemoryLayout<KeyRecordV2>.offset(of: \.lastSeen),
            MemoryLayout<KeyRecordV2>.offset(of: \.flags), MemoryLayout<KeyRecordV2>.offset(of: \.reregistrations),
            MemoryLayout<KeyRecordV2>.offset(of: \.reregistrationWindow), MemoryLayout<KeyRecordV2>.size,
        ])
    }

    /// The fingerprint version 1 snapshots carry (their records are `KeyRecordV1`).
    static var layoutFingerprintV1: UInt64 {
        fingerprint(records: [
            MemoryLayout<KeyRecordV1>.offset(of: \.key), MemoryLayout<KeyRecordV1>.offset(of: \.point),
            MemoryLayout<KeyRecordV1>.offset(of: \.receiptOffset), MemoryLayout<KeyRecordV1>.offset(of: \.counter),
            MemoryLayout<KeyRecordV1>.offset(of: \.receiptLength), MemoryLayout<KeyRecordV1>.offset(of: \.appIndex),
            MemoryLayout<KeyRecordV1>.offset(of: \.bundleIndex), MemoryLayout<KeyRecordV1>.offset(of: \.category),
            MemoryLayout<KeyRecordV1>.offset(of: \.firstSeen), MemoryLayout<KeyRecordV1>.offset(of: \.lastSeen),
            MemoryLayout<KeyRecordV1>.offset(of: \.flags), MemoryLayout<KeyRecordV1>.size,
        ])
    }

    private static func fingerprint(records: [Int?]) -> UInt64 {
        let offsets: [Int?] =
            records + [
                MemoryLayout<ChallengeEntry>.offset(of: \.token), MemoryLayout<ChallengeEntry>.offset(of: \.boundKey),
                MemoryLayout<ChallengeEntry>.offset(of: \.expiresAt), MemoryLayout<ChallengeEntry>.offset(of: \.purpose),
                MemoryLayout<ChallengeEntry>.offset(of: \.hasBoundKey), MemoryLayout<ChallengeEntry>.offset(of: \.consumed),
                MemoryLayout<ChallengeEntry>.size,
            ]
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for o in offsets {
            h = (h ^ UInt64(o ?? 0xFFFF)) &* 0x100_0000_01B3
        }
        return h
    }

    /// One shard's state as of the moment its lock was held (copy-on-write: O(1) under the lock).
    struct ShardCopy {
        var strings: ContiguousArray<String>
        var chunks: ContiguousArray<ContiguousArray<KeyRecord>>
        var count: Int
        var challenges: [ChallengeBits: ChallengeEntry]
    }

    struct Header {
        var shardCount: Int
        var generation: UInt64
        var journalSeq: UInt64
        var keyCount: Int
        var challengeCount: Int
        var createdMillis: Int64
        /// The receipts file the records' offsets point into (`Journal.receiptsName(generation:)`).
        var receiptsGeneration: UInt64 = 0
    }

    /// Writes the snapshot to `snapshot.dat.tmp`, fsyncs, renames over `snapshot.dat`, fsyncs the directory.
    /// `relocate` (receipt compaction) rewrites each record's receipt offset as it is written. A
    /// failed attempt removes the temporary file (on a full disk it would hold the space).
    static func write(
        directory: String, header: Header, shards: [ShardCopy], claims: [DeviceTokenClaim] = [], files: StoreFiles = .system,
        associations: [AccountAssociation] = [], relocate: ((inout KeyRecord) -> Void)? = nil
    ) throws -> Int {
        let bytes = try writeTemporary(
            directory: directory, header: header, shards: shards, claims: claims, files: files, associations: associations,
            relocate: relocate)
        try install(directory: directory, files: files)
        try files.fsyncDirectory(directory)
        return bytes
    }

    /// Renames `snapshot.dat.tmp` over `snapshot.dat` (a failed rename removes the temporary file);
    /// the directory is not fsync'ed.
    static func install(directory: String, files: StoreFiles) throws {
        let tmp = "\(directory)/\(fileName).tmp"
        do {
            try files.rename(tmp, "\(directory)/\(fileName)")
        } catch {
            unlink(tmp)
            throw error
        }
    }

    /// `snapshot.dat.tmp`, written and fsync'ed (not yet renamed into place). A failed attempt
    /// removes it.
    static func writeTemporary(
        directory: String, header: Header, shards: [ShardCopy], claims: [DeviceTokenClaim], files: StoreFiles = .system,
        associations: [AccountAssociation] = [], relocate: ((inout KeyRecord) -> Void)? = nil
    ) throws -> Int {
        let tmp = "\(directory)/\(fileName).tmp"
        let fd = try files.open(tmp, O_WRONLY | O_CREAT | O_TRUNC)
        let out = BufferedHashingWriter(fd: fd, path: tmp, files: files)
        do {
            var h = ByteWriter(capacity: headerSize)
            h.bytes.append(contentsOf: magic)
            h.u32(version)
            h.u32(UInt32(header.shardCount))
            h.u32(UInt32(MemoryLayout<KeyRecord>.stride))
            h.u32(UInt32(MemoryLayout<ChallengeEntry>.stride))
            h.u64(layoutFingerprint)
            h.u64(header.generation)
            h.u64(header.journalSeq)
            h.u64(UInt64(header.keyCount))
            h.u64(UInt64(header.challengeCount))
            h.i64(header.createdMillis)
            h.u64(header.receiptsGeneration)
            try out.write(h.bytes)
            for shard in shards {
                var s = ByteWriter()
                s.u32(UInt32(shard.strings.count))
                for string in shard.strings { s.string(string) }
                s.u64(UInt64(shard.count))
                try out.write(s.bytes)
                for chunk in shard.chunks {
                    if let relocate {
                        var moved = chunk
                        for i in moved.indices { relocate(&moved[i]) }
                        try moved.withUnsafeBytes { (raw) throws in try out.write(raw) }
                    } else {
                        try chunk.withUnsafeBytes { (raw) throws in try out.write(raw) }
                    }
                }
                var c = ByteWriter(capacity: 8 + shard.challenges.count * MemoryLayout<ChallengeEntry>.stride)
                c.u64(UInt64(shard.challenges.count))
                for entry in shard.challenges.values {
                    var e = entry
                    withUnsafeBytes(of: &e) { raw in
                        c.bytes.append(contentsOf: raw)
                        let pad = MemoryLayout<ChallengeEntry>.stride - raw.count
                        if pad > 0 { c.bytes.append(contentsOf: repeatElement(0, count: pad)) }
                    }
                }
                try out.write(c.bytes)
            }
            var t = ByteWriter(capacity: 8 + claims.count * claimSize)
            t.u64(UInt64(claims.count))
            for claim in claims {
                t.u64(claim.a)
                t.u64(claim.b)
                t.i64(claim.expiresMillis)
            }
            try out.write(t.bytes)
            var a = ByteWriter(capacity: 8 + associations.count * associationSize)
            a.u64(UInt64(associations.count))
            for x in associations {
                a.raw(x.key)
                a.raw(x.account)
                a.u32(x.at)
                a.u32(x.count)
            }
            try out.write(a.bytes)
            try out.finish()
            try files.fsync(fd, path: tmp)
        } catch {
            Glibc.close(fd)
            unlink(tmp)
            throw error
        }
        Glibc.close(fd)
        return out.total
    }

    /// A snapshot read back: keys already placed into `states`; challenges returned separately
    /// (they are kept only after a clean stop).
    struct Loaded {
        var header: Header
        var challenges: [ChallengeEntry]
        /// DeviceCheck token claims (none before version 4).
        var claims: [DeviceTokenClaim] = []
        /// Keys' account associations (none before version 5).
        var associations: [AccountAssociation] = []
    }

    /// An association in the snapshot: key, account, time, count.
    static let associationSize = 72

    /// A token claim in the snapshot: digest bytes 0..<16, expiry.
    static let claimSize = 24

    /// Reads, checks (magic, version, layout, SHA-256) and loads `path` into `states`.
    static func load(path: String, into states: inout [ShardState]) throws -> Loaded? {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw FileIO.failure("cannot open snapshot", path)
        }
        defer { Glibc.close(fd) }
        let size = try FileIO.fileSize(fd, path: path)
        func corrupt(_ why: String) -> StoreError {
            StoreError(.unavailable, "snapshot \(path) is corrupt: \(why); move it away to start without it")
        }
        guard size >= headerSizeV1 + 32 else { throw corrupt("\(size) bytes is shorter than a header and checksum") }
        guard let map = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), map != MAP_FAILED else {
            throw FileIO.failure("cannot map snapshot", path)
        }
        defer { munmap(map, size) }
        _ = madvise(map, size, MADV_SEQUENTIAL)
        let all = UnsafeRawBufferPointer(start: map, count: size)

        var r = ByteReader(all)
        guard let m = r.take(8), Array(m) == magic else {
            throw StoreError(.unavailable, "\(path) is not a store snapshot (bad magic)")
        }
        let v = r.u32()!
        guard (1...version).contains(v) else {
            throw StoreError(
                .unavailable, "snapshot \(path) has unknown version \(v); this build reads versions 1 to \(version)")
        }
        guard size >= (v == 1 ? headerSizeV1 : headerSize) + 32 else {
            throw corrupt("\(size) bytes is shorter than a header and checksum")
        }
        // SHA-256 of the body runs on another core while the records are parsed and placed (it is
        // a third of the restore's CPU); nothing is returned before it matched. When parsing fails,
        // a checksum mismatch is the error reported, since it explains any parse failure.
        let base = UInt(bitPattern: map)
        let digest = DigestBox()
        let hashing = DispatchGroup()
        DispatchQueue.global(qos: .userInitiated).async(group: hashing) {
            let body = UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: base), count: size - 32)
            digest.value = SHA256.hash(parts: [body])
        }
        defer { hashing.wait() }  // runs before the munmap above
        func checksumMatches() -> Bool {
            hashing.wait()
            return digest.value.elementsEqual(all[(size - 32)...])
        }
        do {
            let loaded = try parse(&r, version: v, all: all, size: size, path: path, corrupt: corrupt, into: &states)
            guard checksumMatches() else { throw corrupt("SHA-256 checksum mismatch") }
            return loaded
        } catch {
            guard checksumMatches() else { throw corrupt("SHA-256 checksum mismatch") }
            throw error
        }
    }

    /// Set by the hashing thread; read after `DispatchGroup.wait` (which orders the two).
    final class DigestBox: @unchecked Sendable {
        var value: [UInt8] = []
    }

    private static func parse(
        _ r: inout ByteReader, version: UInt32, all: UnsafeRawBufferPointer, size: Int, path: String,
        corrupt: (String) -> StoreError, into states: inout [ShardState]
    ) throws -> Loaded {
        let shardCount = Int(r.u32()!)
        let recordStride = Int(r.u32()!)
        let challengeStride = Int(r.u32()!)
        let fingerprint = r.u64()!
        let legacy = version == 1
        let (expectedStride, expectedFingerprint) =
            switch version {
            case 1: (MemoryLayout<KeyRecordV1>.stride, layoutFingerprintV1)
            case 2: (MemoryLayout<KeyRecordV2>.stride, layoutFingerprintV2)
            default: (MemoryLayout<KeyRecord>.stride, layoutFingerprint)
            }
        guard recordStride == expectedStride, challengeStride == MemoryLayout<ChallengeEntry>.stride,
            fingerprint == expectedFingerprint
        else {
            throw StoreError(.unavailable, "snapshot \(path) was written by a build with another record layout")
        }
        var header = Header(
            shardCount: shardCount, generation: r.u64()!, journalSeq: r.u64()!, keyCount: Int(clamping: r.u64()!),
            challengeCount: Int(clamping: r.u64()!), createdMillis: r.i64()!)
        if !legacy { header.receiptsGeneration = r.u64()! }
        guard shardCount >= 1, shardCount <= 1 << 16 else { throw corrupt("shard count \(shardCount)") }

        let mask = UInt64(states.count - 1)
        let sameSharding = shardCount == states.count
        var challenges: [ChallengeEntry] = []
        challenges.reserveCapacity(min(header.challengeCount, size / challengeStride))
        var keys = 0
        if sameSharding {
            for i in 0..<states.count {
                let expected = min(header.keyCount, size / recordStride)
                states[i].reserve(states[i].count + expected / shardCount * 9 / 8 + 16)
            }
        }
        for _ in 0..<shardCount {
            guard let stringCount = r.u32() else { throw corrupt("truncated string table") }
            var strings: [String] = []
            for _ in 0..<stringCount {
                guard let s = r.string() else { throw corrupt("bad string in string table") }
                strings.append(s)
            }
            // Source string index -> index in the target shard, per target shard (filled lazily).
            var remap = [[UInt32]](repeating: [], count: states.count)
            guard let recordCount = r.u64(), recordCount <= UInt64(r.remaining / recordStride),
                let recordBytes = r.take(Int(recordCount) * recordStride)
            else {
                throw corrupt("truncated records")
            }
            for n in 0..<Int(recordCount) {
                var rec: KeyRecord
                switch version {
                case 1: rec = KeyRecord(recordBytes.loadUnaligned(fromByteOffset: n * recordStride, as: KeyRecordV1.self))
                case 2: rec = KeyRecord(recordBytes.loadUnaligned(fromByteOffset: n * recordStride, as: KeyRecordV2.self))
                default: rec = recordBytes.loadUnaligned(fromByteOffset: n * recordStride, as: KeyRecord.self)
                }
                // Bits outside the window are never written; a record holding some is not one of ours.
                guard rec.gaps & ~CounterWindow.mask == 0 else { throw corrupt("a record's counter window is out of range") }
                let target = Int(rec.key.w0 & mask)
                func mapped(_ index: UInt32) throws -> UInt32 {
                    if index == KeyRecord.noString { return index }
                    guard Int(index) < strings.count else { throw corrupt("string index out of range") }
                    if remap[target].isEmpty {
                        remap[target] = [UInt32](repeating: KeyRecord.noString, count: strings.count)
                    }
                    let known = remap[target][Int(index)]
                    if known != KeyRecord.noString { return known }
                    let new = states[target].intern(strings[Int(index)])
                    remap[target][Int(index)] = new
                    return new
                }
                rec.appIndex = try mapped(rec.appIndex)
                rec.bundleIndex = try mapped(rec.bundleIndex)
                guard states[target].appendIfAbsent(rec) else { throw corrupt("key stored twice") }
                keys += 1
            }
            guard let challengeCount = r.u64(), challengeCount <= UInt64(r.remaining / challengeStride),
                let challengeBytes = r.take(Int(challengeCount) * challengeStride)
            else {
                throw corrupt("truncated challenges")
            }
            for n in 0..<Int(challengeCount) {
                challenges.append(challengeBytes.loadUnaligned(fromByteOffset: n * challengeStride, as: ChallengeEntry.self))
            }
        }
        var claims: [DeviceTokenClaim] = []
        if version >= 4 {
            guard let claimCount = r.u64(), claimCount <= UInt64(max(0, r.remaining - 32) / claimSize) else {
                throw corrupt("truncated device token claims")
            }
            claims.reserveCapacity(Int(claimCount))
            for _ in 0..<claimCount {
                claims.append(DeviceTokenClaim(a: r.u64()!, b: r.u64()!, expiresMillis: r.i64()!))
            }
        }
        var associations: [AccountAssociation] = []
        if version >= 5 {
            guard let n = r.u64(), n <= UInt64(max(0, r.remaining - 32) / associationSize) else {
                throw corrupt("truncated account associations")
            }
            associations.reserveCapacity(Int(n))
            for _ in 0..<n {
                associations.append(
                    AccountAssociation(key: r.raw(KeyBits.self)!, account: r.raw(KeyBits.self)!, at: r.u32()!, count: r.u32()!))
            }
        }
        guard r.remaining == 32 else { throw corrupt("\(r.remaining - 32) bytes after the last shard") }
        guard keys == header.keyCount, challenges.count == header.challengeCount else {
            throw corrupt("counts in the header do not match the contents")
        }
        return Loaded(header: header, challenges: challenges, claims: claims, associations: associations)
    }
}

/// A key record as version 1 snapshots hold it: `KeyRecord` before the re-registration window.
struct KeyRecordV1 {
    var key: KeyBits
    var point: PointBits
    var receiptOffset: UInt64
    var counter: UInt32
    var receiptLength: UInt32
    var appIndex: UInt32
    var bundleIndex: UInt32
    var category: UInt32
    var firstSeen: UInt32
    var lastSeen: UInt32
    var flags: UInt8
}

/// A key record as version 2 snapshots hold it: `KeyRecord` before the receipt's risk fields and the
/// counter window (144 bytes).
struct KeyRecordV2 {
    var key: KeyBits
    var point: PointBits
    var receiptOffset: UInt64
    var counter: UInt32
    var receiptLength: UInt32
    var appIndex: UInt32
    var bundleIndex: UInt32
    var category: UInt32
    var firstSeen: UInt32
    var lastSeen: UInt32
    var flags: UInt8
    var reregistrations: UInt8
    var reregistrationWindow: UInt32
}

extension KeyRecord {
    /// A version 2 record: no dated receipt, so the key is not refreshed until it registers again;
    /// no open counter (a version 2 store accepted only counters above the highest).
    init(_ v2: KeyRecordV2) {
        self.init(
            key: v2.key, point: v2.point, receiptOffset: v2.receiptOffset, counter: v2.counter,
            receiptLength: v2.receiptLength, appIndex: v2.appIndex, bundleIndex: v2.bundleIndex, category: v2.category,
            firstSeen: v2.firstSeen, lastSeen: v2.lastSeen, flags: v2.flags, reregistrations: v2.reregistrations,
            reregistrationWindow: v2.reregistrationWindow)
    }

    init(_ v1: KeyRecordV1) {
        self.init(
            key: v1.key, point: v1.point, receiptOffset: v1.receiptOffset, counter: v1.counter,
            receiptLength: v1.receiptLength, appIndex: v1.appIndex, bundleIndex: v1.bundleIndex, category: v1.category,
            firstSeen: v1.firstSeen, lastSeen: v1.lastSeen, flags: v1.flags)
    }
}

/// Buffered sequential writes with a running SHA-256; `finish` appends the digest.
final class BufferedHashingWriter {
    let fd: Int32
    let path: String
    let files: StoreFiles
    let hasher = SHA256.Hasher()
    var buffer: [UInt8] = []
    var total = 0
    static let capacity = 1 << 20

    init(fd: Int32, path: String, files: StoreFiles = .system) {
        self.fd = fd
        self.path = path
        self.files = files
        buffer.reserveCapacity(Self.capacity)
    }

    func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { (raw) throws in try write(raw) }
    }

    func write(_ raw: UnsafeRawBufferPointer) throws {
        hasher.update(raw)
        total += raw.count
        if buffer.count + raw.count > Self.capacity { try flush() }
        if raw.count >= Self.capacity {
            try files.writeAll(fd, raw, path: path)
        } else {
            buffer.append(contentsOf: raw)
        }
    }

    func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { (raw) throws in try files.writeAll(fd, raw, path: path) }
        buffer.removeAll(keepingCapacity: true)
    }

    func finish() throws {
        let digest = hasher.finalize()
        buffer.append(contentsOf: digest)
        total += digest.count
        try flush()
    }
}
