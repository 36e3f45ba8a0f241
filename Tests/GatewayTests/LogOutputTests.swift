import Foundation
import Glibc
import Synchronization
import Testing

@testable import Gateway

/// `LogOutput`: whole buffers of lines from several threads never interleave, also on a pipe whose
/// reader is slower than the writers (where a write larger than PIPE_BUF is not atomic on its own).
@Suite("Log output", .timeLimit(.minutes(3)))
struct LogOutputTests {
    @Test("4 threads × 12 flushes of 100 KB of lines into a slow pipe: every line whole")
    func noInterleavingOnAPipe() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let (readEnd, writeEnd) = (fds[0], fds[1])
        defer { close(readEnd) }
        let threads = 4, flushes = 12, linesPerFlush = 1000
        // Line: the thread's letter repeated 99 times and a newline.
        final class Received: @unchecked Sendable { var bytes: [UInt8] = [] }  // the reader's only, until `done`
        let received = Received()
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = chunk.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, 4096) }
                if n <= 0 { break }
                received.bytes += chunk[0..<n]
                usleep(200)  // slower than the writers: the pipe fills and writes block midway
            }
            done.signal()
        }
        // One thread per writer (as the event loops are), all started before any writes.
        let start = DispatchSemaphore(value: 0), finished = DispatchGroup()
        let failures = Atomic<Int>(0)
        for t in 0..<threads {
            finished.enter()
            let thread = Thread {
                let line = [UInt8](repeating: UInt8(ascii: "a") + UInt8(t), count: 99) + [0x0a]
                let buffer = Array([[UInt8]](repeating: line, count: linesPerFlush).joined())
                start.wait()
                for _ in 0..<flushes where !buffer.withUnsafeBytes({ LogOutput.write(writeEnd, $0) }) {
                    failures.wrappingAdd(1, ordering: .relaxed)
                }
                finished.leave()
            }
            thread.start()
        }
        for _ in 0..<threads { start.signal() }
        #expect(finished.wait(timeout: .now() + 50) == .success)
        #expect(failures.load(ordering: .relaxed) == 0)
        close(writeEnd)
        #expect(done.wait(timeout: .now() + 50) == .success)
        let lines = received.bytes.split(separator: 0x0a)
        #expect(lines.count == threads * flushes * linesPerFlush)
        let torn = lines.filter { $0.count != 99 || Set($0).count != 1 }
        #expect(torn.count == 0, "torn lines")
    }
}
