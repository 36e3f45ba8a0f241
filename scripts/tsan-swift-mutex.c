// Makes ThreadSanitizer see the synchronisation of Swift's `Synchronization.Mutex` on Linux.
// scripts/sanitize.sh builds this into .build-tsan/tsan-swift-mutex.so and preloads it
// (LD_PRELOAD) into the tests and every process they start. It suppresses nothing.
//
// Why: `Mutex.withLock` inlines its fast paths (a compare-exchange 0 -> thread id to lock,
// thread id -> 0 to unlock) into the caller, where TSan instruments them. Under contention it calls
// `_MutexHandle._lockSlow`/`_unlockSlow`/`_tryLockSlow` in libswiftSynchronization.so, which is not
// built with TSan: a spin on an uninstrumented compare-exchange, then FUTEX_LOCK_PI and
// FUTEX_UNLOCK_PI, where the kernel hands the lock over. TSan sees no happens-before edge between
// the unlocking thread and the thread the kernel woke, and reports every access under the lock as a
// race ("Swift access race" or "data race" inside a `withLock` closure). A ten-line program with
// two queues incrementing under one Mutex shows it (docs/development.md, "Sanitizers").
//
// What: the three slow paths are interposed (the calls go through the PLT): after the lock is
// taken, __tsan_acquire on the mutex's address; before it is released, __tsan_release on it. The
// inlined fast paths are TSan atomics on that same address, so every hand-over, fast or slow, is an
// edge TSan knows. Processes without TSan (curl, nginx, redis-server) leave the weak symbols null.
//
// The ABI: `_MutexHandle` methods are swiftcall with the handle's address as `self` (the
// swift_context register, r13 on x86-64) and `_lockSlow` takes the thread id as its one argument
// (objdump of libswiftSynchronization.so, Swift 6.3). The mangled names are the library's exports.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>

#define SWIFTCALL __attribute__((swiftcall))
#define SELF __attribute__((swift_context))

extern void __tsan_acquire(void *addr) __attribute__((weak));
extern void __tsan_release(void *addr) __attribute__((weak));

#define LOCK_SLOW "$s15Synchronization12_MutexHandleV9_lockSlowyys6UInt32VF"
#define TRY_LOCK_SLOW "$s15Synchronization12_MutexHandleV12_tryLockSlowSbyF"
#define UNLOCK_SLOW "$s15Synchronization12_MutexHandleV11_unlockSlowyyF"

static SWIFTCALL void (*real_lock_slow)(uint32_t, void *SELF);
static SWIFTCALL bool (*real_try_lock_slow)(void *SELF);
static SWIFTCALL void (*real_unlock_slow)(void *SELF);

// At load, and again if the library came later (dlopen): only Swift processes ever call these.
__attribute__((constructor)) static void resolve(void) {
  real_lock_slow = dlsym(RTLD_NEXT, LOCK_SLOW);
  real_try_lock_slow = dlsym(RTLD_NEXT, TRY_LOCK_SLOW);
  real_unlock_slow = dlsym(RTLD_NEXT, UNLOCK_SLOW);
}

SWIFTCALL void lock_slow(uint32_t id, void *SELF handle) __asm__(LOCK_SLOW);
SWIFTCALL void lock_slow(uint32_t id, void *SELF handle) {
  if (!real_lock_slow) resolve();
  real_lock_slow(id, handle);
  if (__tsan_acquire) __tsan_acquire(handle);
}

SWIFTCALL bool try_lock_slow(void *SELF handle) __asm__(TRY_LOCK_SLOW);
SWIFTCALL bool try_lock_slow(void *SELF handle) {
  if (!real_try_lock_slow) resolve();
  bool locked = real_try_lock_slow(handle);
  if (locked && __tsan_acquire) __tsan_acquire(handle);
  return locked;
}

SWIFTCALL void unlock_slow(void *SELF handle) __asm__(UNLOCK_SLOW);
SWIFTCALL void unlock_slow(void *SELF handle) {
  if (!real_unlock_slow) resolve();
  if (__tsan_release) __tsan_release(handle);
  real_unlock_slow(handle);
}
