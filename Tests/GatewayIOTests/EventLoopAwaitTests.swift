import Dispatch
import Foundation
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

@testable import GatewayIO

@Suite("Event loop: a reply awaited (awaitedReplies)", .serialized, .timeLimit(.minutes(3)))
struct EventLoopAwaitTests {
    /// While the loop awaits a reply it waits in epoll itself after a drain. Events keep being
    /// served as they come, and work queued from other threads (`execute`, Dispatch timers) is not
    /// starved by a steady stream of events: the waits of one drain are bounded (`maxAwaits`).
    @Test func queuedWorkRunsWhileRepliesAreAwaited() throws {
        Socket.ignoreSIGPIPE()
        let loop = EventLoop(index: 0)
        let server = try EchoServer(loop: loop)
        defer { server.stop() }
        loop.queue.sync { loop.awaitedReplies = 1 }
        defer { loop.queue.sync { loop.awaitedReplies = 0 } }
        let client = try LoopbackClient(port: server.port)
        defer { client.close() }
        // Echo round trips back to back for 400 ms: the loop always has an event coming within a
        // fraction of a millisecond, so an unbounded wait would never hand the thread back.
        let stop = Atomic<Bool>(false)
        let echoed = Atomic<Int>(0)
        let pinger = Thread {
            while !stop.load(ordering: .relaxed) {
                client.send([0x61])
                if client.receive(exactly: 1) == [0x61] { echoed.wrappingAdd(1, ordering: .relaxed) }
            }
        }
        pinger.start()
        usleep(50_000)
        var worst: UInt64 = 0
        for _ in 0..<30 {
            let queued = DispatchTime.now().uptimeNanoseconds
            let ran = DispatchSemaphore(value: 0)
            let delay = Atomic<UInt64>(0)
            loop.execute {
                delay.store(DispatchTime.now().uptimeNanoseconds - queued, ordering: .relaxed)
                ran.signal()
            }
            #expect(ran.wait(timeout: .now() + 2) == .success)
            worst = max(worst, delay.load(ordering: .relaxed))
            usleep(10_000)
        }
        stop.store(true, ordering: .relaxed)
        while !pinger.isFinished { usleep(1_000) }
        #expect(echoed.load(ordering: .relaxed) > 100, "events were served while awaiting")
        // maxAwaits (8) waits of at most awaitMillis (1 ms) each, plus scheduling on a loaded machine.
        #expect(worst < 100_000_000, "queued work waited \(worst / 1_000_000) ms")
    }
}
