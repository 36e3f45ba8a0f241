/// `${VAR}` and `${VAR:-default}` in scalar values, replaced from the environment when the file is
/// loaded (so that one file serves every environment, as in Kubernetes). `$${` writes a literal `${`;
/// any other `$` is itself. Keys are never substituted, and a substituted value is never read as
/// YAML again: a variable gives a value, not structure. docs/configuration.md, "Environment variables".
enum EnvironmentSubstitution {
    struct Problem {
        /// Unicode scalars from the start of the scalar's text to the `${` in question.
        let offset: Int
        let message: String
    }

    /// The text with every reference replaced; references that cannot be replaced are left as they
    /// were and reported.
    static func expand(_ text: String, environment: [String: String]) -> (text: String, problems: [Problem]) {
        let s = Array(text.unicodeScalars)
        guard s.contains("$") else { return (text, []) }
        var out = String.UnicodeScalarView()
        var problems: [Problem] = []
        var i = 0
        while i < s.count {
            guard s[i] == "$", i + 1 < s.count else {
                out.append(s[i])
                i += 1
                continue
            }
            if s[i + 1] == "$", i + 2 < s.count, s[i + 2] == "{" {
                out.append(contentsOf: "${".unicodeScalars)
                i += 3
                continue
            }
            guard s[i + 1] == "{" else {
                out.append(s[i])
                i += 1
                continue
            }
            guard let close = s[(i + 2)...].firstIndex(of: "}") else {
                problems.append(Problem(offset: i, message: "has \"${\" without a closing \"}\" (write $${ for a literal ${)"))
                out.append(contentsOf: s[i...])
                break
            }
            let inner = String(String.UnicodeScalarView(s[(i + 2)..<close]))
            let name: String
            let fallback: String?
            if let range = inner.range(of: ":-") {
                name = String(inner[..<range.lowerBound])
                fallback = String(inner[range.upperBound...])
            } else {
                name = inner
                fallback = nil
            }
            let reference = String(String.UnicodeScalarView(s[i...close]))
            if !isName(name) {
                problems.append(
                    Problem(
                        offset: i,
                        message: "has \(quoted(reference)), which is not ${NAME} or ${NAME:-default} (NAME: letters, digits and _, "
                            + "not starting with a digit; write $${ for a literal ${)"))
                out.append(contentsOf: reference.unicodeScalars)
            } else if let fallback, fallback.contains("${") {
                problems.append(
                    Problem(
                        offset: i,
                        message:
                            "has a default with \"${\" in \(quoted(reference)): a default is plain text, it cannot refer to another variable"
                    ))
                out.append(contentsOf: reference.unicodeScalars)
            } else if let value = environment[name], !(value.isEmpty && fallback != nil) {
                out.append(contentsOf: value.unicodeScalars)
            } else if let fallback {
                out.append(contentsOf: fallback.unicodeScalars)
            } else {
                problems.append(
                    Problem(
                        offset: i,
                        message: "uses the environment variable \(name), which is not set; set it, or give a default: ${\(name):-value}"))
                out.append(contentsOf: reference.unicodeScalars)
            }
            i = close + 1
        }
        return (String(out), problems)
    }

    static func isName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic) else {
            return false
        }
        return name.unicodeScalars.allSatisfy { $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) }
    }
}
