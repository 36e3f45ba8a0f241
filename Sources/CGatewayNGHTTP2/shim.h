#ifndef CGATEWAY_NGHTTP2_SHIM_H
#define CGATEWAY_NGHTTP2_SHIM_H
/* Only GatewayHTTP's HTTP/2 session wrapper imports this module (arrives with the TLS/HTTP2 issue). */
#include <nghttp2/nghttp2.h>
#endif
