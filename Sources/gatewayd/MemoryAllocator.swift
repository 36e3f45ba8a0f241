#if canImport(CGatewayJemalloc)
    import CGatewayJemalloc
#endif

/// Which malloc serves gatewayd. jemalloc is linked into the executable so that its `malloc` and
/// `free` come before the C library's for every allocation of the process (Swift's runtime,
/// OpenSSL, nghttp2). Whether that held is checked, not assumed: memory allocated through Swift's
/// runtime must show in jemalloc's count of this thread's bytes. `gatewayd --version` prints the
/// result, and the tests read it. The sanitizer builds leave jemalloc out (Package.swift).
enum MemoryAllocator {
    static let description: String = {
        #if canImport(CGatewayJemalloc)
            guard let version = cgateway_jemalloc_version() else { return "the C library's (jemalloc unavailable)" }
            let name = "jemalloc " + String(cString: version).prefix { $0 != "-" }  // "5.3.0-0-g…": "jemalloc 5.3.0"
            let before = cgateway_jemalloc_thread_allocated()
            guard before != UInt64.max else { return name + " (linked; its statistics are off, in use unknown)" }
            let probe = UnsafeMutableRawPointer.allocate(byteCount: 1 << 16, alignment: 16)
            let after = cgateway_jemalloc_thread_allocated()
            probe.deallocate()
            return after &- before >= 1 << 16 ? name : "the C library's (\(name) linked but not in use)"
        #else
            return "the C library's (built without jemalloc)"
        #endif
    }()
}
