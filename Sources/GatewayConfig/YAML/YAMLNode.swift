/// The composed YAML document, detached from Yams: every node keeps the position where it starts.
///
/// Aliases have already been replaced by the node their anchor names (so they carry the anchor's
/// position); merge keys (`<<`) are kept as ordinary pairs and resolved by `MappingFields`.
indirect enum YAMLNode {
    case scalar(YAMLScalar)
    case sequence([YAMLNode], SourcePosition)
    case mapping([(key: YAMLNode, value: YAMLNode)], SourcePosition)

    var position: SourcePosition {
        switch self {
        case .scalar(let scalar): scalar.position
        case .sequence(_, let position), .mapping(_, let position): position
        }
    }

    /// How the node reads in a message: `a list`, `a mapping`, `the string "x"`, `an empty value`.
    var summary: String {
        switch self {
        case .sequence: "a list"
        case .mapping: "a mapping"
        case .scalar(let scalar): scalar.summary
        }
    }
}

struct YAMLScalar {
    /// The scalar's text after YAML unescaping, as written for plain scalars.
    let text: String
    /// Plain (unquoted, untagged) scalars are the only ones that can be numbers, booleans or null.
    let isPlain: Bool
    let position: SourcePosition
    /// A `${VAR}` in it could not be replaced (reported already): decoding skips the value quietly.
    var unresolved = false

    /// A plain `~`, `null` or nothing at all (`key:` with no value).
    var isNull: Bool {
        isPlain && ["", "~", "null", "Null", "NULL"].contains(text)
    }

    var summary: String {
        if isNull { return text.isEmpty ? "an empty value" : "null (\(text))" }
        if isPlain { return "\(quoted(text))" }
        return "the quoted string \(quoted(text))"
    }
}

/// `"text"` with quotes and control characters escaped, for messages.
func quoted(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        case "\r": out += "\\r"
        default:
            if scalar.value < 0x20 || scalar.value == 0x7F {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}
