// What this product's API exposes comes with it: an app's tests that use `SimulatedAppAttestService`
// name a `TestCA` (its root goes into the gateway's `trust.extra_roots`), an `AttestEnvironment` and
// an `AppID`, and need no other product than `AppAttestClient` and `AppAttestClientSimulator`
// (docs/client-library.md, "Testing on Linux"; `ProductSurfaceTests` imports only these two).
@_exported import AppAttestSimulator

@_exported import struct AppAttest.AppID
@_exported import enum AppAttest.AttestEnvironment
