import Foundation
import NIOHTTP1

extension GCSTestServer {
    // MARK: fault hooks (called on the event loop, mid-body)

    /// Whether to drop the connection now, having received `received` body bytes of this request.
    typealias Fault = TestAnswerFault

    /// The fault to apply to this answer, if any (counts it down).
    func takeFault(method: String, uri: String, status: Int) -> Fault? {
        lock.lock(); defer { lock.unlock() }
        if losePollAnswers > 0, method == "GET", uri.contains("/operations/") {
            losePollAnswers -= 1
            return .lose
        }
        if let m = loseAnswerTo, m == method {
            loseAnswerTo = nil
            return .lose
        }
        if uri.contains("alt=media"), (200..<300).contains(status), mediaFaultTimes > 0, let f = mediaFault {
            mediaFaultTimes -= 1
            return .media(f)
        }
        return nil
    }

    enum BodyFault { case drop, stall }

    func bodyFault(method: String, uri: String, headers: HTTPHeaders, received: Data, new: Int) -> BodyFault? {
        lock.lock(); defer { lock.unlock() }
        if method == "PUT", uri.contains("upload_id=") { uploadBytesReceived += new }
        if method == "PUT", let limit = stallUploadAfterBytes, received.count > limit, persistPart(uri, headers, received) {
            stallUploadAfterBytes = nil
            stallsDone += 1
            return .stall
        }
        if method == "PUT", let limit = dropUploadAfterBytes, received.count > limit, persistPart(uri, headers, received) {
            dropUploadAfterBytes = nil
            dropsDone += 1
            return .drop
        }
        return nil
    }

    /// Keeps the 256 KiB multiples of a session's PUT received so far, as a server does when the
    /// request breaks; false when this is not a PUT that continues its session.
    func persistPart(_ uri: String, _ headers: HTTPHeaders, _ received: Data) -> Bool {
        let q = Self.parseQuery(uri.split(separator: "?", maxSplits: 1).dropFirst().first)
        guard let id = q["upload_id"], var s = sessions[id],
              let cr = headers.first(name: "Content-Range"), let start = Self.rangeStart(cr), start == Int64(s.data.count)
        else { return false }
        let keep = received.count / (256 << 10) * (256 << 10)
        sessions[id] = nil
        s.append(Data(received.prefix(keep)))
        sessions[id] = s
        return true
    }

    static func rangeStart(_ contentRange: String) -> Int64? {
        // "bytes a-b/N"
        let r = contentRange.replacingOccurrences(of: "bytes ", with: "")
        guard let dash = r.firstIndex(of: "-") else { return nil }
        return Int64(r[..<dash])
    }

}
