import Foundation
import FuseKit
import StorageModel

/// What must hold about the superblock's parts whenever its lock is free, checked in one pass
/// (gcsfuse's `checkInvariants`). Each part states its own (`INVARIANT:` in its file); the ones
/// written here are about how the parts agree with each other and with the nodes.
extension Superblock {
    /// The superblock's invariants that do not hold now, each described (empty when all hold).
    /// O(inodes + cached names + the eviction queue), under the lock once.
    func invariantViolations() -> [String] {
        var bad: [String] = []
        func expect(_ ok: Bool, _ what: @autoclosure () -> String) { if !ok { bad.append(what()) } }
        locked {
            bad += table.violations()
            bad += negative.violations()

            // One pass over the table checks what is per node; the sums are compared after it.
            var queued = Set<UInt64>()
            for t in cache.order.queuedTickets { queued.insert(t.number) }
            var keptBy: [ObjectIdentifier: Int] = [:]
            for h in handles.files.values { if let s = h.stage { keptBy[ObjectIdentifier(s), default: 0] += 1 } }
            var pins: [ObjectIdentifier: (node: Node, count: UInt32)] = [:]
            var passes: [UInt64: Int] = [:]
            for h in handles.directories.values {
                for e in h.entries ?? [] { pins[ObjectIdentifier(e.node), default: (e.node, 0)].count += 1 }
                if let p = h.pass { passes[p.serial, default: 0] += 1 }
            }
            // A listing being applied pins the nodes it made until it ends (`ListingBuild`).
            for b in listingBuilds.values {
                for e in b.files { pins[ObjectIdentifier(e.node), default: (e.node, 0)].count += 1 }
            }
            var namedByListings = Set<UInt64>()
            for n in table.nodes.values { if let l = n.listing { namedByListings.formUnion(l.children.values) } }
            var infos = 0, listings = 0, names = 0, listedInfos = 0
            for n in table.nodes.values {
                // INVARIANT: a node is marked listed exactly when a cached listing names it (its
                // cached info then counts once, with its name).
                expect(n.listed == namedByListings.contains(n.ino), "'\(n.path)': listed \(n.listed), named by a cached listing \(namedByListings.contains(n.ino))")
                if n.listed, n.box != nil { listedInfos += 1 }
                // INVARIANT: only directories have listings; only files have local content.
                expect(n.listing == nil || n.type == .directory, "file '\(n.path)' has a listing")
                expect(n.staged == nil || n.type == .regular, "directory '\(n.path)' has local content")

                // INVARIANT: every name in a cached listing names a node in the table, not
                // unlinked, whose path is that name in that directory.
                if let l = n.listing {
                    listings += 1
                    names += l.children.count
                    // INVARIANT: a listing's `passes` count the open readdir passes that hold it.
                    expect(l.passes == passes[l.serial] ?? 0,
                           "listing of '\(n.path)' counts \(l.passes) readdir passes, \(passes[l.serial] ?? 0) hold it")
                    for (name, child) in l.children {
                        guard let c = table[child] else { bad.append("listing of '\(n.path)' names '\(name)' as inode \(child), which is not in the table"); continue }
                        expect(c.path == n.childPrefix + name,
                               "listing of '\(n.path)' names '\(name)' as inode \(child), which is '\(c.path)'")
                        expect(c.presence != .unlinked, "listing of '\(n.path)' names '\(name)', which was unlinked")
                    }
                }

                // INVARIANT: everything cached has a ticket in the eviction queue (else the bound
                // could never evict it), and nothing uncached has one.
                if n.box != nil { infos += 1 }
                expect((n.box != nil) == (n.infoTicket != 0), "'\(n.path)': info cached \(n.box != nil), ticket \(n.infoTicket)")
                expect((n.listing != nil) == (n.listingTicket != 0), "'\(n.path)': listing cached \(n.listing != nil), ticket \(n.listingTicket)")
                if n.infoTicket != 0 { expect(queued.contains(n.infoTicket), "'\(n.path)': its info's ticket is not queued") }
                if n.listingTicket != 0 { expect(queued.contains(n.listingTicket), "'\(n.path)': its listing's ticket is not queued") }

                // INVARIANT: every file created here and not yet uploaded (that a listing must show
                // until the bucket has it) is in the pending-new index under its directory.
                if n.type == .regular, n.presence != .unlinked, n.staged?.createdHere == true {
                    expect(pending.contains(n), "'\(n.path)' was created here and is not in the pending-new index")
                }

                // INVARIANT: a node's snapshot pins count the open directory snapshots (and the
                // listings being applied) that hold it.
                if n.snapshotPins > 0, pins[ObjectIdentifier(n)] == nil {
                    bad.append("'\(n.path)' has \(n.snapshotPins) snapshot pins, no open snapshot holds it")
                }

                if let s = n.staged {
                    // INVARIANT: a stage counts the open handles that keep it (a stage nobody
                    // keeps and whose content is saved is dropped).
                    let kept = keptBy[ObjectIdentifier(s)] ?? 0
                    expect(s.openHandles == kept, "'\(n.path)': its stage counts \(s.openHandles) open handles, \(kept) keep it")
                    // The upload life's own (StagedFile.swift), under the same lock.
                    bad += s.uploadViolations().map { "'\(n.path)': \($0)" }
                }
            }

            // INVARIANT: the cache's counts equal what is cached (the bound counts what is held):
            // the infos and listings of the nodes in the table, and the names those listings hold.
            expect(cache.order.infos == infos, "the cache counts \(cache.order.infos) infos, the table holds \(infos)")
            expect(cache.order.listings == listings, "the cache counts \(cache.order.listings) listings, the table holds \(listings)")
            expect(cache.order.listedNames == names, "the cache counts \(cache.order.listedNames) listed names, the listings hold \(names)")
            expect(cache.order.listedInfos == listedInfos, "the cache counts \(cache.order.listedInfos) listed infos, the table holds \(listedInfos)")

            // INVARIANT: every open file and directory names a node in the table (the node stays
            // while it is open), and a node held by a snapshot is the one the table holds.
            for (fh, h) in handles.files { expect(table[h.ino] != nil, "file handle \(fh) names inode \(h.ino), which is not in the table") }
            for (fh, h) in handles.directories { expect(table[h.ino] != nil, "directory handle \(fh) names inode \(h.ino), which is not in the table") }
            for (n, count) in pins.values {
                expect(n.snapshotPins == count, "'\(n.path)' has \(n.snapshotPins) snapshot pins, \(count) snapshots hold it")
                expect(table.isTabled(n), "'\(n.path)' is held by a snapshot but not in the table")
            }
        }
        return bad
    }
}
