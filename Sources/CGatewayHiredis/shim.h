// hiredis (Debian libhiredis-dev), found through pkg-config. Only the tests import it: hiredis'
// reply reader is the oracle GatewayRedis' own RESP reader is checked against.
#ifndef CGATEWAY_HIREDIS_SHIM_H
#define CGATEWAY_HIREDIS_SHIM_H
#include <hiredis/hiredis.h>
#endif
