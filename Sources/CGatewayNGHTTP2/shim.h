#ifndef CGATEWAY_NGHTTP2_SHIM_H
#define CGATEWAY_NGHTTP2_SHIM_H
/* Imported by GatewayHTTP's HTTP/2 server session (Sources/GatewayHTTP/HTTP2) and its tests only.
 * Debian 12's nghttp2 1.52 (with the CVE backports for max_continuations and the stream reset rate
 * limit) is what the session is written against: see docs/http2.md. */
#include <nghttp2/nghttp2.h>
#endif
