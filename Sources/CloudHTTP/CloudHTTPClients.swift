import AsyncHTTPClient
import Foundation

/// The HTTP clients of one store, made from its settings in one place for both stores: one for
/// the API's calls; one for object data when the settings split it off (`--http-version auto`
/// over https: HTTP/1.1 for data, HTTP/2 for the rest); one for streamed uploads, without the
/// read timeout (`ClientSettings.uploadConfiguration`: the upload's watchdog bounds them).
/// They are shut down once, by `shutdown()` or when the last user lets them go.
package final class CloudHTTPClients: Sendable {
    package let settings: ClientSettings
    /// Listings, metadata, small writes; object data too unless `media` takes it.
    package let client: HTTPClient
    /// Object data (downloads), when the settings give it a client of its own.
    package let media: HTTPClient?
    /// Streamed uploads.
    package let upload: HTTPClient
    private let closed = OnceFlag()

    /// `https`: whether the endpoint is https (only then is object data split off, and the
    /// clients share `ClientSettings.httpsEventLoopGroup`).
    package init(settings: ClientSettings, https: Bool, idleTimeout: Duration, maxConnections: Int, receiveBuffer: Int) {
        self.settings = settings
        let group = ClientSettings.eventLoopGroup(https: https)
        client = HTTPClient(eventLoopGroup: group,
                            configuration: settings.configuration(idleTimeout: idleTimeout, maxConnections: maxConnections,
                                                                  receiveBuffer: receiveBuffer))
        media = settings.splitsMedia && https
            ? HTTPClient(eventLoopGroup: ClientSettings.httpsEventLoopGroup,
                         configuration: settings.mediaConfiguration(idleTimeout: idleTimeout, maxConnections: maxConnections,
                                                                    receiveBuffer: receiveBuffer))
            : nil
        upload = HTTPClient(eventLoopGroup: group,
                            configuration: settings.uploadConfiguration(media: media != nil, idleTimeout: idleTimeout,
                                                                        maxConnections: maxConnections, receiveBuffer: receiveBuffer))
    }

    /// Closes the connection pools, after the last request. Later calls do nothing.
    package func shutdown() async throws {
        guard closed.set() else { return }
        try await client.shutdown()
        try await media?.shutdown()
        try await upload.shutdown()
    }

    deinit {
        // Clients dropped without `shutdown()` still release their connections (and never trip
        // the HTTP client's debug check).
        if closed.set() { client.shutdown { _ in }; media?.shutdown { _ in }; upload.shutdown { _ in } }
    }
}
