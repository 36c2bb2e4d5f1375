import Foundation
import FuseKit
import StorageModel

/// What must hold whenever no lock is held, written once (gcsfuse's `checkInvariants`). The core
/// tests check it after every call they make (Tests/BucketFSTests/Harness.swift), the
/// reference-model test after every step. Each `INVARIANT` below says what, and why it matters.
extension BucketFileSystem {
    /// The invariants that do not hold now, each described; empty when all hold. O(inodes +
    /// cached names + the eviction queue), under `lock` once (then each read-side part under its
    /// own lock).
    func invariantViolations() -> [String] {
        var bad: [String] = []
        func expect(_ ok: Bool, _ what: @autoclosure () -> String) { if !ok { bad.append(what()) } }
        let streams: [ReadStream] = locked {
            // INVARIANT: the root is inode 1, a directory at "", in the table and the path index,
            // present, and held by the kernel.
            let root = nodes[Self.rootIno]
            expect(root != nil && root!.type == .directory && root!.path.isEmpty && root!.presence == .present
                   && root!.lookups >= 1 && byPath[PathKey(path: "", isDirectory: true)] == Self.rootIno,
                   "the root is not inode 1 at \"\", indexed and present")

            // One pass over the table checks what is per node; the sums are compared after it.
            var queued = Set<UInt64>()
            for t in cache.queuedTickets { queued.insert(t.number) }
            var keptBy: [ObjectIdentifier: Int] = [:]
            for h in handles.values { if let s = h.stage { keptBy[ObjectIdentifier(s), default: 0] += 1 } }
            var pins: [ObjectIdentifier: (node: Node, count: UInt32)] = [:]
            for h in dirHandles.values {
                for e in h.entries ?? [] { pins[ObjectIdentifier(e.node), default: (e.node, 0)].count += 1 }
            }
            var infos = 0, listings = 0, names = 0, unlinked = 0
            for (ino, n) in nodes {
                // INVARIANT: the table is keyed by each node's own number.
                expect(n.ino == ino, "nodes[\(ino)] holds inode \(n.ino) ('\(n.path)')")

                // INVARIANT: the path index and the inode table agree (the other half below): every
                // node in the table that is not unlinked is indexed under its path.
                if n.presence == .unlinked {
                    unlinked += 1
                } else {
                    expect(byPath[key(n)] == n.ino, "inode \(n.ino) '\(n.path)' (\(n.presence)) is not indexed under its path (the index has \(byPath[key(n)].map(String.init) ?? "nothing"))")
                }

                // INVARIANT: only directories have listings; only files have local content.
                expect(n.listing == nil || n.type == .directory, "file '\(n.path)' has a listing")
                expect(n.staged == nil || n.type == .regular, "directory '\(n.path)' has local content")

                // INVARIANT: every name in a cached listing names a node in the table, not
                // unlinked, whose path is that name in that directory.
                if let l = n.listing {
                    listings += 1
                    names += l.children.count
                    for (name, child) in l.children {
                        guard let c = nodes[child] else { bad.append("listing of '\(n.path)' names '\(name)' as inode \(child), which is not in the table"); continue }
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
                    expect(pendingNew[StoragePath.parent(n.path) ?? ""]?.contains(n.ino) == true,
                           "'\(n.path)' was created here and is not in the pending-new index")
                }

                // INVARIANT: a node's snapshot pins count the open directory snapshots that hold it.
                if n.snapshotPins > 0, pins[ObjectIdentifier(n)] == nil {
                    bad.append("'\(n.path)' has \(n.snapshotPins) snapshot pins, no open snapshot holds it")
                }

                // INVARIANT: a stage counts the open handles that keep it (a stage nobody keeps
                // and whose content is saved is dropped).
                if let s = n.staged {
                    let kept = keptBy[ObjectIdentifier(s)] ?? 0
                    expect(s.openHandles == kept, "'\(n.path)': its stage counts \(s.openHandles) open handles, \(kept) keep it")
                }
            }

            // INVARIANT: the path index and the inode table agree: every indexed path names a node
            // in the table with that path and type, not unlinked.
            if byPath.count != nodes.count - unlinked {
                for (k, ino) in byPath {
                    guard let n = nodes[ino] else { bad.append("path '\(k.path)' names inode \(ino), which is not in the table"); continue }
                    expect(n.path == k.path && (n.type == .directory) == k.isDirectory,
                           "path '\(k.path)' (directory: \(k.isDirectory)) names inode \(ino), which is '\(n.path)' (\(n.type))")
                    expect(n.presence != .unlinked, "path '\(k.path)' names inode \(ino), which was unlinked")
                }
            }
            // (When the index has as many paths as the table has nodes not unlinked, the pass
            // above, which found each of them under its own path, has seen every path.)

            // INVARIANT: the cache's counts equal what is cached (the bound counts what is held):
            // the infos and listings of the nodes in the table, and the names those listings hold.
            expect(cache.infos == infos, "the cache counts \(cache.infos) infos, the table holds \(infos)")
            expect(cache.listings == listings, "the cache counts \(cache.listings) listings, the table holds \(listings)")
            expect(cache.listedNames == names, "the cache counts \(cache.listedNames) listed names, the listings hold \(names)")

            // INVARIANT: every open file and directory names a node in the table (the node stays
            // while it is open), and a node held by a snapshot is the one the table holds.
            for (fh, h) in handles { expect(nodes[h.ino] != nil, "file handle \(fh) names inode \(h.ino), which is not in the table") }
            for (fh, h) in dirHandles { expect(nodes[h.ino] != nil, "directory handle \(fh) names inode \(h.ino), which is not in the table") }
            for (n, count) in pins.values {
                expect(n.snapshotPins == count, "'\(n.path)' has \(n.snapshotPins) snapshot pins, \(count) snapshots hold it")
                expect(isTabledLocked(n), "'\(n.path)' is held by a snapshot but not in the table")
            }
            return handles.values.compactMap(\.stream)
        }
        // The read side, each part under its own lock.
        bad += readBudget.invariantViolations()
        bad += bufferPool.invariantViolations()
        for s in streams { bad += s.invariantViolations() }
        bad += walkAhead.invariantViolations()
        return bad
    }
}
