import Foundation
import GatewayTestSupport
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// One counter advance frame (length ‖ CRC-32C ‖ payload), as the journal writes it.
func advanceFrame(_ key: KeyID, counter: UInt32, lastSeen: UInt32 = 1_700_000_000) -> [UInt8] {
    var payload: [UInt8] = [JournalRecord.advanceType] + key.bytes
    withUnsafeBytes(of: counter.littleEndian) { payload += $0 }
    withUnsafeBytes(of: lastSeen.littleEndian) { payload += $0 }
    var frame: [UInt8] = []
    withUnsafeBytes(of: UInt32(payload.count).littleEndian) { frame += $0 }
    let crc = payload.withUnsafeBytes { CRC32C.checksum($0) }
    withUnsafeBytes(of: crc.littleEndian) { frame += $0 }
    return frame + payload
}

/// The size of an advance frame, and where its fields are inside it.
enum AdvanceLayout {
    static let size = 8 + JournalRecord.advancePayloadSize  // 49
    /// An advance that leaves open counters in the key's window (it skipped some): 8 bytes more.
    static let windowSize = 8 + JournalRecord.windowAdvancePayloadSize  // 57
    static let key = 9
    static let counter = 41
    static let lastSeen = 45
}

@Suite("Memory store: journal damage at restore")
struct JournalDamageTests {
    /// A store whose only segment holds: registration of `a`, advances a=1, a=2, a=3 (3 last).
    func journalWithThreeAdvances(_ dir: TempDirectory, seed: UInt64) throws -> (MemoryAttestStore, DeviceKeyRecord) {
        var rng = SeededRandom(seed: seed)
        let record = makeRecord(&rng)
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try store.registerFresh(record, now: t0)
        for c in 1...3 { _ = try store.commit(record.keyID, counter: UInt32(c), challenge: nil, now: t0) }
        return (store, record)
    }

    /// The case: the last record's length is intact but its checksum fails (here a flipped
    /// byte in its last-seen time). It is not cut silently: it is reported (segment, offset,
    /// length), counted, the stop is unclean, and its key keeps the counter the record carries, so
    /// the request it recorded is still refused as a replay.
    @Test func lastRecordWithBadChecksumIsReportedAndItsCounterKept() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let (a, record) = try journalWithThreeAdvances(dir, seed: 201)
        let segment = dir.lastSegment
        var bytes = readBytes(segment)
        let at = bytes.count - AdvanceLayout.size
        bytes[at + AdvanceLayout.lastSeen] ^= 0x40
        writeBytes(segment, bytes)

        let b = try openAfterCrash(dir.path)
        #expect(!b.lastStopWasClean)
        #expect(try b.key(record.keyID)?.counter == 3)
        #expect(try b.commit(record.keyID, counter: 3, challenge: nil, now: t0) == .counterReplay(stored: 3))
        let damage = b.restoreReport.damage
        #expect(damage.count == 1)
        #expect(damage.first?.kind == .checksum)
        #expect(damage.first?.segment == segment)
        #expect(damage.first?.offset == at)
        #expect(damage.first?.length == AdvanceLayout.size)
        #expect(damage.first?.keyID == record.keyID)
        #expect(damage.first?.recordedCounter == 3)
        #expect(damage.first?.counterRaised == .init(from: 2, to: 3))
        #expect(b.restoreReport.tornTail == nil)
        #expect(b.restoreReport.replayedRecords == 3)  // the registration and two advances
        #expect(readBytes(segment) == bytes)  // kept as it is (evidence), not cut
        #expect(
            damage.first?.description
                == "checksum: \(segment) offset \(at) length 49 key \(record.keyID) counter 3 (counter raised from 2 to 3)")
        // Reported again at the next restart until a snapshot covers the segment.
        let c = try openAfterCrash(dir.path)
        #expect(c.restoreReport.damage.count == 1)
        _ = try c.snapshot()
        let d = try openAfterCrash(dir.path)
        #expect(d.restoreReport.damage.isEmpty)
        #expect(try d.key(record.keyID)?.counter == 3)
        _ = (a, b)
    }

    /// A damaged record can only raise a counter: one whose counter bytes now say less changes nothing.
    @Test func damagedRecordNeverLowersACounterOrCreatesAKey() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let (a, record) = try journalWithThreeAdvances(dir, seed: 202)
        var rng = SeededRandom(seed: 2020)
        let stranger = makeRecord(&rng)
        let segment = dir.lastSegment
        var bytes = readBytes(segment)
        let at = bytes.count - AdvanceLayout.size
        bytes[at + AdvanceLayout.counter] = 1  // 3 → 1: lower than the stored 2
        bytes += advanceFrame(stranger.keyID, counter: 50)
        bytes[bytes.count - 1] ^= 0x01  // an advance of an unknown key, damaged
        writeBytes(segment, bytes)
        let b = try openAfterCrash(dir.path)
        #expect(try b.key(record.keyID)?.counter == 2)
        #expect(try b.key(stranger.keyID) == nil)
        #expect(b.statistics.keys == 1)
        #expect(b.restoreReport.damage.map(\.kind) == [.checksum, .checksum])
        #expect(b.restoreReport.damage[0].counterRaised == nil)
        #expect(b.restoreReport.damage[1].keyID == nil)  // not a registered key: not attributed
        _ = a
    }

    /// Damage in the middle: today's restore refused to start; now the damaged record is skipped
    /// (reported) and every whole record after it is applied.
    @Test func damageInTheMiddleIsSkippedAndLaterRecordsApply() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 203)
        let x = makeRecord(&rng)
        let y = makeRecord(&rng)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try a.registerFresh(x, now: t0)
        try a.registerFresh(y, now: t0)
        let segment = dir.lastSegment
        let start = readBytes(segment).count
        for c in 1...4 {
            _ = try a.commit(x.keyID, counter: UInt32(c * 10), challenge: nil, now: t0)
            _ = try a.commit(y.keyID, counter: UInt32(c), challenge: nil, now: t0)
        }
        var bytes = readBytes(segment)
        // x's advance to 20 (the third advance): payload damaged in its last-seen bytes. x's
        // advances skip counters (they carry its window's open counters), y's do not.
        let damaged = start + AdvanceLayout.windowSize + AdvanceLayout.size
        bytes[damaged + AdvanceLayout.lastSeen + 1] ^= 0xFF
        writeBytes(segment, bytes)
        let b = try openAfterCrash(dir.path)
        #expect(try b.key(x.keyID)?.counter == 40)
        #expect(try b.key(y.keyID)?.counter == 4)
        #expect(b.restoreReport.damage.count == 1)
        #expect(b.restoreReport.damage.first?.kind == .checksum)
        #expect(b.restoreReport.damage.first?.offset == damaged)
        #expect(b.restoreReport.damage.first?.recordedCounter == 20)
        #expect(b.restoreReport.replayedRecords == 2 + 7)
        _ = a
    }

    /// A damaged length field loses the framing: the bytes up to the next whole record are skipped
    /// (one `unreadable` range, still attributed by its key bytes), and replay resumes there.
    @Test func damagedLengthIsSkippedToTheNextWholeRecord() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let (a, record) = try journalWithThreeAdvances(dir, seed: 204)
        let segment = dir.lastSegment
        var bytes = readBytes(segment)
        let second = bytes.count - 2 * AdvanceLayout.size  // the advance to 2
        bytes[second] = 0x30  // length 41 → 48: runs into the next record
        writeBytes(segment, bytes)
        let b = try openAfterCrash(dir.path)
        #expect(try b.key(record.keyID)?.counter == 3)
        let damage = b.restoreReport.damage
        #expect(damage.count == 1)
        #expect(damage.first?.kind == .unreadable)
        #expect(damage.first?.offset == second)
        #expect(damage.first?.length == AdvanceLayout.size)
        #expect(damage.first?.keyID == record.keyID)
        #expect(damage.first?.recordedCounter == 2)

        // A length of zero followed by non-zero bytes: the same skip, to the next whole record.
        bytes[second] = 0
        bytes[second + 1] = 0
        writeBytes(segment, bytes)
        let c = try openAfterCrash(dir.path)
        #expect(try c.key(record.keyID)?.counter == 3)
        #expect(c.restoreReport.damage.map(\.kind) == [.unreadable])
        _ = a
    }

    /// A lost registration record: its key is not created from the damaged bytes, and its
    /// advances are reported (`unknown_key`), not applied; other keys are untouched.
    @Test func damagedRegistrationDoesNotCreateItsKey() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 205)
        let x = makeRecord(&rng)
        let y = makeRecord(&rng)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try a.registerFresh(x, now: t0)
        let segment = dir.lastSegment
        let registrationAt = readBytes(segment).count
        try a.registerFresh(y, now: t0)
        _ = try a.commit(y.keyID, counter: 5, challenge: nil, now: t0)
        _ = try a.commit(x.keyID, counter: 6, challenge: nil, now: t0)
        var bytes = readBytes(segment)
        bytes[registrationAt + 8 + 40] ^= 0x01  // inside y's public key
        writeBytes(segment, bytes)
        let b = try openAfterCrash(dir.path)
        #expect(try b.key(y.keyID) == nil)
        #expect(try b.key(x.keyID)?.counter == 6)
        #expect(b.restoreReport.damage.map(\.kind) == [.checksum, .unknownKey])
        #expect(b.restoreReport.damage[1].keyID == y.keyID)
        #expect(b.restoreReport.damage[1].recordedCounter == 5)
        _ = a
    }

    /// A torn tail (a record cut short by a crash in the middle of its write) is still cut quietly:
    /// reported as torn, not as damage.
    @Test func tornTailIsCutNotReportedAsDamage() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let (a, record) = try journalWithThreeAdvances(dir, seed: 206)
        let segment = dir.lastSegment
        let whole = readBytes(segment)
        appendBytes(segment, Array(advanceFrame(record.keyID, counter: 4).prefix(30)))
        let b = try openAfterCrash(dir.path)
        #expect(try b.key(record.keyID)?.counter == 3)
        #expect(b.restoreReport.damage.isEmpty)
        #expect(b.restoreReport.tornTail == .init(segment: segment, offset: whole.count, bytes: 30))
        #expect(readBytes(segment) == whole)
        // Zeros after the last record of the newest segment (b's, empty): torn as well.
        let newest = dir.lastSegment
        #expect(newest != segment)
        appendBytes(newest, [UInt8](repeating: 0, count: 100))
        let c = try openAfterCrash(dir.path)
        #expect(c.restoreReport.tornTail == .init(segment: newest, offset: JournalFormat.headerSize, bytes: 100))
        #expect(c.restoreReport.damage.isEmpty)
        _ = (a, b)
    }

    /// Bytes that do not form a record at the end of a segment that is not the newest (it was
    /// fsync'ed whole when rotated out): damage, reported, and restore goes on with the next segment.
    @Test func garbageAtTheEndOfAnOlderSegmentIsDamageNotAnError() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let (a, record) = try journalWithThreeAdvances(dir, seed: 207)
        let older = dir.lastSegment
        appendBytes(older, [0x10, 0x00, 0x00, 0x00, 0x01, 0x02])
        let b = try openAfterCrash(dir.path)  // starts segment 2
        #expect(b.restoreReport.tornTail != nil)  // cut in the newest segment...
        appendBytes(older, [0x10, 0x00, 0x00, 0x00, 0x01, 0x02])
        #expect(try b.commit(record.keyID, counter: 4, challenge: nil, now: t0) == .committed(previousCounter: 3))
        let c = try openAfterCrash(dir.path)  // ...reported as damage in an older one
        #expect(try c.key(record.keyID)?.counter == 4)
        #expect(c.restoreReport.damage.map(\.kind) == [.unreadable])
        #expect(c.restoreReport.damage.first?.segment == older)
        #expect(c.restoreReport.damage.first?.length == 6)
        _ = a
    }
}
