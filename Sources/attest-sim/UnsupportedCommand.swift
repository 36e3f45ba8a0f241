import AppAttestSimulator
import ArgumentParser
import AttestSim
import Foundation
import GatewayWire

/// `attest-sim unsupported`: a device without App Attest (docs/attest-sim.md, "DeviceCheck"): its
/// DeviceCheck tokens, one per line, for `X-Apple-Device-Token`, that the Apple stand-in accepts.
struct Unsupported: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print DeviceCheck tokens of a simulated device without App Attest (for X-Apple-Device-Token).",
        discussion: """
            Each line is a fresh base64 token of one device (--device, else a new one, printed on stderr), as \
            DCDevice.generateToken gives; `attest-sim apple` with the same --ca accepts it for an hour and keeps \
            the device's two bits across its tokens. Send it with X-App-Attest-Unsupported: 1 to a route with \
            assertion.fallback.
            """)

    @Option(help: "A CA directory made by `attest-sim ca` (the one `attest-sim apple` serves with).")
    var ca: String

    @Option(help: "The device id, 32 hex digits (16 bytes); default: a new device.")
    var device: String?

    @Option(help: "How many tokens to print.")
    var count: Int = 1

    func run() throws {
        guard (1...10_000).contains(count) else { throw AttestSimError.usage("--count must be from 1 to 10000") }
        var id: [UInt8]?
        if let device {
            guard let bytes = Hex.decode(device), bytes.count == 16 else {
                throw AttestSimError.usage("--device must be 32 hex digits (16 bytes), got \"\(device)\"")
            }
            id = bytes
        }
        let testCA: TestCA
        do {
            testCA = try TestCA.load(from: URL(fileURLWithPath: ca))
        } catch {
            throw AttestSimError.file("--ca: \(error)")
        }
        let phone = SimulatedDeviceCheck(ca: testCA, deviceID: id)
        if device == nil { FileHandle.standardError.write(Data("device \(Hex.encode(phone.deviceID))\n".utf8)) }
        for _ in 0..<count { print(phone.tokenHeader()) }
    }
}
