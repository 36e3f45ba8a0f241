import Foundation
import GatewayTestSupport
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
