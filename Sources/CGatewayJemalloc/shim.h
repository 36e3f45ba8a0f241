// jemalloc (Debian libjemalloc-dev), found through pkg-config, linked into gatewayd only: its
// malloc and free then serve every allocation of the process (Swift's, OpenSSL's, nghttp2's),
// with a per-thread cache that costs about a third of glibc's on the gate's path
// (docs/performance.md, "The gate's own cost"). These two reads let gatewayd say which allocator
// actually serves it (`gatewayd --version`).
#ifndef CGATEWAY_JEMALLOC_SHIM_H
#define CGATEWAY_JEMALLOC_SHIM_H
#include <stddef.h>
#include <stdint.h>
#include <jemalloc/jemalloc.h>

/// jemalloc's version string ("5.3.0-0-g…"), or NULL.
static inline const char *cgateway_jemalloc_version(void) {
    const char *version = NULL;
    size_t length = sizeof version;
    return mallctl("version", (void *)&version, &length, NULL, 0) == 0 ? version : NULL;
}

/// Bytes jemalloc has allocated for the calling thread so far; UINT64_MAX when it cannot say.
static inline uint64_t cgateway_jemalloc_thread_allocated(void) {
    uint64_t bytes = 0;
    size_t length = sizeof bytes;
    return mallctl("thread.allocated", &bytes, &length, NULL, 0) == 0 ? bytes : UINT64_MAX;
}
#endif
