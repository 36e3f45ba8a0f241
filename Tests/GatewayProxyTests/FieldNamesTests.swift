import Testing

@testable import GatewayProxy

/// The name sets the forwarding rules match fields against (`FieldNames`, Forwarding/HeaderEdit.swift).
@Suite("Field names as the forwarding rules match them")
struct FieldNamesTests {
    @Test("FieldNames: any case, by length then bytes, long names too") func fieldNames() {
        let long = String(repeating: "x", count: 70)
        let set = FieldNames(["X-Verified", "te", long + "-A"])
        func has(_ s: String) -> Bool { Array(s.utf8).withUnsafeBytes { set.contains($0) } }
        #expect(has("x-verified") && has("X-VERIFIED") && has("TE") && has(long.uppercased() + "-a"))
        #expect(!has("X-Verifie") && !has("X-Verifiedd") && !has("T") && !has(long + "-B"))
        #expect(FieldNames([]).isEmpty && !Array("a".utf8).withUnsafeBytes { FieldNames([]).contains($0) })
        // `_` (and `.`, `~`…) is `-`, as CGI, WSGI and PHP read names; prefixes match longer names only.
        #expect(has("X_Verified") && has("x_VERIFIED") && has("X.Verified") && has("x~verified") && !has("XVerified"))
        let families = FieldNames(["X-A"], prefixes: ["X-Forwarded-"])
        func inFamilies(_ s: String) -> Bool { families.contains(s) }
        #expect(inFamilies("x-forwarded-port") && inFamilies("X_FORWARDED_PREFIX") && inFamilies("x_a"))
        #expect(!inFamilies("X-Forwarded-") && !inFamilies("X-Forwarded") && !inFamilies("X-Forwardedx-y") && !FieldNames([]).contains("x"))
    }
}
