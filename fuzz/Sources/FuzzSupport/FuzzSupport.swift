import AppAttest
import Foundation

/// What the verifier targets share: optional outcome printing (`FUZZ_PRINT=1`) and the check that
/// two verify paths that both failed agree on a code that belongs to the verifier, with a detail.
public enum FuzzSupport {
    public static let printOutcome = ProcessInfo.processInfo.environment["FUZZ_PRINT"] == "1"

    public static func print<V>(_ bytes: Int, _ result: Result<V, AppAttestError>, describe: (V) -> String) {
        guard printOutcome else { return }
        let line: String
        switch result {
        case .success(let v): line = "\(bytes) bytes: valid (\(describe(v)))\n"
        case .failure(let e): line = "\(bytes) bytes: \(e)\n"
        }
        FileHandle.standardError.write(Data(line.utf8))
    }

    /// Traps unless both failures have the same code, the code is one of `allowed`, and a detail says why.
    public static func checkFailures(
        _ direct: AppAttestError, _ staged: AppAttestError, allowed: Set<AppAttestError.Code>, what: String
    ) {
        guard direct.code == staged.code else { fatalError("\(what) threw \(direct) but parse + verify threw \(staged)") }
        guard allowed.contains(direct.code) else { fatalError("\(what) failed with the foreign code \(direct.code): \(direct)") }
        guard !direct.detail.isEmpty else { fatalError("error \(direct.code) has no detail") }
    }
}
