import CGatewaySystem
import Dispatch
import Glibc

/// One event loop: a serial queue, an epoll descriptor and a single `DispatchSourceRead` on it.
///
/// Measured on this machine (docs/event-loop.md): a `DispatchSourceRead` per connection costs about
/// 1.8× the CPU per request of this design, because every event hops between libdispatch's epoll
/// thread and a worker. Here libdispatch wakes the loop once per burst and the handler drains every ready socket
/// with `epoll_wait(…, 0)`. Sockets are registered once, edge-triggered, for input and output.
///
/// Everything but `execute` and `shutdown` must be called on `queue`.
public final class EventLoop: @unchecked Sendable, CustomStringConvertible {
    public let index: Int
    public let queue: DispatchQueue
    public let timers: TimerWheel
    private let epfd: Int32
    private var source: (any DispatchSourceRead)?
    private var ticker: (any DispatchSourceTimer)?
    private var handlers: [(any FileEventHandler)?] = []
    private let fds = UnsafeMutablePointer<Int32>.allocate(capacity: 512)
    private let masks = UnsafeMutablePointer<UInt32>.allocate(capacity: 512)
    /// Where this loop's connections read (then copy into their `inbound`). One per loop: a buffer
    /// shared by all loops would be written by several threads at once.
    let readScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    /// Where message heads are written before they are queued (`Connection.writeThroughScratch`):
    /// one per loop, used by one writer at a time (`headScratchBusy`).
    let headScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    var headScratchBusy = false
    private var closed = false

    public static let tick: DispatchTimeInterval = .milliseconds(100)

    public var description: String { "EventLoop(\(index))" }

    public init(index: Int) {
        self.index = index
        self.queue = DispatchQueue(label: "gateway.loop.\(index)", qos: .userInitiated)
        self.timers = TimerWheel(tickMillis: 100, slots: 1024)
        epfd = epoll_create1(Int32(EPOLL_CLOEXEC))
        precondition(epfd >= 0, "EventLoop: epoll_create1 failed (\(cgw_errno()))")
        let src = DispatchSource.makeReadSource(fileDescriptor: epfd, queue: queue)
        src.setEventHandler { [unowned self] in self.drain() }
        src.resume()
        source = src
        // The wheel's clock starts before its ticker exists. Started after `resume`, it raced the
        // first tick (ThreadSanitizer, docs/development.md): a tick first would read a start of 0,
        // walk the wheel up to the machine's uptime, and the wheel would then stand still that long.
        timers.start(atMillis: Self.monotonicMillis())
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + Self.tick, repeating: Self.tick, leeway: .milliseconds(10))
        t.setEventHandler { [unowned self] in self.dispatching { self.timers.advance(toMillis: Self.monotonicMillis()) } }
        t.resume()
        ticker = t
    }

    deinit {
        fds.deallocate()
        masks.deallocate()
        readScratch.deallocate()
        headScratch.deallocate()
    }

    /// Monotonic nanoseconds for request timing: one vDSO `clock_gettime`, without `DispatchTime`'s
    /// conversions (an exchange reads the clock four times).
    @inline(__always)
    public static func monotonicNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    public static func monotonicMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    public func execute(_ work: @escaping @Sendable () -> Void) { queue.async(execute: work) }

    private var pendingTasks: [() -> Void] = []

    /// Runs `task` on this loop soon, after the current event. For loop-confined (non-Sendable)
    /// work; must be called on the loop. Tasks run in the order enqueued.
    public func enqueue(_ task: @escaping () -> Void) {
        pendingTasks.append(task)
        if pendingTasks.count == 1 { queue.async { self.runPending() } }  // holds the loop until it ran
    }

    private func runPending() {
        dispatching {
            while !pendingTasks.isEmpty {
                let batch = pendingTasks
                pendingTasks.removeAll(keepingCapacity: true)
                for t in batch { t() }
            }
        }
    }

    // MARK: - Write batching

    /// True while the loop runs handlers (events, enqueued tasks, timers): connections then queue
    /// their sends, and the loop flushes them once at the end of the batch.
    private(set) var isDispatching = false
    private var flushList: [Connection] = []
    private var flushing: [Connection] = []
    /// Whether the event being handled reported a hang-up (EPOLLRDHUP, EPOLLHUP or EPOLLERR).
    private(set) var currentEventHangup = false

    /// The flush lists are only moved in and out of their properties (`swap`) and changed as
    /// locals, so that every access to them is a plain move the optimizer needs not check at run time.
    func queueFlush(_ c: Connection) {
        var list: [Connection] = []
        swap(&list, &flushList)
        list.append(c)
        swap(&list, &flushList)
    }

    /// Runs `body` as a batch: writes made inside are sent at its end (nested calls join the outer batch).
    private func dispatching(_ body: () -> Void) {
        if isDispatching {
            body()
            return
        }
        isDispatching = true
        body()
        flushQueuedWrites()
        isDispatching = false
    }

    private func flushQueuedWrites() {
        // Flushing may queue more (a drained connection resumes its producer): loop until none is left.
        while !flushList.isEmpty {
            var batch: [Connection] = []
            swap(&batch, &flushing)
            swap(&batch, &flushList)  // batch: the queued ones; flushList: the spare (empty) array
            for c in batch { c.flushQueuedWrites() }
            batch.removeAll(keepingCapacity: true)
            swap(&batch, &flushing)
        }
    }

    /// Registers `fd` (non-blocking) for edge-triggered input, output and peer hang-up.
    public func register(fd: Int32, handler: any FileEventHandler) throws(Socket.Error) {
        if Int(fd) >= handlers.count { handlers += Array(repeating: nil, count: Int(fd) - handlers.count + 64) }
        handlers[Int(fd)] = handler
        let events = cgw_EPOLLIN() | cgw_EPOLLOUT() | cgw_EPOLLRDHUP() | cgw_EPOLLET()
        guard cgw_epoll_add(epfd, fd, events) == 0 else {
            handlers[Int(fd)] = nil
            throw Socket.Error(operation: "epoll_ctl ADD", errno: cgw_errno())
        }
    }

    /// Level-triggered input only: for listening sockets, so that a paused accept loop (EMFILE) is
    /// woken again on the next tick by still-pending connections.
    public func registerListener(fd: Int32, handler: any FileEventHandler) throws(Socket.Error) {
        if Int(fd) >= handlers.count { handlers += Array(repeating: nil, count: Int(fd) - handlers.count + 64) }
        handlers[Int(fd)] = handler
        guard cgw_epoll_add(epfd, fd, cgw_EPOLLIN()) == 0 else {
            handlers[Int(fd)] = nil
            throw Socket.Error(operation: "epoll_ctl ADD", errno: cgw_errno())
        }
    }

    /// Stops watching `fd` and forgets its handler; the caller closes it.
    public func deregister(fd: Int32) {
        _ = cgw_epoll_del(epfd, fd)
        if Int(fd) < handlers.count { handlers[Int(fd)] = nil }
    }

    /// Replies this loop awaits from a peer that answers within a fraction of a millisecond (the
    /// Redis store's connection of this loop, `RedisLoopConnection`, while it has requests in
    /// flight). While it is above 0 and no loop task is queued, a drain that finds nothing ready
    /// waits in `epoll_wait` itself (up to `awaitMillis`, at most `maxAwaits` times per drain)
    /// instead of handing the thread back to libdispatch: the reply then wakes this thread
    /// directly, instead of libdispatch's event thread which then wakes a worker (two thread
    /// wake-ups per reply; docs/redis.md, "Connections"). Work queued from other threads
    /// (`execute`, Dispatch timers) waits at most `maxAwaits` × `awaitMillis` for it.
    public var awaitedReplies = 0
    static let awaitMillis: Int32 = 1
    static let maxAwaits = 8

    private func drain() {
        var rounds = 0
        var awaits = 0
        while !closed {
            var n = Int(cgw_epoll_poll(epfd, fds, masks, 512))
            if n <= 0 {
                guard awaitedReplies > 0, pendingTasks.isEmpty else { return }
                if awaits >= Self.maxAwaits {
                    // Let queued work (cross-loop tasks, timers) run, then drain again.
                    queue.async { [weak self] in self?.drain() }
                    return
                }
                awaits += 1
                n = Int(cgw_epoll_wait_ms(epfd, fds, masks, 512, Self.awaitMillis))
                if n <= 0 || closed { return }
            }
            dispatching {
                for i in 0..<n {
                    let fd = Int(fds[i])
                    guard fd < handlers.count, let h = handlers[fd] else { continue }
                    let m = masks[i]
                    currentEventHangup = m & (cgw_EPOLLRDHUP() | cgw_EPOLLHUP() | cgw_EPOLLERR()) != 0
                    h.handleEvents(
                        readable: m & (cgw_EPOLLIN() | cgw_EPOLLRDHUP() | cgw_EPOLLHUP() | cgw_EPOLLERR()) != 0,
                        writable: m & (cgw_EPOLLOUT() | cgw_EPOLLERR()) != 0,
                        hangup: m & (cgw_EPOLLHUP() | cgw_EPOLLERR()) != 0)
                }
                currentEventHangup = false
            }
            rounds += 1
            if n < 512 { continue }
            if rounds >= 8 {
                // Let queued work (cross-loop tasks, timers) run between large bursts.
                queue.async { [weak self] in self?.drain() }
                return
            }
        }
    }

    /// `shutdown`, then waits until it ran: afterwards no event, timer or task of this loop is
    /// handled, so what its handlers reach (unowned) may go. Not on the loop's queue.
    public func shutdownAndWait() {
        shutdown()
        queue.sync {}
    }

    /// Cancels the sources and closes the epoll descriptor; registered descriptors are the owners' to close.
    public func shutdown() {
        queue.async { [self] in
            guard !closed else { return }
            closed = true
            ticker?.cancel()
            source?.setCancelHandler { [epfd] in _ = Glibc.close(epfd) }
            source?.cancel()
            handlers.removeAll()
            timers.cancelAll()
        }
    }
}
