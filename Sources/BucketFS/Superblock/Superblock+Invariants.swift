import Foundation
import FuseKit
import StorageModel

/// What must hold about the superblock's parts whenever its lock is free, checked in one pass
/// (gcsfuse's `checkInvariants`). Each part states its own (`INVARIANT:` in its file); the ones
/// written here are about how the parts agree with each other and with the nodes.
extension Superblock {
    /// The superblock's invariants that do not hold now, each described (empty when all hold).
    /// O(inodes + cached names + the eviction queue), under the lock once.
    func invariantViolations() -> [String] { locked { $0.invariantViolations() } }
}

extension Held {
    /// The invariants that do not hold now (`Superblock.invariantViolations`), with the lock held:
    /// also what `Superblock.locked` checks at each release in the core's tests.
    func invariantViolations() -> [String] {
        var bad: [String] = []
        func expect(_ ok: Bool, _ what: @autoclosure () -> String) { if !ok { bad.append(what()) } }
        do {
            bad += self.table.violations(self)
            bad += self.negative.violations()

            // One pass over the table checks what is per node; the sums are compared after it.
            var queued = Set<UInt64>()
            for t in self.cache.order.queuedTickets { queued.insert(t.number) }
            var keptBy: [ObjectIdentifier: Int] = [:]
            for f in self.handles.files.values { if let s = f.stage { keptBy[ObjectIdentifier(s), default: 0] += 1 } }
            var pins: [ObjectIdentifier: (node: Node, count: UInt32)] = [:]
            var passes: [UInt64: Int] = [:]
            for d in self.handles.directories.values {
                for e in self[d].entries ?? [] { pins[ObjectIdentifier(e.node), default: (e.node, 0)].count += 1 }
                if let p = self[d].pass { passes[p.serial, default: 0] += 1 }
            }
            // A listing being applied pins the nodes it made until it ends (`ListingBuild`).
            for b in self.listingBuilds.values {
                for e in self[b].files { pins[ObjectIdentifier(e.node), default: (e.node, 0)].count += 1 }
            }
            var namedByListings = Set<UInt64>()
            for n in self.table.nodes.values { if let l = self[n].listing { namedByListings.formUnion(l.children.values) } }
            var infos = 0, listings = 0, names = 0, listedInfos = 0
            for n in self.table.nodes.values {
                // INVARIANT: a node is marked listed exactly when a cached listing names it (its
                // cached info then counts once, with its name).
                expect(self[n].listed == namedByListings.contains(n.ino), "'\(self[n].path)': listed \(self[n].listed), named by a cached listing \(namedByListings.contains(n.ino))")
                if self[n].listed, self[n].box != nil { listedInfos += 1 }
                // INVARIANT: only directories have listings; only files have local content.
                expect(self[n].listing == nil || n.type == .directory, "file '\(self[n].path)' has a listing")
                expect(self[n].staged == nil || n.type == .regular, "directory '\(self[n].path)' has local content")

                // INVARIANT: every name in a cached listing names a node in the table, not
                // unlinked, whose path is that name in that directory.
                if let l = self[n].listing {
                    listings += 1
                    names += l.children.count
                    // INVARIANT: a listing's `passes` count the open readdir passes that hold it.
                    expect(l.passes == passes[l.serial] ?? 0,
                           "listing of '\(self[n].path)' counts \(l.passes) readdir passes, \(passes[l.serial] ?? 0) hold it")
                    for (name, child) in l.children {
                        guard let c = self.table[child] else { bad.append("listing of '\(self[n].path)' names '\(name)' as inode \(child), which is not in the table"); continue }
                        expect(self[c].path == self[n].childPrefix + name,
                               "listing of '\(self[n].path)' names '\(name)' as inode \(child), which is '\(self[c].path)'")
                        expect(self[c].presence != .unlinked, "listing of '\(self[n].path)' names '\(name)', which was unlinked")
                    }
                }

                // INVARIANT: everything cached has a ticket in the eviction queue (else the bound
                // could never evict it), and nothing uncached has one.
                if self[n].box != nil { infos += 1 }
                expect((self[n].box != nil) == (self[n].infoTicket != 0), "'\(self[n].path)': info cached \(self[n].box != nil), ticket \(self[n].infoTicket)")
                expect((self[n].listing != nil) == (self[n].listingTicket != 0), "'\(self[n].path)': listing cached \(self[n].listing != nil), ticket \(self[n].listingTicket)")
                if self[n].infoTicket != 0 { expect(queued.contains(self[n].infoTicket), "'\(self[n].path)': its info's ticket is not queued") }
                if self[n].listingTicket != 0 { expect(queued.contains(self[n].listingTicket), "'\(self[n].path)': its listing's ticket is not queued") }

                // INVARIANT: every file created here and not yet uploaded (that a listing must show
                // until the bucket has it) is in the pending-new index under its directory.
                if n.type == .regular, self[n].presence != .unlinked, self.stageState(of: n)?.createdHere == true {
                    expect(self.pending.contains(n, self), "'\(self[n].path)' was created here and is not in the pending-new index")
                }

                // INVARIANT: a node's snapshot pins count the open directory snapshots (and the
                // listings being applied) that hold it.
                if self[n].snapshotPins > 0, pins[ObjectIdentifier(n)] == nil {
                    bad.append("'\(self[n].path)' has \(self[n].snapshotPins) snapshot pins, no open snapshot holds it")
                }

                if let s = self[n].staged {
                    // INVARIANT: a stage counts the open handles that keep it (a stage nobody
                    // keeps and whose content is saved is dropped).
                    let kept = keptBy[ObjectIdentifier(s)] ?? 0
                    expect(self[s].openHandles == kept, "'\(self[n].path)': its stage counts \(self[s].openHandles) open handles, \(kept) keep it")
                    // The upload life's own (StagedFile.swift), under the same lock.
                    bad += self[s].uploadViolations().map { "'\(self[n].path)': \($0)" }
                }
            }

            // INVARIANT: the cache's counts equal what is cached (the bound counts what is held):
            // the infos and listings of the nodes in the table, and the names those listings hold.
            expect(self.cache.order.infos == infos, "the cache counts \(self.cache.order.infos) infos, the table holds \(infos)")
            expect(self.cache.order.listings == listings, "the cache counts \(self.cache.order.listings) listings, the table holds \(listings)")
            expect(self.cache.order.listedNames == names, "the cache counts \(self.cache.order.listedNames) listed names, the listings hold \(names)")
            expect(self.cache.order.listedInfos == listedInfos, "the cache counts \(self.cache.order.listedInfos) listed infos, the table holds \(listedInfos)")

            // INVARIANT: every open file and directory names a node in the table (the node stays
            // while it is open), and a node held by a snapshot is the one the table holds.
            for (fh, f) in self.handles.files { expect(self.table[f.ino] != nil, "file handle \(fh) names inode \(f.ino), which is not in the table") }
            for (fh, d) in self.handles.directories { expect(self.table[d.ino] != nil, "directory handle \(fh) names inode \(d.ino), which is not in the table") }
            for (n, count) in pins.values {
                expect(self[n].snapshotPins == count, "'\(self[n].path)' has \(self[n].snapshotPins) snapshot pins, \(count) snapshots hold it")
                expect(self.table.isTabled(n), "'\(self[n].path)' is held by a snapshot but not in the table")
            }
        }
        return bad
    }
}
