import Foundation
import StorageModel

/// `credential_source.executable` (docs/CREDENTIALS.md): a program that prints the subject token as
/// JSON (`version`, `success`, `token_type`, `id_token` or `saml_response`, `expiration_time`), run
/// only when `GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1`, killed after `timeout_millis` (default
/// 30 s, 5 s to 120 s). An unexpired answer in `output_file` is used instead of running it. Its
/// output is a secret: no error quotes it.
package struct ExecutableSubjectSource: SubjectTokenSource {
    let command: String
    let timeout: Duration
    let outputFile: String?
    /// Variables the program gets on top of ours (`GOOGLE_EXTERNAL_ACCOUNT_AUDIENCE` and the rest).
    let variables: [String: String]
    let environment: [String: String]
    let clock: BucketClock

    package static let allowVariable = "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES"

    init(_ o: [String: Any], path: String, audience: String, tokenType: String, impersonated: String?,
         environment: [String: String], clock: BucketClock) throws {
        guard let command = o["command"] as? String, !command.isEmpty else {
            throw StorageError.unauthenticated(message: "\(path): credential_source.executable needs a command")
        }
        let millis = (o["timeout_millis"] as? NSNumber)?.intValue ?? 30_000
        guard (5_000...120_000).contains(millis) else {
            throw StorageError.unauthenticated(message: "\(path): credential_source.executable.timeout_millis must be between 5000 and 120000")
        }
        if o["interactive_timeout_millis"] != nil {
            throw StorageError.unauthenticated(message: "\(path): interactive executables are not supported (bucketfs runs unattended)")
        }
        self.command = command
        self.timeout = .milliseconds(millis)
        self.outputFile = (o["output_file"] as? String).flatMap { $0.isEmpty ? nil : $0 }
        var v = ["GOOGLE_EXTERNAL_ACCOUNT_AUDIENCE": audience, "GOOGLE_EXTERNAL_ACCOUNT_TOKEN_TYPE": tokenType,
                 "GOOGLE_EXTERNAL_ACCOUNT_INTERACTIVE": "0", "GOOGLE_EXTERNAL_ACCOUNT_REVOKE": "0"]
        if let impersonated { v["GOOGLE_EXTERNAL_ACCOUNT_IMPERSONATED_EMAIL"] = impersonated }
        if let outputFile { v["GOOGLE_EXTERNAL_ACCOUNT_OUTPUT_FILE"] = outputFile }
        self.variables = v
        self.environment = environment
        self.clock = clock
    }

    package var summary: String { "executable \(Self.words(command).first ?? command)" }

    package func subjectToken(timeout _: Duration) async throws -> String {
        guard environment[Self.allowVariable] == "1" else {
            throw StorageError.unauthenticated(message: "the credential runs the executable \(Self.words(command).first ?? command), "
                + "and executables must be allowed: set \(Self.allowVariable)=1")
        }
        if let outputFile, let data = FileManager.default.contents(atPath: outputFile),
           let cached = try? parse(data, from: "the output_file \(outputFile)"), cached.expires != nil {
            return cached.token
        }
        var data = try await run()
        if data.allSatisfy({ $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }), let outputFile,
           let saved = FileManager.default.contents(atPath: outputFile) {
            data = saved
        }
        return try parse(data, from: "the executable's output").token
    }

    /// The token of a response; an unsuccessful or expired one fails by name.
    func parse(_ data: Data, from origin: String) throws -> (token: String, expires: Date?) {
        guard let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw StorageError.unauthenticated(message: "\(origin) is not a JSON response")
        }
        guard let version = (o["version"] as? NSNumber)?.intValue else {
            throw StorageError.unauthenticated(message: "\(origin) has no version")
        }
        guard version <= 1 else { throw StorageError.unauthenticated(message: "\(origin) has version \(version); 1 is supported") }
        guard let success = o["success"] as? Bool else { throw StorageError.unauthenticated(message: "\(origin) has no success field") }
        guard success else {
            let code = o["code"] as? String ?? "?"
            let message = o["message"] as? String ?? "?"
            throw StorageError.unauthenticated(message: "the executable refused: code \(code): \(message)")
        }
        var expires: Date? = nil
        if let e = (o["expiration_time"] as? NSNumber)?.doubleValue {
            expires = Date(timeIntervalSince1970: e)
            if expires! < clock.date { throw StorageError.unauthenticated(message: "\(origin) has expired (expiration_time is past)") }
        }
        let type = o["token_type"] as? String ?? ""
        let field: String
        switch type {
        case "urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token": field = "id_token"
        case "urn:ietf:params:oauth:token-type:saml2": field = "saml_response"
        default: throw StorageError.unauthenticated(message: "\(origin) has an unsupported token_type \"\(type)\"")
        }
        guard let token = o[field] as? String, !token.isEmpty else {
            throw StorageError.unauthenticated(message: "\(origin) has no \(field)")
        }
        return (token, expires)
    }

    /// Runs the command (split as a shell would split words, not run by a shell), stdout and stderr
    /// together, killed at the timeout.
    func run() async throws -> Data {
        let argv = Self.words(command)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: argv[0].contains("/") ? argv[0] : "/usr/bin/env")
        process.arguments = argv[0].contains("/") ? Array(argv.dropFirst()) : argv
        process.environment = environment.merging(variables) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        let name = argv[0]
        let exited = AsyncStream<Int32>.makeStream()
        process.terminationHandler = { p in exited.continuation.yield(p.terminationStatus); exited.continuation.finish() }
        do { try process.run() } catch {
            throw StorageError.unauthenticated(message: "cannot run the credential executable \(name): \(error.localizedDescription)")
        }
        // The output, read to its end on a thread of its own and handed over through a stream, so
        // that waiting for it can be given up (a child the program leaves behind may hold it open).
        let chunks = AsyncStream<Data>.makeStream()
        Thread.detachNewThread {
            chunks.continuation.yield(pipe.fileHandleForReading.readDataToEndOfFile())
            chunks.continuation.finish()
        }
        let limit = timeout, clock = self.clock
        // The answer is the program's exit and its whole output, both within the timeout (a
        // child it leaves holding the output open counts as no answer).
        let answer: (status: Int32, data: Data)? = await withTaskGroup(of: (status: Int32, data: Data)?.self) { group in
            group.addTask {
                var status: Int32 = -1
                for await s in exited.stream { status = s; break }
                var data = Data()
                for await c in chunks.stream { data.append(c) }
                if Task.isCancelled { return nil }
                return (status, data)
            }
            group.addTask { try? await clock.sleep(for: limit); return nil }
            let first = await group.next() ?? nil
            if first == nil, process.isRunning {
                // Killed now, so that its output ends and the group can end with it.
                kill(process.processIdentifier, SIGKILL)
            }
            group.cancelAll()
            return first
        }
        guard let (status, data) = answer else {
            throw StorageError.unauthenticated(message: "the credential executable \(name) gave no answer within \(limit) (timeout_millis)")
        }
        guard status == 0 else {
            throw StorageError.unauthenticated(message: "the credential executable \(name) exited with status \(status)")
        }
        return data
    }

    /// Splits `s` into words as a POSIX shell does: blanks separate, quotes group, `\` escapes.
    package static func words(_ s: String) -> [String] {
        var out: [String] = []
        var cur = ""
        var inWord = false
        var quote: Character? = nil
        var escape = false
        for ch in s {
            if escape { cur.append(ch); escape = false; inWord = true; continue }
            if let q = quote {
                if ch == q { quote = nil } else if ch == "\\" && q == "\"" { escape = true } else { cur.append(ch) }
                continue
            }
            switch ch {
            case "\\": escape = true
            case "'", "\"": quote = ch; inWord = true
            case " ", "\t", "\n":
                if inWord { out.append(cur); cur = ""; inWord = false }
            default: cur.append(ch); inWord = true
            }
        }
        if inWord { out.append(cur) }
        return out.isEmpty ? [s] : out
    }
}
