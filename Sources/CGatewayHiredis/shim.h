// hiredis (Debian libhiredis-dev), found through pkg-config. Only GatewayRedis imports it.
#ifndef CGATEWAY_HIREDIS_SHIM_H
#define CGATEWAY_HIREDIS_SHIM_H
#include <hiredis/hiredis.h>
#endif
