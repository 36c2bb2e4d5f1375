import Foundation
import StorageModel

/// Where an `external_account` file's subject token comes from (`credential_source`): a file, a URL,
/// or (`ExecutableSubjectSource`) a program.
package protocol SubjectTokenSource: Sendable {
    func subjectToken(timeout: Duration) async throws -> String
    /// For whoami: `file /path`, `url http://…`, `executable cmd`.
    var summary: String { get }
}

/// `format`: `{"type": "text"}` (the default) or `{"type": "json", "subject_token_field_name": F}`.
package struct SubjectFormat: Sendable {
    var field: String?

    init(_ o: [String: Any]?, path: String) throws {
        guard let o, let type = o["type"] as? String, type != "text" else { field = nil; return }
        guard type == "json" else {
            throw StorageError.unauthenticated(message: "\(path): credential_source.format.type \"\(type)\" is neither text nor json")
        }
        guard let f = o["subject_token_field_name"] as? String, !f.isEmpty else {
            throw StorageError.unauthenticated(message: "\(path): credential_source.format of type json needs subject_token_field_name")
        }
        field = f
    }

    /// The token in `data` from `location` (never quoted in errors: it is a secret).
    func token(_ data: Data, location: String) throws -> String {
        let token: String?
        if let field {
            let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
            token = o?[field] as? String
            guard token != nil else {
                throw StorageError.unauthenticated(message: "no subject token in \(location): it is not JSON with a string field \"\(field)\"")
            }
        } else {
            token = String(decoding: data, as: UTF8.self)
        }
        guard let t = token, !t.isEmpty else { throw StorageError.unauthenticated(message: "the subject token in \(location) is empty") }
        return t
    }
}

/// `credential_source.file`: read at each exchange (the platform rotates it).
package struct FileSubjectSource: SubjectTokenSource {
    let file: String
    let format: SubjectFormat

    package func subjectToken(timeout: Duration) async throws -> String {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: file)) } catch {
            throw StorageError.unauthenticated(message: "cannot read the subject token file \(file): \(error.localizedDescription)")
        }
        return try format.token(data, location: "the file \(file)")
    }

    package var summary: String { "file \(file)" }
}

/// `credential_source.url`: a GET with the file's `headers` (Azure's IMDS, a sidecar).
package struct URLSubjectSource: SubjectTokenSource {
    let url: String
    /// The file whose credential_source.url it is, for messages.
    let path: String
    let headers: [(String, String)]
    let format: SubjectFormat
    let transport: any TokenTransport

    package func subjectToken(timeout: Duration) async throws -> String {
        let request = TokenRequest(method: "GET", url: url, headers: headers)
        let resp = try await TokenAnswers.send(request, through: transport, timeout: timeout, what: "the subject token URL \(url) (credential_source.url in \(path))")
        return try format.token(resp.body, location: "the answer of \(url)")
    }

    package var summary: String { "url \(url)" }
}
