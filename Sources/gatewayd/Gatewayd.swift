import ArgumentParser
import Foundation
import Gateway

/// `gatewayd`: the attest-gateway binary. Subcommands are added as the gateway grows; today it holds
/// the offline verifiers that ops use to inspect an attestation or assertion by hand.
@main
struct Gatewayd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatewayd",
        abstract: "App Attest gateway: verifies that requests come from a genuine Apple device running the genuine app.",
        version: BuildInfo.current.text + "\nmalloc:  " + MemoryAllocator.description,
        subcommands: [
            Run.self, Check.self, VerifyAttestation.self, VerifyAssertion.self, VerifyReceipt.self, VerifyAndroidAttestation.self,
        ]
    )

    /// Usage errors exit 2 with the message on stderr (ArgumentParser's default is 64); help exits 0.
    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch let exit as ExitCode {
            Foundation.exit(exit.rawValue)
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))
                Foundation.exit(0)
            }
            FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
            Foundation.exit(2)
        }
    }
}
