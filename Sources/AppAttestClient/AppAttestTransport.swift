import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// How the client sends HTTP requests: `URLSessionTransport` by default; tests substitute their own.
public protocol AppAttestTransport: Sendable {
    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse)
}

/// A `URLSession` data task per request (the completion-handler API, so that it runs on iOS 14),
/// cancelled with the calling task.
public struct URLSessionTransport: AppAttestTransport {
    public let session: URLSession

    public init(session: URLSession = .shared) {
        self.session = session
    }

    public func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let box = TaskBox()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<(Data, HTTPURLResponse), any Error>) in
                let task = session.dataTask(with: request) { data, response, error in
                    if let error {
                        continuation.resume(throwing: error)
                    } else if let http = response as? HTTPURLResponse {
                        continuation.resume(returning: (data ?? Data(), http))
                    } else {
                        continuation.resume(throwing: URLError(.badServerResponse))
                    }
                }
                box.start(task)
            }
        } onCancel: {
            box.cancel()
        }
    }
}

/// The data task of one send, so that cancellation (from any thread) reaches it.
private final class TaskBox: @unchecked Sendable {
    private let lock = NSLock()
    private var task: URLSessionDataTask?
    private var cancelled = false

    func start(_ t: URLSessionDataTask) {
        lock.lock()
        task = t
        let wasCancelled = cancelled
        lock.unlock()
        if wasCancelled { t.cancel() }
        t.resume()
    }

    func cancel() {
        lock.lock()
        cancelled = true
        let t = task
        lock.unlock()
        t?.cancel()
    }
}
