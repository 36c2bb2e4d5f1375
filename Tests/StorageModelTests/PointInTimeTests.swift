import Foundation
import Testing
@testable import StorageModel

@Suite struct PointInTimeTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func durationsCountBackFromNow() throws {
        #expect(try PointInTime(parsing: "90m", now: now).date == now.addingTimeInterval(-5400))
        #expect(try PointInTime(parsing: "2h", now: now).date == now.addingTimeInterval(-7200))
        #expect(try PointInTime(parsing: "3d", now: now).date == now.addingTimeInterval(-3 * 86400))
        #expect(try PointInTime(parsing: "45s", now: now).date == now.addingTimeInterval(-45))
        #expect(try PointInTime(parsing: "1w", now: now).date == now.addingTimeInterval(-604800))
    }

    @Test func rfc3339TimesWithZonesAndFractions() throws {
        let z = try PointInTime(parsing: "2026-11-20T10:00:00Z", now: now)
        #expect(z.date == Date(timeIntervalSince1970: 1_795_168_800))
        let offset = try PointInTime(parsing: "2026-11-20T11:00:00+01:00", now: now)
        #expect(offset.date == z.date)
        let frac = try PointInTime(parsing: "2026-11-20T10:00:00.250Z", now: now)
        #expect(abs(frac.date.timeIntervalSince(z.date) - 0.25) < 0.001)
        let lower = try PointInTime(parsing: "2026-11-20t10:00:00z", now: now)
        #expect(lower.date == z.date)
        #expect(z.description == "2026-11-20T10:00:00.000Z")
    }

    @Test func refusesWhatIsNotATime() {
        for bad in ["", "yesterday", "2h30m", "-2h", "10", "2026-11-20", "2026-11-20T10:00:00", "3x", "٣d"] {
            #expect(throws: PointInTime.ParseError.self, "\(bad)") { try PointInTime(parsing: bad, now: now) }
        }
        #expect(throws: PointInTime.ParseError.inTheFuture("2030-01-01T00:00:00Z")) {
            try PointInTime(parsing: "2030-01-01T00:00:00Z", now: now)
        }
    }
}
