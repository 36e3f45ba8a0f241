import GatewayHTTP
import GatewayPolicy
import GatewayProxy

/// The request a signed verdict speaks of (`VerdictClaims`): its method and target, its id, and the
/// body as read and forwarded (nil: forwarded from its head, the body not read).
struct VerdictRequest {
    var method: String
    var target: String
    var requestID: String
    var body: [UInt8]?

    init(method: String, target: String, requestID: String, body: [UInt8]?) {
        self.method = method
        self.target = target
        self.requestID = requestID
        self.body = body
    }

    init(_ request: BufferedRequest) {
        self.init(method: request.head.method, target: request.head.target, requestID: request.requestID.text, body: request.body)
    }
}

/// A route verdict carried out: the request answered, or forwarded with these edits.
enum CarriedVerdict {
    case respond(LocalResponse)
    case forward(
        editHeaders: HeaderEdit, responseHeaders: HTTPFields, responseHook: ResponseHook?, verdict: AccessVerdict,
        accountTap: AccountFieldTap? = nil)
}

/// How a verified request goes on: its head's edit (the gateway's own headers stripped, the verified
/// key id or `X-Device-Check` added), the fields added to its response (the next challenge), and a
/// route's look at the response head.
struct VerifiedPass {
    var editHeaders: HeaderEdit
    var responseHeaders = HTTPFields()
    var responseHook: ResponseHook?
    /// Keys per account: the upstream's `X-App-Attest-Account` read for the verified key.
    var accountTap: AccountFieldTap?
}

extension GatewayRouter {
    /// The one carry-out of a protected route's verdict, for App Attest and the DeviceCheck
    /// fallback alike (`RouteVerdict` decides; this does): the verdict metric; then, as its action
    /// says, the refusal answered (JSON, recorded for `/explain`), or the request forwarded —
    /// verified with `pass`, or unverified with the gateway's headers stripped and `unverifiedHook`
    /// — after the refusal it stands for (`refusal`) is recorded for `/explain` with the status a
    /// refusal sends and logged as `<kind> <verdict>` with `logFields`.
    /// - Parameters:
    ///   - refusal: why the request is refused or recorded; nil only for an accepted verdict.
    ///   - summary, logFields: what the refusal records and logs; needed only when the verdict
    ///     records one (`RouteVerdict.recordsRefusal`): the caller builds them only then, so that an
    ///     accepted request (the hot path) builds none of it.
    ///   - kind: `assertion` or `fallback`, the log line's first word.
    func carryOut(
        _ verdict: RouteVerdict, refusal: Explanation?, route r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime,
        about summary: RequestSummary?, kind: String, logFields: [(String, String)] = [], pass: @autoclosure () -> VerifiedPass,
        unverifiedHook: ResponseHook? = nil, verdictRequest: @autoclosure () -> VerdictRequest? = nil,
        subject: @autoclosure () -> VerdictSubject = .none
    ) -> CarriedVerdict {
        recordVerdict(verdict, route: r)
        let logged = AccessVerdict(verdict)
        let recordedStatus: Int?
        switch verdict.action {
        case .refuse:
            guard let e = refusal else { preconditionFailure("a refusal without its explanation") }
            guard let summary else { preconditionFailure("a refusal without its request's summary") }
            var answer = self.refusal(e, route: r.name, mode: verdict.mode.rawValue, about: summary, surface: .route)
            answer.verdict = logged
            return .respond(answer)
        case .forwardVerified:
            recordedStatus = nil
        case .forwardUnverified(let status), .forwardVerifiedRecorded(let status):
            recordedStatus = status
        }
        if let status = recordedStatus, let e = refusal, let summary {
            let id = attest.explain.record(
                e, id: summary.requestID, refusalStatus: status, route: r.name, mode: verdict.mode.rawValue, verdict: verdict.verdict,
                method: summary.method, target: summary.target, peer: summary.peer)
            GatewayEvents.log(
                "info", "\(kind) \(verdict.verdict.rawValue)",
                [("route", r.name), ("mode", verdict.mode.rawValue), ("reason", verdict.reason)] + logFields + [("request_id", id)])
        }
        // The route's signed verdict (`assertion.verdict_header`): nothing is built on other routes.
        func signed(_ edit: HeaderEdit, _ who: @autoclosure () -> VerdictSubject) -> HeaderEdit {
            guard r.verdictHeader, let q = verdictRequest() else { return edit }
            return addingVerdict(
                edit, verdict, subject: who(), method: q.method, target: q.target, requestID: q.requestID, body: q.body, route: r,
                runtime: rt)
        }
        if case .forwardUnverified = verdict.action {
            return .forward(
                editHeaders: signed(rt.stripAttestHeaders, .none), responseHeaders: HTTPFields(), responseHook: unverifiedHook,
                verdict: logged)
        }
        let p = pass()
        return .forward(
            editHeaders: signed(p.editHeaders, subject()), responseHeaders: p.responseHeaders, responseHook: p.responseHook,
            verdict: logged, accountTap: p.accountTap)
    }

    /// A verdict carried out from the head (before any of the body is read).
    func decision(_ carried: CarriedVerdict, route r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime) -> RouteDecision {
        switch carried {
        case .respond(let answer):
            return .respond(routeName: r.name, answer)
        case .forward(let edit, let fields, let hook, let verdict, let tap):
            return forward(
                r, runtime: rt, editHeaders: edit, responseHeaders: fields, responseHook: hook, verdict: verdict, accountTap: tap)
        }
    }

    /// A verdict carried out once the body was read.
    func outcome(_ carried: CarriedVerdict, request: BufferedRequest, route r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime)
        -> BufferedOutcome
    {
        switch carried {
        case .respond(let answer):
            return .respond(answer)
        case .forward(let edit, let fields, let hook, let verdict, let tap):
            return forward(
                request, r, runtime: rt, editHeaders: edit, responseHeaders: fields, responseHook: hook, verdict: verdict,
                accountTap: tap)
        }
    }
}
