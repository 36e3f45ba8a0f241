import Foundation
import GatewayTestSupport
import Testing

@testable import GatewayStore

/// What fuzz/FuzzStoreFiles found (its inputs are kept in fuzz/FailCases/FuzzStoreFiles), pinned here.
@Suite("Memory store: the journal-damage fuzzer's cases")
struct JournalDamageFuzzCaseTests {
    private let t0: Int64 = 1_700_000_000_000

    /// The offset of each record frame of a segment (after its 24-byte header).
    static func frames(_ bytes: [UInt8]) -> [Int] {
        var starts: [Int] = []
        var at = 24
        while at + 8 <= bytes.count {
            starts.append(at)
            at += 8 + Int(UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24)
        }
        return starts
    }

    /// fuzz/FailCases/FuzzStoreFiles/crash-5792c52e…: a damaged length field that points exactly at the
    /// segment's end (or at a later record) made restore take everything up to there as the one
    /// damaged record: the whole records after it were skipped, and their counters lost (x's counter
    /// came back as 10, not 30). Replay now resumes at the first whole record after the damage.
    @Test("a damaged length pointing at the end of the segment or at a later record skips no whole record")
    func damagedLengthSkipsNoWholeRecord() throws {
        for target in ["end", "later record"] {
            let dir = TempDirectory()
            defer { dir.remove() }
            var rng = SeededRandom(seed: 204)
            let x = makeRecord(&rng)
            let y = makeRecord(&rng)
            let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
            try a.registerFresh(x, now: t0)
            try a.registerFresh(y, now: t0)
            for c in 1...3 {
                _ = try a.commit(x.keyID, counter: UInt32(c * 10), challenge: nil, now: t0)
                _ = try a.commit(y.keyID, counter: UInt32(c), challenge: nil, now: t0)
            }
            let segment = dir.lastSegment
            var bytes = readBytes(segment)
            let starts = Self.frames(bytes)
            #expect(starts.count == 8)  // two registrations, six advances
            let damaged = starts[2]  // x's advance to 10
            let end = target == "end" ? bytes.count : starts[6]  // … or y's advance to 3
            withUnsafeBytes(of: UInt32(end - damaged - 8).littleEndian) { for (k, b) in $0.enumerated() { bytes[damaged + k] = b } }
            writeBytes(segment, bytes)
            let b = try openAfterCrash(dir.path)
            #expect(try b.key(x.keyID)?.counter == 30, "\(target)")
            #expect(try b.key(y.keyID)?.counter == 3, "\(target)")
            #expect(b.restoreReport.damage.count == 1, "\(target)")
            #expect(b.restoreReport.damage.first?.kind == .unreadable, "\(target)")
            #expect(b.restoreReport.damage.first?.offset == damaged, "\(target)")
            #expect(b.restoreReport.damage.first?.length == starts[3] - damaged, "\(target)")
            #expect(b.restoreReport.damage.first?.keyID == x.keyID, "\(target)")
            #expect(b.restoreReport.tornTail == nil, "\(target)")
            #expect(b.restoreReport.replayedRecords == 7, "\(target)")
            _ = a
        }
    }
}
