/// What a filesystem operation hands down to every store call it makes, as task-local values:
/// one deadline for the whole operation, all its requests and retries included (docs/SEMANTICS.md §5).
public enum OperationContext {
    /// When the current operation must be over; nil outside an operation (a store call then has
    /// only its own deadline).
    @TaskLocal public static var deadline: ContinuousClock.Instant?

    /// The earlier of `own` and the operation's deadline.
    public static func deadline(capping own: ContinuousClock.Instant) -> ContinuousClock.Instant {
        guard let d = deadline else { return own }
        return min(own, d)
    }

    /// Runs `body` with a deadline `timeout` from now (or the enclosing one, if earlier).
    public static func run<T>(timeout: Duration, _ body: () async throws -> T) async rethrows -> T {
        let end = deadline(capping: ContinuousClock.now + timeout)
        return try await $deadline.withValue(end) { try await body() }
    }
}
