import CGatewaySystem
import Dispatch
import Glibc

/// Receives readiness for one file descriptor, on its loop's queue.
public protocol FileEventHandler: AnyObject {
    /// Edge-triggered: read until `wouldBlock`, and write until done or `wouldBlock`. May be called
    /// spuriously (the descriptor must tolerate an empty read).
    func handleEvents(readable: Bool, writable: Bool, hangup: Bool)
}
