import Glibc

/// What each signal does to `gatewayd run` (docs/operations.md, "Signals"). No signal that a
/// person or a tool may send by habit is fatal: those the gateway uses are handled, the others
/// ignored. The fault signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT, SIGSYS) keep
/// their default (the Swift runtime's crash report, then the end of the process): they mean a
/// crash, not a request. SIGKILL and SIGSTOP cannot be caught; SIGTSTP, SIGTTIN and SIGTTOU stop
/// the process as a terminal expects, and SIGCONT resumes it.
enum ProcessSignals {
    enum Action {
        /// Drain and exit 0.
        case drain
        /// Read the configuration file again.
        case reload
        /// Reopen the access log file (logrotate's convention).
        case reopenLogs
        /// Logged, nothing else.
        case logAndIgnore
    }

    /// The signals the gateway handles (a dispatch source each, while `run` serves).
    static let handled: [(Int32, Action)] = [
        (SIGTERM, .drain), (SIGINT, .drain), (SIGQUIT, .drain), (SIGHUP, .reload), (SIGUSR1, .reopenLogs),
        (SIGUSR2, .logAndIgnore),
    ]

    /// Signals whose default would end the process and that nothing here uses: ignored.
    static var ignored: [Int32] {
        [SIGPIPE, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT, SIGXCPU, SIGXFSZ]
            + Array(__libc_current_sigrtmin()...__libc_current_sigrtmax())
    }

    static func name(_ sig: Int32) -> String {
        switch sig {
        case SIGTERM: "SIGTERM"
        case SIGINT: "SIGINT"
        case SIGQUIT: "SIGQUIT"
        case SIGHUP: "SIGHUP"
        case SIGUSR1: "SIGUSR1"
        case SIGUSR2: "SIGUSR2"
        default: "signal \(sig)"
        }
    }

    /// First thing at start, before anything slow (a store restore can take seconds): every handled
    /// and ignored signal is set to be ignored, so that none of them ends a process that is still
    /// starting; `run` then installs the handlers. A signal something else in the process already
    /// handles (a profiler's SIGPROF) is left to it; SIGQUIT, which the Swift runtime's crash
    /// handler takes by default, is the gateway's (a drain, as nginx's graceful stop).
    static func prepare() {
        for (sig, _) in handled { signal(sig, SIG_IGN) }
        for sig in ignored where isDefault(sig) { signal(sig, SIG_IGN) }
    }

    private static func isDefault(_ sig: Int32) -> Bool {
        var old = sigaction()
        guard sigaction(sig, nil, &old) == 0 else { return false }
        return old.__sigaction_handler.sa_handler == nil  // SIG_DFL is the null handler
    }
}
