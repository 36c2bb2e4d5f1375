import Foundation

/// How a retry waits out its pause: real time (`Task.sleep`) unless a test injects a clock of its
/// own, which then decides when each pause ends (no real time passes). A cancelled wait throws.
public struct RetrySleeper: Sendable {
    private let body: @Sendable (Duration) async throws -> Void

    public init(_ body: @escaping @Sendable (Duration) async throws -> Void) { self.body = body }

    /// Real time.
    public static let real = RetrySleeper { try await Task.sleep(for: $0) }

    public func sleep(for pause: Duration) async throws { try await body(pause) }
}
