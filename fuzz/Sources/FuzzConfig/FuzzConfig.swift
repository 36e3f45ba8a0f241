import Foundation
// libFuzzer target: gateway.yaml loading (GatewayConfig.parse: Yams' composer, the YAML node tree,
// ${VAR} substitution and the strict decoder) on arbitrary text, as `load(path:)` reads a file.
//
// Properties checked (a violation traps):
//   1. Nothing crashes (no trap in Yams, the node conversion or any decoder), and parsing is
//      deterministic: the same configuration, or the same diagnostics.
//   2. Every refusal carries at least one diagnostic, each naming the file, with a message, at a line
//      and column of the text (line ≥ 1 and at most one past the last line break libyaml counts,
//      column ≥ 1), sorted by position.
//   3. A configuration that loads has at least one listener, upstream and route, every route naming an
//      upstream that exists; its source map places the listeners.
import FuzzSupport
import GatewayConfig

let environment = ["GW_PORT": "8443", "GW_SECRET": "s3cret", "HOME": "/home/gw", "EMPTY": ""]

func parse(_ yaml: String) -> Result<GatewayConfig, ConfigError> {
    do {
        return .success(
            try GatewayConfig.parse(yaml: yaml, file: "gateway.yaml", baseDirectory: "/etc/attest-gateway", environment: environment))
    } catch {
        return .failure(error)
    }
}

/// Lines as libyaml counts them: LF, CR (alone or before LF), NEL, LS and PS break lines.
func lineCount(_ yaml: String) -> Int {
    var lines = 1
    var previousCR = false
    for s in yaml.unicodeScalars {
        switch s.value {
        case 0x0a: if !previousCR { lines += 1 }
        case 0x0d, 0x85, 0x2028, 0x2029: lines += 1
        default: break
        }
        previousCR = s.value == 0x0d
    }
    return lines
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    // As GatewayConfig.load reads a file: text that is not UTF-8 is refused before parsing.
    guard let yaml = String(data: Data(bytes: data, count: size), encoding: .utf8) else { return 0 }
    let first = parse(yaml)
    switch (first, parse(yaml)) {
    case (.success(let a), .success(let b)):
        guard a == b else { fuzzFail("two parses of the same text give different configurations") }
        check(a)
    case (.failure(let a), .failure(let b)):
        guard a == b else { fuzzFail("two parses of the same text give different diagnostics") }
        check(a, lines: lineCount(yaml))
    default:
        fuzzFail("two parses of the same text disagree")
    }
    return 0
}

func check(_ error: ConfigError, lines: Int) {
    guard !error.diagnostics.isEmpty else { fuzzFail("a refusal without a diagnostic") }
    var previous = (0, 0)
    for d in error.diagnostics {
        guard d.file == "gateway.yaml", !d.message.isEmpty else { fuzzFail("diagnostic without file or message: \(d)") }
        guard d.line >= 1, d.column >= 1 else { fuzzFail("diagnostic without a position: \(d)") }
        guard d.line <= lines + 1 else { fuzzFail("diagnostic at line \(d.line) of a \(lines)-line text: \(d)") }
        guard (d.line, d.column) >= previous else { fuzzFail("diagnostics out of order at \(d)") }
        previous = (d.line, d.column)
    }
}

func check(_ config: GatewayConfig) {
    guard !config.listeners.isEmpty, !config.upstreams.isEmpty, !config.routes.isEmpty else {
        fuzzFail("a configuration without listeners, upstreams or routes loaded")
    }
    for r in config.routes where config.upstream(named: r.upstream) == nil {
        fuzzFail("route \(r.name) names upstream \(r.upstream), which does not exist")
    }
    guard config.sourceMap.has("listeners") else { fuzzFail("the source map does not place the listeners") }
}
