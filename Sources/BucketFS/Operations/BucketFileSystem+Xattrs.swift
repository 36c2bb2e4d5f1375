import Foundation
import FuseKit
import StorageModel

/// Extended attributes (docs/SEMANTICS.md §4): answered from cached metadata, changed with one PATCH each.
extension BucketFileSystem {
    // MARK: - extended attributes

    /// `security.*`, `system.*`, `trusted.*`, hidden keys and other namespaces need no request.
    public func immediateGetxattrError(name: String) -> Errno? {
        XattrName(name).refusal(change: false)
    }

    public func getxattr(ino: UInt64, name: String) async throws(Errno) -> [UInt8] {
        let x = XattrName(name)
        if let e = x.refusal(change: false) { throw e }
        let n = try node(ino)
        let box = try await refreshed(n)
        return try xattrValue(superblock.xattrSource(n, shown: box?.info), x)
    }

    public func listxattr(ino: UInt64) async throws(Errno) -> [String] {
        let n = try node(ino)
        let box = try await refreshed(n)
        return xattrNames(superblock.xattrSource(n, shown: box?.info))
    }

    /// getxattr with no I/O, on the libfuse thread: nil when the metadata must be read first.
    public func cachedGetxattr(ino: UInt64, name: String) -> Result<[UInt8], Errno>? {
        let x = XattrName(name)
        guard let source = superblock.cachedXattrSource(ino: ino) else { return nil }
        do throws(Errno) { return .success(try xattrValue(source, x)) } catch { return .failure(error) }
    }

    /// listxattr with no I/O: nil when the metadata must be read first.
    public func cachedListxattr(ino: UInt64) -> [String]? {
        superblock.cachedXattrSource(ino: ino).map(xattrNames)
    }

    /// The value of one attribute from what is cached: a staged file's pending metadata, else the
    /// object's (`info`: the node's, or the one just read).
    private func xattrValue(_ source: Superblock.XattrSource, _ x: XattrName) throws(Errno) -> [UInt8] {
        if let e = x.refusal(change: false) { throw e }
        if let m = source.stagedMetadata {
            switch x {
            case .writable(let p): if let v = p.get(m) { return Array(v.utf8) }; throw .ENODATA
            case .custom(let k): if let v = m.customMetadata[k] { return Array(v.utf8) }; throw .ENODATA
            default: break
            }
        }
        guard let info = source.info, let v = x.value(in: info) else { throw .ENODATA }
        return Array(v.utf8)
    }

    /// The listed attribute names: a property whose value every object would have anyway is
    /// left out (docs/SEMANTICS.md §4.1).
    private func xattrNames(_ source: Superblock.XattrSource) -> [String] {
        let (path, policy) = (source.path, config.contentTypes)
        if let m = source.stagedMetadata {
            return XattrName.listed(for: m) { p, v in !DefaultProperties.isDefault(p, v, path: path, policy: policy) }
        }
        guard let info = source.info else { return [] }
        // The kernel refuses user.* attributes on a symbolic link (getxattr ENODATA, setxattr
        // EPERM): listing any would make rsync -X and tar --xattrs fail on every link.
        if !source.isDirectory, stat.isSymlink(info) { return [] }
        let names = XattrName.listed(for: info.writable) { p, v in !DefaultProperties.isDefault(p, v, path: path, policy: policy) }
        // A placeholder's properties (servers give it a default contentType) mean nothing for a
        // directory: list only its custom keys, so rsync -aX / cp -a neither copy nor strip them.
        // They stay readable and settable by name.
        if source.isDirectory { return names.filter { !$0.hasPrefix("user.storage.") } }
        return names
    }

    public func setxattr(ino: UInt64, name: String, value: [UInt8], flags: Int32) async throws(Errno) {
        let x = XattrName(name)
        if let e = x.refusal(change: true) {
            if case .emptyKey = x { throw refused(name, e, "an attribute name needs a key after 'user.'") }
            throw e
        }
        if case .custom(let k) = x, k.utf8.count > CustomMetadataLimits.maxKeyBytes {
            throw refused(name, .E2BIG, "the key is \(k.utf8.count) bytes; Cloud Storage allows \(CustomMetadataLimits.maxKeyBytes)")
        }
        if config.readOnly { throw .EROFS }
        guard let v = String(validating: value, as: UTF8.self) else {
            throw refused(name, .EINVAL, "the value is not UTF-8 text (object metadata holds strings)")
        }
        if v.utf8.count > CustomMetadataLimits.maxValueBytes {
            throw refused(name, .E2BIG, "the value is \(v.utf8.count) bytes; Cloud Storage allows \(CustomMetadataLimits.maxValueBytes)")
        }
        if case .writable(.contentType) = x {
            // A type given is never replaced by one inferred from a name (docs/SEMANTICS.md §4.1).
            let n = try node(ino)
            superblock.setInferredType(n, nil)
        }
        try await changeMetadata(ino: ino, op: "setxattr \(name)") { (m: inout WritableMetadata) throws(Errno) in
            let existing: String?
            switch x {
            case .custom(let k): existing = m.customMetadata[k]
            case .writable(let p): existing = p.get(m)
            default: existing = nil
            }
            if XattrFlags(rawValue: flags).contains(.create), existing != nil { throw .EEXIST }
            if XattrFlags(rawValue: flags).contains(.replace), existing == nil { throw .ENODATA }
            switch x {
            case .custom(let k): m.customMetadata[k] = v
            case .writable(let p): p.set(&m, v)
            default: break
            }
        }
    }

    public func removexattr(ino: UInt64, name: String) async throws(Errno) {
        let x = XattrName(name)
        if let e = x.refusal(change: true) { throw e }
        if config.readOnly { throw .EROFS }
        if case .writable(.contentType) = x {
            // A type given is never replaced by one inferred from a name (docs/SEMANTICS.md §4.1).
            let n = try node(ino)
            superblock.setInferredType(n, nil)
        }
        try await changeMetadata(ino: ino, op: "removexattr \(name)") { (m: inout WritableMetadata) throws(Errno) in
            switch x {
            case .custom(let k):
                guard m.customMetadata.removeValue(forKey: k) != nil else { throw .ENODATA }
            case .writable(let p):
                guard p.get(m) != nil else { throw .ENODATA }
                p.set(&m, nil)
            default: break
            }
        }
    }

    /// Pending content (new or modified): a metadata change rides along with its upload, with no
    /// request of its own; true when it did. A file that is merely open for writing gets a PATCH
    /// like any other (and its stage follows it). No I/O but the stage's sidecar.
    func rideAlong(_ n: Node, _ edit: (inout WritableMetadata) throws(Errno) -> Void) throws(Errno) -> Bool {
        let rode = try superblock.withStage(of: n) { (s, file) throws(Errno) -> (StagedFile, sidecar: SidecarTarget?)? in
            guard s.state.unsaved || s.createdHere else { return nil }
            var m = s.metadata
            try edit(&m)
            try checkTotal(m)
            return (file.stage, s.rodeAlong(m) ? s.sidecarTarget(object: file.path) : nil)
        }
        guard let (s, sidecar) = rode ?? nil else { return false }
        if let sidecar { staging.recordIfNeeded(s, content: false, sidecar) }
        return true
    }

    /// Applies a metadata change: into a staged file's pending upload (no request), or as exactly
    /// one PATCH with `ifMetagenerationMatch` of the cached metageneration (on 412: re-read,
    /// re-apply, retry). A prefix-only directory gets its placeholder created.
    func changeMetadata(ino: UInt64, op: String,
                        _ edit: (inout WritableMetadata) throws(Errno) -> Void) async throws(Errno) {
        let n = try node(ino)
        if hasNoObject(ino) {
            // A whole bucket's root: its times and mode are the mount options'; a change of them
            // is accepted and kept nowhere (`touch` or `rsync -a` of the mount point succeeds);
            // an xattr cannot be kept, so setting one is refused.
            if op.hasPrefix("setxattr") || op.hasPrefix("removexattr") { throw .ENOTSUP }
            return
        }
        if try rideAlong(n, edit) { return }
        var box = try await refreshed(n)
        var attempt = 0
        while true {
            attempt += 1
            let info = superblock.infoAndPath(n, fallback: box?.info).info
            let objectName = superblock.objectName(of: n)
            guard let info else {
                guard n.type == .directory else { throw .ENOENT }
                // A prefix-only directory: create its placeholder carrying the attribute.
                var m = WritableMetadata()
                try edit(&m)
                try checkTotal(m)
                do {
                    let created = try await store.write(objectName, from: .data(Data()), metadata: m, preconditions: .doesNotExist)
                    superblock.setInfo(n, created)
                    return
                } catch StorageError.preconditionFailed where attempt < RetryBudget.placeholderCreateAttempts {
                    box = try await reloadPlaceholder(n)
                    continue
                } catch {
                    throw fail(error, op, objectName)
                }
            }
            var m = info.writable
            try edit(&m)
            try checkTotal(m)
            var patch = customMetadataPatch(from: info.customMetadata, to: m.customMetadata)
            if m.customMetadata == info.customMetadata { patch.customMetadata = [:] }
            for p in XattrName.WritableProperty.allCases where p.get(m) != p.get(info.writable) {
                p.change(&patch, p.get(m))
            }
            if patch.isEmpty { return }
            do {
                let updated = try await store.patchMetadata(objectName, patch,
                                                            preconditions: Preconditions(ifMetagenerationMatch: info.metageneration))
                superblock.setInfo(n, updated)
                superblock.withStage(of: n) { s, _ in s.patched(updated.writable) }
                return
            } catch StorageError.preconditionFailed where attempt < RetryBudget.metadataPatchAttempts {
                // Changed elsewhere: re-read and apply our edit to what is there now.
                if n.type == .directory { box = try await reloadPlaceholder(n) } else { box = try await refreshed(n, force: true) }
                continue
            } catch {
                throw fail(error, op, objectName)
            }
        }
    }

    /// Reads a directory's placeholder again (nil: it has none). Returns what it read.
    @discardableResult
    func reloadPlaceholder(_ n: Node) async throws(Errno) -> InfoBox? {
        if hasNoObject(n.ino) { return nil }
        let name = superblock.objectName(of: n)
        do {
            let info = try await store.getMetadata(name)
            return superblock.setInfo(n, info)
        } catch StorageError.objectNotFound {
            superblock.setInfo(n, nil)
            return nil
        } catch StorageError.unauthorized(_, let message) {
            // Security Rules may let a user list a directory but not read its placeholder (or
            // an object of that name): the directory shows the mount options, as one without
            // a placeholder does, instead of hiding what the listing shows.
            logger.debug("stat \(name): the placeholder may not be read (\(message)); showing the mount options")
            superblock.setInfo(n, nil)
            return nil
        } catch {
            throw fail(error, "stat", name)
        }
    }

    func checkTotal(_ m: WritableMetadata) throws(Errno) {
        let total = CustomMetadataLimits.totalBytes(m.customMetadata)
        if total > CustomMetadataLimits.maxTotalBytes {
            throw refused("user.*", .ENOSPC, "all custom metadata would be \(total) bytes; Cloud Storage allows \(CustomMetadataLimits.maxTotalBytes)")
        }
    }

    /// An input check's refusal, logged with what was refused and why (docs/SEMANTICS.md §5).
    func refused(_ what: String, _ e: Errno, _ why: String) -> Errno {
        logger.warning("setxattr '\(what.prefix(200))' refused: \(why) → \(e)")
        return e
    }

    /// The root of a mount of a whole bucket: no object holds it (`MountConfig.rootIsPrefix`).
    /// The bucket's root, or a directory of a hierarchical bucket (a folder keeps no metadata and
    /// has no placeholder object).
    func hasNoObject(_ ino: UInt64) -> Bool {
        if ino == Superblock.rootIno, !config.rootIsPrefix { return true }
        return store.folders != nil && (try? node(ino))?.type == .directory
    }
}

extension XattrName {
    /// What this name answers without looking at any object, for a read (getxattr) or a change
    /// (setxattr, removexattr); nil: the object decides. The one place for the namespaces:
    /// `trusted.*` and `security.capability` are answered locally (nothing to read, nothing may
    /// be set: the kernel asks for `security.capability` on every write), `system.*`, the rest
    /// of `security.*` and other namespaces are not supported, hidden keys read as absent and are refused, `user.` alone is no name,
    /// and the object's read-only properties can be read, not changed.
    func refusal(change: Bool) -> Errno? {
        switch self {
        case .custom, .writable: return nil
        case .readOnly: return change ? .EPERM : nil
        case .hidden: return change ? .EPERM : .ENODATA
        case .emptyKey: return change ? .EINVAL : .ENODATA
        case .local: return change ? .ENOTSUP : .ENODATA
        case .unsupported: return .ENOTSUP
        }
    }
}
