import Foundation
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

@testable import GatewayStore

/// A fresh directory under /tmp, removed by `remove()`.
struct TempDirectory {
    let path: String

    init() {
        var template = Array("/tmp/attest-store-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(decoding: template.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }

    func file(_ name: String) -> String { "\(path)/\(name)" }

    func files() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted() }

    /// The newest journal segment.
    var lastSegment: String { file(files().filter { $0.hasPrefix("journal-") }.last!) }
}

func readBytes(_ path: String) -> [UInt8] { [UInt8](FileManager.default.contents(atPath: path) ?? Data()) }

func writeBytes(_ path: String, _ bytes: [UInt8]) {
    let written = FileManager.default.createFile(atPath: path, contents: Data(bytes))
    precondition(written, "cannot write \(path)")
}

func appendBytes(_ path: String, _ bytes: [UInt8]) { writeBytes(path, readBytes(path) + bytes) }

/// The StoreError `body` throws, or nil.
func storeError(_ body: () throws -> Void) -> StoreError? {
    do {
        try body()
        return nil
    } catch {
        return error as? StoreError
    }
}

/// Writes `path` as a version 2 snapshot (what builds before the receipt's risk and the counter
/// window wrote): one shard, one app-id string, `record` (a registered key with `counter`, its
/// re-registration window open since `seenMillis`), no challenges; `sequence`: the journal segment
/// it covers up to.
func writeVersion2Snapshot(
    _ path: String, _ record: DeviceKeyRecord, counter: UInt32, seenMillis: Int64, sequence: UInt64
) throws {
    let seen = UInt32(seenMillis / 1000)
    let v2 = KeyRecordV2(
        key: KeyBits(record.keyID), point: PointBits(record.publicKey)!, receiptOffset: 0, counter: counter, receiptLength: 0,
        appIndex: 0, bundleIndex: KeyRecord.noString, category: 0, firstSeen: seen, lastSeen: seen,
        flags: KeyRecord.flagProduction, reregistrations: 1, reregistrationWindow: seen)
    let out = BufferedHashingWriter(fd: try FileIO.open(path, O_WRONLY | O_CREAT | O_TRUNC), path: path)
    var h = ByteWriter()
    h.bytes += SnapshotFormat.magic
    h.u32(2)
    h.u32(1)
    h.u32(UInt32(MemoryLayout<KeyRecordV2>.stride))
    h.u32(UInt32(MemoryLayout<ChallengeEntry>.stride))
    h.u64(SnapshotFormat.layoutFingerprintV2)
    h.u64(sequence)
    h.u64(1)
    h.u64(1)
    h.u64(0)
    h.i64(seenMillis)
    h.u64(0)
    precondition(h.bytes.count == SnapshotFormat.headerSize)
    h.u32(1)
    h.string(record.appID)
    h.u64(1)
    try out.write(h.bytes)
    try [v2].withUnsafeBytes { (raw) throws in try out.write(raw) }
    var c = ByteWriter()
    c.u64(0)
    try out.write(c.bytes)
    try out.finish()
    Glibc.close(out.fd)
}
