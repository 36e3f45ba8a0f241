import AppAttest
import Dispatch
import Foundation
import GatewayConfig
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

extension AccessVerdict {
    /// A route verdict as the access line shows it: its `verdict` and `reason` labels.
    convenience init(_ v: RouteVerdict) {
        let recorded: Bool
        switch v.action {
        case .forwardUnverified, .forwardVerifiedRecorded: recorded = true
        case .forwardVerified, .refuse: recorded = false
        }
        self.init(verdict: v.verdict.rawValue, reason: v.reason, forwardedRecorded: recorded)
    }
}
