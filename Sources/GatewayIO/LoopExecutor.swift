import Dispatch

/// Runs work on an event loop: inline when already there, else queued to it. What a store's
/// completion (called on any thread) uses to come back to the loop that asked.
public protocol LoopExecutor: Sendable {
    func run(_ work: @escaping @Sendable () -> Void)
}

/// A loop-confined value carried through a store completion back to its own loop, where alone it
/// is used.
public struct LoopBound<T>: @unchecked Sendable {
    public let value: T
    public init(_ value: T) { self.value = value }
}

/// The executor of one `EventLoop`: inline when already on it (the memory store answers
/// synchronously), else queued to it.
public final class EventLoopExecutor: LoopExecutor {
    private static let key = DispatchSpecificKey<UInt>()
    private let queue: DispatchQueue
    private let tag: UInt

    public init(loop: EventLoop) {
        queue = loop.queue
        tag = UInt(bitPattern: ObjectIdentifier(loop).hashValue)
        queue.setSpecific(key: Self.key, value: tag)
    }

    public func run(_ work: @escaping @Sendable () -> Void) {
        if DispatchQueue.getSpecific(key: Self.key) == tag { work() } else { queue.async(execute: work) }
    }
}
