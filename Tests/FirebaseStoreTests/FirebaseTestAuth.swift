import Foundation
import NIOHTTP1

/// The Firebase Auth REST API of the test server (the auth-* cases of Tests/FirebaseProtocol/cases.json), emulator-style addresses.
extension FirebaseTestServer {
    private func authError(_ status: Int, _ code: String) -> Response {
        .json(status, ["error": ["code": status, "message": code,
                                 "errors": [["message": code, "reason": "invalid", "domain": "global"]]]])
    }

    private static func base64URL(_ d: Data) -> String {
        d.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// An unsigned ID token (`alg: none`, as the Auth emulator issues) with the claims the SDKs
    /// read; the server remembers it, so an unknown or expired one is a 401 on Storage.
    func mintIDToken(uid: String, provider: String, email: String?, lifetime: Int? = nil) -> String {
        let now = tokenClock.date
        let life = lifetime ?? tokenLifetime
        var claims: [String: Any] = [
            "iss": "https://securetoken.google.com/\(projectId)", "aud": projectId, "user_id": uid, "sub": uid,
            "iat": Int(now.timeIntervalSince1970), "exp": Int(now.timeIntervalSince1970) + life,
            "auth_time": Int(now.timeIntervalSince1970), "firebase": ["sign_in_provider": provider, "identities": [:] as [String: Any]] as [String: Any],
            "nonce": UUID().uuidString,
        ]
        if let email { claims["email"] = email }
        let h = Self.base64URL((try? JSONSerialization.data(withJSONObject: ["alg": "none", "typ": "JWT"], options: [.sortedKeys])) ?? Data())
        let c = Self.base64URL((try? JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys])) ?? Data())
        let token = "\(h).\(c)."
        idTokens[token] = IDToken(uid: uid, expires: now.addingTimeInterval(TimeInterval(life)))
        return token
    }

    private func signedIn(_ user: User, kind: String = "identitytoolkit#VerifyPasswordResponse", isNewUser: Bool? = nil) -> Response {
        let refresh = "refresh-" + UUID().uuidString.lowercased()
        refreshTokens[refresh] = user.uid
        var o: [String: Any] = [
            "kind": kind, "localId": user.uid, "displayName": "",
            "idToken": mintIDToken(uid: user.uid, provider: user.provider, email: user.email),
            "refreshToken": refresh, "expiresIn": String(tokenLifetime),
        ]
        if let e = user.email { o["email"] = e; o["registered"] = true }
        if let n = isNewUser { o["isNewUser"] = n }
        return .json(200, o)
    }

    func auth(method: String, path: String, _ q: [String: String], _ headers: HTTPHeaders, _ body: Data) -> Response {
        guard method == "POST" else { return .error(404, "Not Found") }
        guard let key = q["key"] ?? headers.first(name: "x-goog-api-key"), !key.isEmpty else {
            // As Google APIs refuse a caller with no API key.
            let m = "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."
            return .json(403, ["error": ["code": 403, "message": m, "status": "PERMISSION_DENIED",
                                         "errors": [["message": m, "reason": "forbidden", "domain": "global"]]]])
        }
        if path == "/securetoken.googleapis.com/v1/token" { return refresh(body) }
        guard let j = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else {
            return authError(400, "INVALID_JSON")
        }
        signInCalls += 1
        switch path {
        case "/identitytoolkit.googleapis.com/v1/accounts:signInWithPassword":
            guard let email = j["email"] as? String, let password = j["password"] as? String else {
                return authError(400, "MISSING_EMAIL")
            }
            // Email enumeration protection: one code for a wrong email or password.
            guard let u = users.values.first(where: { $0.email == email }), u.password == password else {
                return authError(400, "INVALID_LOGIN_CREDENTIALS")
            }
            if u.disabled { return authError(400, "USER_DISABLED") }
            return signedIn(u)
        case "/identitytoolkit.googleapis.com/v1/accounts:signInWithCustomToken":
            // As the Auth emulator: the custom token may be plain JSON `{"uid": …}`.
            guard let t = j["token"] as? String, let d = t.data(using: .utf8),
                  let c = try? JSONSerialization.jsonObject(with: d) as? [String: Any],
                  let uid = c["uid"] as? String, !uid.isEmpty else {
                return authError(400, "INVALID_CUSTOM_TOKEN")
            }
            let isNew = users[uid] == nil
            if isNew { users[uid] = User(uid: uid, email: nil, password: nil, provider: "custom") }
            guard let u = users[uid], !u.disabled else { return authError(400, "USER_DISABLED") }
            var signed = u
            signed.provider = "custom"
            return signedIn(signed, kind: "identitytoolkit#VerifyCustomTokenResponse", isNewUser: isNew)
        case "/identitytoolkit.googleapis.com/v1/accounts:signUp":
            if let email = j["email"] as? String {
                guard !users.values.contains(where: { $0.email == email }) else { return authError(400, "EMAIL_EXISTS") }
                guard let password = j["password"] as? String, password.count >= 6 else {
                    return authError(400, "WEAK_PASSWORD : Password should be at least 6 characters")
                }
                let uid = "uid-" + UUID().uuidString.prefix(12).lowercased()
                users[uid] = User(uid: uid, email: email, password: password, provider: "password")
                return signedIn(users[uid]!, kind: "identitytoolkit#SignupNewUserResponse")
            }
            guard anonymousSignIn else { return authError(400, "ADMIN_ONLY_OPERATION") }
            let uid = "anon-" + UUID().uuidString.prefix(12).lowercased()
            users[uid] = User(uid: uid, email: nil, password: nil, provider: "anonymous")
            return signedIn(users[uid]!, kind: "identitytoolkit#SignupNewUserResponse")
        default:
            return .error(404, "Not Found")
        }
    }

    private func refresh(_ body: Data) -> Response {
        refreshCalls += 1
        if refreshFailNext > 0 {
            refreshFailNext -= 1
            return authError(503, "UNAVAILABLE")
        }
        let form = Self.parseQuery(Substring(String(decoding: body, as: UTF8.self)))
        guard form["grant_type"] == "refresh_token" else { return authError(400, "INVALID_GRANT_TYPE") }
        guard let t = form["refresh_token"], !t.isEmpty else { return authError(400, "MISSING_REFRESH_TOKEN") }
        guard let uid = refreshTokens[t] else { return authError(400, "INVALID_REFRESH_TOKEN") }
        if revokedRefreshTokens.contains(t) { return authError(400, "TOKEN_EXPIRED") }
        guard let u = users[uid] else { return authError(400, "USER_NOT_FOUND") }
        if u.disabled { return authError(400, "USER_DISABLED") }
        let id = mintIDToken(uid: uid, provider: u.provider, email: u.email)
        return .json(200, ["access_token": id, "id_token": id, "expires_in": String(tokenLifetime), "token_type": "Bearer",
                           "refresh_token": t, "user_id": uid, "project_id": projectId])
    }
}
