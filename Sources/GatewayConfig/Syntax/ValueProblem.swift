/// Why a scalar's text is not a valid value, worded to follow the key's path:
/// `limits.idle_timeout` + ` needs a unit (ms, s, m or h): write 60s or 60ms, got "60"`.
struct ValueProblem: Error {
    let message: String

    init(_ message: String) {
        self.message = message
    }
}
