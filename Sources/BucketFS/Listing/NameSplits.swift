import Foundation
import StorageModel

/// Where to cut a run of names into ranges that hold about a page each, guessed from the names a
/// page showed (docs/SEMANTICS.md §6). Pure: a guess only changes how many requests a listing
/// makes, never what it lists (`RangeListing` checks every bound it is given).
///
/// The names a page showed are read as numbers in a mixed radix: each position's digits are
/// the characters seen at that position or at a later one where the names differ (so
/// `f000999` is followed by `f001000`, not by `f000:`), and a name's value is where it falls in the space those digits span. The
/// page's first and last names give its density; cuts are made a page's worth of values apart.
struct NameSplits {
    /// The characters before the positions read as digits (shared by every sample).
    private let head: [Unicode.Scalar]
    /// Per position: the characters seen there or later, in order; and whether some sample
    /// ended there, when digit 0 means "the name ended" (a shorter name sorts first).
    private let alphabets: [[Unicode.Scalar]]
    private let ends: [Bool]
    /// How many values the positions span (at most 2⁵⁰).
    private let span: Int
    /// Samples per value, from the first and last sample.
    private var density: Double = 1

    /// nil when the samples say nothing about density (fewer than two, or all alike).
    init?(samples: [String]) {
        guard samples.count >= 2, let first = samples.first, let last = samples.last else { return nil }
        let a = Array(first.unicodeScalars), b = Array(last.unicodeScalars)
        var common = 0
        while common < a.count, common < b.count, a[common] == b[common] { common += 1 }
        // A few positions before the first difference, so values can run past the last sample
        // (`f000999` → `f001999`); every sample shares them (they sort between first and last).
        let start = max(0, common - 4)
        head = Array(a[0..<start])
        var seen: [Set<Unicode.Scalar>] = []
        var endsAt = Set<Int>()
        for s in samples {
            let u = Array(s.unicodeScalars)
            endsAt.insert(u.count - start)
            guard u.count > start else { continue }
            for (i, c) in u[start...].enumerated() {
                if seen.count <= i { seen.append([]) }
                seen[i].insert(c)
            }
        }
        // Characters seen at a position, and those seen at any later position where the samples
        // differ (a fixed `.dat` after the digits adds nothing to them), for as many positions as
        // 2⁵⁰ values hold.
        var later = Set<Unicode.Scalar>()
        var all: [[Unicode.Scalar]] = Array(repeating: [], count: seen.count)
        for i in stride(from: seen.count - 1, through: 0, by: -1) {
            if seen[i].count > 1 { later.formUnion(seen[i]) }
            all[i] = seen[i].union(later).sorted { $0.value < $1.value }
        }
        var kept: [[Unicode.Scalar]] = [], keptEnds: [Bool] = []
        var span = 1
        for (i, alphabet) in all.enumerated() {
            let radix = alphabet.count + (endsAt.contains(i) ? 1 : 0)
            guard span <= (1 << 50) / radix else { break }
            span *= radix
            kept.append(alphabet)
            keptEnds.append(endsAt.contains(i))
        }
        guard !kept.isEmpty else { return nil }
        alphabets = kept
        ends = keptEnds
        self.span = span
        guard let lo = value(of: first), let hi = value(of: last), hi > lo else { return nil }
        density = Double(samples.count - 1) / Double(hi - lo)
    }

    /// `name`'s place in [0, span] (nil: it does not start with the head; 0 or `span` when it
    /// sorts before or after the whole space). Positions past the kept ones are left out.
    func value(of name: String) -> Int? {
        let u = Array(name.unicodeScalars)
        for (i, c) in head.enumerated() {
            guard i < u.count else { return 0 }
            if u[i] != c { return u[i].value < c.value ? 0 : span }
        }
        var v = 0
        var stopped = false
        for (i, alphabet) in alphabets.enumerated() {
            let shift = ends[i] ? 1 : 0
            v *= alphabet.count + shift
            let at = head.count + i
            guard !stopped, at < u.count else { stopped = true; continue }
            // How many characters are not after it (0: it sorts before them all).
            var lo = 0, hi = alphabet.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if alphabet[mid].value <= u[at].value { lo = mid + 1 } else { hi = mid }
            }
            if lo == 0 { stopped = true; continue }
            v += lo - 1 + shift
            if alphabet[lo - 1] != u[at] { stopped = true }
        }
        return v
    }

    /// The name at `value` (in [0, span)): the head, then the digits until one says "ended".
    func name(at value: Int) -> String {
        var digits: [Int] = []
        var rest = value
        for (i, alphabet) in alphabets.enumerated().reversed() {
            let radix = alphabet.count + (ends[i] ? 1 : 0)
            digits.append(rest % radix)
            rest /= radix
        }
        var scalars = head
        for (i, digit) in digits.reversed().enumerated() {
            let shift = ends[i] ? 1 : 0
            if digit < shift { break }
            scalars.append(alphabets[i][digit - shift])
        }
        var s = String.UnicodeScalarView()
        s.append(contentsOf: scalars)
        return String(s)
    }

    /// Up to `pieces - 1` cuts strictly between `after` and `before` (nil: no upper bound), in
    /// order, about `perPiece` samples' worth of values apart; with `before`, no more pieces than
    /// the density says its range holds. A cut may be farther than a page: the range it starts is
    /// cut again when it comes back full.
    func cuts(after: String, before: String?, pieces: Int, perPiece: Int) -> [String] {
        guard pieces >= 2, let from = value(of: after) else { return [] }
        let to = before.flatMap { value(of: $0) } ?? span
        guard to > from else { return [] }
        var pieces = pieces
        if before != nil {
            let pages = (Double(to - from) * density / Double(max(perPiece, 1))).rounded(.up)
            pieces = Int(min(pages, Double(pieces)))
            guard pieces >= 2 else { return [] }
        }
        var step = max(1, Int((Double(max(perPiece, 1)) / density).rounded()))
        if step > (to - from) / pieces, before != nil { step = max(1, (to - from) / pieces) }
        var out: [String] = []
        var last = after
        for i in 1..<pieces {
            let v = from + step * i
            guard v < to, v < span else { break }
            let cut = name(at: v)
            guard NameOrder.precedes(last, cut) else { continue }
            if let before, !NameOrder.precedes(cut, before) { break }
            out.append(cut)
            last = cut
        }
        return out
    }
}
