/// What the KeyDescription says of the attested key itself: algorithm, curve, size and purposes,
/// each from hardwareEnforced when there (what the secure hardware enforces), else softwareEnforced.
/// Values are KeyMint's (`Algorithm.aidl`, `EcCurve.aidl`, `KeyPurpose.aidl`); unknown ones are
/// kept as numbers.
public struct KeyCharacteristics: Sendable, Equatable {
    public let algorithm: Int64?
    public let ecCurve: Int64?
    public let keySize: Int64?
    public let purposes: [Int64]

    public init(algorithm: Int64?, ecCurve: Int64?, keySize: Int64?, purposes: [Int64]) {
        self.algorithm = algorithm
        self.ecCurve = ecCurve
        self.keySize = keySize
        self.purposes = purposes
    }

    init(_ d: KeyDescription) {
        self.init(
            algorithm: d.value(\.algorithm), ecCurve: d.value(\.ecCurve), keySize: d.value(\.keySize),
            purposes: d.value(\.purposes) ?? [])
    }

    public enum Algorithm {
        public static let rsa: Int64 = 1, ec: Int64 = 3, mlDSA: Int64 = 4, aes: Int64 = 32, tripleDES: Int64 = 33, hmac: Int64 = 128
    }

    public enum Curve {
        public static let p224: Int64 = 0, p256: Int64 = 1, p384: Int64 = 2, p521: Int64 = 3, curve25519: Int64 = 4
    }

    public enum Purpose {
        public static let encrypt: Int64 = 0, decrypt: Int64 = 1, sign: Int64 = 2, verify: Int64 = 3, wrapKey: Int64 = 5
        public static let agreeKey: Int64 = 6, attestKey: Int64 = 7
    }

    /// `EC`, `RSA`, `ML_DSA`, … (the vectors' spelling), or the number.
    public var algorithmName: String? {
        algorithm.map { a in
            [
                Algorithm.rsa: "RSA", Algorithm.ec: "EC", Algorithm.mlDSA: "ML_DSA", Algorithm.aes: "AES",
                Algorithm.tripleDES: "TRIPLE_DES",
                Algorithm.hmac: "HMAC",
            ][a] ?? String(a)
        }
    }

    public var ecCurveName: String? {
        ecCurve.map { c in
            [Curve.p224: "P_224", Curve.p256: "P_256", Curve.p384: "P_384", Curve.p521: "P_521", Curve.curve25519: "CURVE_25519"][c]
                ?? String(c)
        }
    }

    public var purposeNames: [String] {
        purposes.map { p in
            [
                Purpose.encrypt: "ENCRYPT", Purpose.decrypt: "DECRYPT", Purpose.sign: "SIGN", Purpose.verify: "VERIFY",
                Purpose.wrapKey: "WRAP_KEY", Purpose.agreeKey: "AGREE_KEY", Purpose.attestKey: "ATTEST_KEY",
            ][p] ?? String(p)
        }
    }
}
