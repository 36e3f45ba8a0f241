import Dispatch
import Glibc

/// The stand-ins (`attest-sim apple`, `attest-sim google`) run until SIGTERM or SIGINT, then stop
/// their listener so that `wait()` returns and the process exits 0.
enum StandInSignals {
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    /// Calls `stop` (once per signal) on SIGTERM or SIGINT, which no longer end the process by themselves.
    static func stopOnTermination(_ stop: @escaping @Sendable () -> Void) {
        for sig in [SIGTERM, SIGINT] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler(handler: stop)
            source.resume()
            sources.append(source)
        }
    }
}
