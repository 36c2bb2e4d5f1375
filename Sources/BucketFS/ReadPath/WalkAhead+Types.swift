import Foundation
import StorageModel

/// The walk-ahead's values (WalkAhead.swift): the orders, a file's place in them and a file it
/// may fetch (`Order`, `Position`, `Candidate`), and what it keeps, each GUARDED_BY(WalkAhead.lock):
/// a file fetched ahead (`Entry`), what the opens of one directory have shown (`Track`), and the
/// files of a directory's last window not fetched yet (`Queue`).
extension WalkAhead {
    /// The orders a directory's files may be opened in.
    enum Order: Sendable, CaseIterable {
        /// The listing's (the bucket's UTF-8 byte order of names): tar, rsync, restic, cp -r.
        case listing
        /// Inode numbers (ours are hashes of the path): borg's `scandir_inorder`.
        case inode
    }

    struct Candidate {
        let path: String
        let info: ObjectInfo
        /// Index in the order the window was made in.
        let position: Int
    }

    /// Where an opened file stands in its directory's orders.
    struct Position: Sendable {
        let directory: String
        let listing: Int
        let inode: Int
        subscript(_ order: Order) -> Int {
            switch order {
            case .listing: listing
            case .inode: inode
            }
        }
    }

    final class Entry {
        /// Tells this fetch's landing from an earlier one's of the same path.
        let id: UInt64
        let generation: Int64
        /// Reserved in the budget by this walk-ahead while the entry is here.
        let reserved: Int
        let bytes: PartBuffer
        let directory: String
        /// The order and index it was fetched ahead in (nil: kept after a read, never a guess).
        let order: Order?
        let position: Int
        /// When it was fetched ahead, or last handed to (or given back by) a reader.
        var touched: Double
        /// An open took it; it stays for the next open of the generation.
        var taken = false
        /// A reader read it whole (a guess that paid).
        var read = false
        /// Streams reading from it now.
        var readers = 0
        /// Its request is under way (it holds a connection).
        var fetching = false
        init(id: UInt64, generation: Int64, reserved: Int, bytes: PartBuffer, directory: String, order: Order?, position: Int, touched: Double) {
            self.id = id
            self.generation = generation
            self.reserved = reserved
            self.bytes = bytes
            self.directory = directory
            self.order = order
            self.position = position
            self.touched = touched
        }
    }

    /// What the opens of one directory have shown.
    struct Track {
        /// The furthest index read whole in each order, the count of opens when that file was
        /// opened, and how many files in a row stepped forward in it by at most `walkStep(spread:)`.
        /// A file read behind the furthest leaves both when it was opened before the furthest
        /// was (another reader, behind), or when it is at most `reorderSlack` behind.
        var last: [Order: Int] = [:]
        var lastSeq: [Order: UInt64] = [:]
        var run: [Order: Int] = [:]
        /// How far behind the furthest the readers behind it have read (0: one reader), since
        /// the reader last started over in that order.
        var spread: [Order: Int] = [:]
        /// Where the readers stand in each order, the most recently moved last (at most
        /// `readers`): the index each read whole last, and the count of `reads` then. A read
        /// just past one (behind the furthest: the very next file) is that reader's next file;
        /// any other read is another reader's. Readers that take the files in runs (a data
        /// loader's workers, `xargs -n8`) read that far apart.
        var cursors: [Order: [(at: Int, moved: Int)]] = [:]
        /// Files read whole in the directory.
        var reads = 0
        /// The readers that moved within the last `2 × readers` files read, in `order`.
        func recentReaders(_ order: Order) -> Int {
            (cursors[order] ?? []).filter { reads - $0.moved <= 2 * WalkAhead.readers }.count
        }
        /// The order a walk was seen in (guessing for it), and how many guesses were read since.
        var walking: Order?
        var streak = 0
        /// Steps in a row that make a walk evident: `evidenceSteps`, doubled by each false start.
        var evidence = WalkAhead.evidenceSteps
        /// Files fetched ahead that were read whole / that went unread.
        var hits = 0
        var misses = 0
        var touched: Double = 0
        /// The count of opens when the reader last started over in the order walked (a step
        /// back): files opened before it belong to an earlier walk and may be fetched ahead.
        var since: UInt64 = 0
        /// The last window planned (`plan`): its order, width, reach, and the reader's index then.
        var window: (order: Order, width: Int, reach: Int, at: Int)?
    }

    /// The files of a directory's last window not fetched yet, in order: each starts as a fetch
    /// of the directory's lands, while fewer than `width` are in flight.
    struct Queue {
        let order: Order
        var waiting: ArraySlice<Candidate>
        let width: Int
        let fetch: @Sendable (Candidate) async throws -> Data
    }
}
