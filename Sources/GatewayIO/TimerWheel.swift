import CGatewaySystem
import Dispatch
import Glibc

/// A hashed timing wheel: O(1) schedule and cancel, one tick source per loop instead of a timer per
/// connection. Loop-confined.
public final class TimerWheel {
    public struct Handle: Hashable, Sendable { let id: UInt64 }

    private struct Entry {
        let id: UInt64
        let dueTick: Int64
        let action: () -> Void
    }

    private let tickMillis: Int64
    private var slots: [[Entry]]
    private var currentTick: Int64 = 0
    private var startMillis: Int64 = 0
    private var nextID: UInt64 = 1
    private var live: Set<UInt64> = []

    init(tickMillis: Int64, slots: Int) {
        self.tickMillis = tickMillis
        self.slots = Array(repeating: [], count: slots)
    }

    func start(atMillis now: Int64) { startMillis = now }

    /// The wheel's clock: monotonic milliseconds as of the last tick (up to one tick behind). Free to
    /// read, for deadlines that are checked by the wheel anyway.
    public var nowMillis: Int64 { startMillis + currentTick * tickMillis }

    public var count: Int { live.count }

    /// Runs `action` on the loop after at least `millis` (rounded up to the tick).
    @discardableResult
    public func schedule(afterMillis millis: Int64, _ action: @escaping () -> Void) -> Handle {
        let ticks = max(1, (millis + tickMillis - 1) / tickMillis)
        let due = currentTick + ticks
        let id = nextID
        nextID += 1
        slots[Int(due % Int64(slots.count))].append(Entry(id: id, dueTick: due, action: action))
        live.insert(id)
        return Handle(id: id)
    }

    public func cancel(_ handle: Handle) { live.remove(handle.id) }

    func cancelAll() {
        live.removeAll()
        for i in slots.indices { slots[i].removeAll() }
    }

    /// Fires every entry due up to `now`, in tick order.
    func advance(toMillis now: Int64) {
        let target = (now - startMillis) / tickMillis
        while currentTick < target {
            currentTick += 1
            let i = Int(currentTick % Int64(slots.count))
            guard !slots[i].isEmpty else { continue }
            let entries = slots[i]
            slots[i].removeAll(keepingCapacity: true)
            for e in entries {
                guard live.contains(e.id) else { continue }
                if e.dueTick > currentTick {
                    slots[i].append(e)  // a later round of the wheel
                    continue
                }
                live.remove(e.id)
                e.action()
            }
        }
    }
}
