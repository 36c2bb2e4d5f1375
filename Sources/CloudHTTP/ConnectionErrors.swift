import AsyncHTTPClient
import Foundation

/// A failure to reach a server, in words a user can read: the system's text for the errno the
/// error carries ("Connection refused"), else the client's short description, its parentheses
/// balanced (the NIO texts nest theirs: `…(error set): Connection refused) (errno: 111)`).
package enum ConnectionErrors {
    package static func describe(_ error: any Error) -> String {
        let texts = [(error as? HTTPClientError)?.shortDescription, String(describing: error)].compactMap { $0 }
        for t in texts {
            if let r = t.range(of: #"errno: \d+"#, options: .regularExpression),
               let n = Int32(t[r].filter(\.isNumber)), n > 0 {
                return String(cString: strerror(n))
            }
        }
        return balanced(texts.first ?? "\(error)")
    }

    /// `s` without a `)` that closes nothing, with a `)` for each `(` left open.
    package static func balanced(_ s: String) -> String {
        var out = ""
        var open = 0
        for c in s {
            if c == "(" { open += 1 }
            if c == ")" {
                if open == 0 { continue }
                open -= 1
            }
            out.append(c)
        }
        return out + String(repeating: ")", count: open)
    }
}
