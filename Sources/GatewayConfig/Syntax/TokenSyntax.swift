/// Names, HTTP tokens and paths.
enum TokenSyntax {
    /// Names of listeners, upstreams and routes (they become metric labels): 1 to 64 of
    /// `A-Z a-z 0-9 _ - .`, starting with a letter or a digit.
    static func isName(_ text: String) -> Bool {
        guard let first = text.first, first.isASCII, first.isLetter || first.isNumber, text.count <= 64 else {
            return false
        }
        return text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "_-.".contains($0)) }
    }

    /// RFC 9110 §5.6.2 `token` (header field names, methods).
    static func isToken(_ text: some StringProtocol) -> Bool {
        !text.isEmpty
            && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "!#$%&'*+-.^_`|~".contains($0)) }
    }
}

enum URLPathSyntax {
    /// An absolute path: starts with `/`, visible ASCII only, no query or fragment.
    static func isPath(_ text: String) -> Bool {
        guard text.hasPrefix("/") else { return false }
        return text.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7F && $0 != "?" && $0 != "#" }
    }
}

enum FilePathSyntax {
    /// `path` if absolute, else `baseDirectory/path`, with `.` components and empty components removed
    /// and `..` applied lexically (no file system access).
    static func resolve(_ path: String, against baseDirectory: String) -> String {
        let joined = path.hasPrefix("/") ? path : baseDirectory + "/" + path
        let absolute = joined.hasPrefix("/")
        var components: [Substring] = []
        for component in joined.split(separator: "/") {
            switch component {
            case ".": continue
            case "..":
                if let last = components.last, last != ".." {
                    components.removeLast()
                } else if !absolute {
                    components.append(component)
                }
            default: components.append(component)
            }
        }
        let body = components.joined(separator: "/")
        if absolute { return "/" + body }
        return body.isEmpty ? "." : body
    }
}
