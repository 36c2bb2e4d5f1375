import FirebaseStore

typealias FirebaseStoreRef = FirebaseStore

/// A value carried across tasks and queues as the SDK carries its handlers and results: they are
/// not `Sendable`, and each is used by one side at a time.
struct UncheckedValue<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

/// An operation carried into a task.
struct UncheckedOp<In, Out>: @unchecked Sendable {
    let op: (In) async throws -> Out
    init(_ op: @escaping (In) async throws -> Out) { self.op = op }
}
