import Glibc

/// Thin POSIX file helpers: every failure becomes a `StoreError(.unavailable, …)` naming the path,
/// or, for the calls that go through `StoreFiles` (open, write, fsync), a `FileFault` naming the
/// path and errno (`StoreError.from` turns it into a `StoreError`).
enum FileIO {
    static func errnoText(_ code: Int32 = errno) -> String {
        guard let s = strerror(code) else { return "errno \(code)" }
        return String(cString: s)
    }

    static func failure(_ what: String, _ path: String, _ code: Int32 = errno) -> StoreError {
        StoreError(.unavailable, "\(what) \(path): \(errnoText(code))")
    }

    // The calls that can fail for lack of space or an I/O error go through the store's
    // `StoreFiles` (injectable, counted); these use the system calls directly.

    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o600) throws -> Int32 {
        try StoreFiles.system.open(path, flags, mode: mode)
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        try StoreFiles.system.writeAll(fd, bytes, path: path)
    }

    static func fsync(_ fd: Int32, path: String) throws {
        try StoreFiles.system.fsync(fd, path: path)
    }

    static func fsyncDirectory(_ path: String) throws {
        try StoreFiles.system.fsyncDirectory(path)
    }

    /// Reads up to `count` bytes at `offset`; fewer only at end of file.
    static func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, offset: Int, path: String) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = Glibc.pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw failure("cannot read", path)
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    static func fileSize(_ fd: Int32, path: String) throws -> Int {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw failure("cannot stat", path) }
        return Int(st.st_size)
    }

    static func exists(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0
    }

    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    static func listDirectory(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else { throw failure("cannot read directory", path) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    static func unlink(_ path: String) throws {
        guard Glibc.unlink(path) == 0 || errno == ENOENT else { throw failure("cannot remove", path) }
    }

    /// Reads a whole (small) file, or nil when it does not exist.
    static func readSmallFile(_ path: String) throws -> [UInt8]? {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw failure("cannot open", path)
        }
        defer { Glibc.close(fd) }
        let size = try fileSize(fd, path: path)
        var out = [UInt8](repeating: 0, count: size)
        let n = try out.withUnsafeMutableBytes { (buf) throws -> Int in
            try pread(fd, into: buf, offset: 0, path: path)
        }
        return Array(out.prefix(n))
    }
}

/// A file descriptor closed when the last reference goes (a journal segment may be fsync'ed by
/// the group-commit queue while a rotation replaces it).
final class FileHandle: Sendable {
    let fd: Int32
    let path: String

    init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }
}

/// CRC-32C (Castagnoli), for journal records (a torn or flipped record is told apart from a whole one).
enum CRC32C {
    static let table: [UInt32] = (0..<256).map { i -> UInt32 in
        var c = UInt32(i)
        for _ in 0..<8 { c = c & 1 != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
        return c
    }

    /// Slicing-by-8 (eight bytes per step): `tables[k * 256 + b]` is the CRC of byte `b` followed
    /// by `k` zero bytes; `tables[0..<256]` is `table`.
    static let tables: [UInt32] = {
        var t = [UInt32](repeating: 0, count: 8 * 256)
        for i in 0..<256 { t[i] = table[i] }
        for k in 1..<8 {
            for i in 0..<256 {
                let prev = t[(k - 1) * 256 + i]
                t[k * 256 + i] = table[Int(prev & 0xFF)] ^ (prev >> 8)
            }
        }
        return t
    }()

    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        tables.withUnsafeBufferPointer { t in
            let t = t.baseAddress!
            var i = 0
            let n = bytes.count
            while i + 8 <= n {
                let w = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)) ^ UInt64(c)
                c =
                    t[7 * 256 + Int(w & 0xFF)] ^ t[6 * 256 + Int((w >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((w >> 16) & 0xFF)] ^ t[4 * 256 + Int((w >> 24) & 0xFF)]
                    ^ t[3 * 256 + Int((w >> 32) & 0xFF)] ^ t[2 * 256 + Int((w >> 40) & 0xFF)]
                    ^ t[1 * 256 + Int((w >> 48) & 0xFF)] ^ t[Int(w >> 56)]
                i += 8
            }
            while i < n {
                c = t[Int((c ^ UInt32(bytes[i])) & 0xFF)] ^ (c >> 8)
                i += 1
            }
        }
        return c ^ 0xFFFF_FFFF
    }
}

/// Little-endian appends into a byte array.
struct ByteWriter {
    var bytes: [UInt8] = []

    init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
    mutating func u64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
    mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }
    mutating func raw<T>(_ v: T) { withUnsafeBytes(of: v) { bytes.append(contentsOf: $0) } }
    mutating func string(_ s: String) {
        let utf8 = Array(s.utf8)
        u32(UInt32(utf8.count))
        bytes.append(contentsOf: utf8)
    }
}

/// Little-endian reads from a byte buffer; nil past the end.
struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    mutating func take(_ n: Int) -> UnsafeRawBufferPointer? {
        guard n >= 0, remaining >= n else { return nil }
        defer { offset += n }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + n])
    }

    mutating func u8() -> UInt8? { take(1).map { $0[0] } }
    mutating func u32() -> UInt32? { take(4).map { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) } }
    mutating func u64() -> UInt64? { take(8).map { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) } }
    mutating func i64() -> Int64? { u64().map { Int64(bitPattern: $0) } }
    mutating func raw<T: BitwiseCopyable>(_ type: T.Type) -> T? {
        take(MemoryLayout<T>.size).map { $0.loadUnaligned(as: T.self) }
    }
    mutating func string(max: Int = 4096) -> String? {
        guard let n = u32(), Int(n) <= max, let b = take(Int(n)) else { return nil }
        return String(validating: b, as: UTF8.self)
    }
}

extension StoreError {
    /// Every error thrown inside this module is a `StoreError`; anything else is wrapped.
    static func from(_ error: any Error) -> StoreError {
        if let fault = error as? FileFault { return fault.storeError }
        return error as? StoreError ?? StoreError(.unavailable, "\(error)")
    }
}
