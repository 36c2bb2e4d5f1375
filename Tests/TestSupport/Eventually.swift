import Foundation

/// How long a test waits for background work to show (an upload's retry, a walk's fetches, a
/// lost+found entry) before it calls the work missing. A ceiling, not a claim about speed: the
/// condition is polled every few milliseconds and the wait ends as soon as it holds, so a quick
/// machine waits milliseconds and a loaded one (the whole suite on two cores beside
/// `TEST_LOAD=2` busy loops) still passes (docs/TESTING.md, "Time in tests").
public let eventuallyCeiling: Duration = .seconds(60)

/// Polls `condition` until it holds (true) or `ceiling` of real time has passed (false).
public func eventually(ceiling: Duration = eventuallyCeiling, _ condition: () async -> Bool) async -> Bool {
    let end = ContinuousClock.now + ceiling
    while ContinuousClock.now < end {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return await condition()
}
