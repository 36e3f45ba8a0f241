// hiredis' reply reader (Debian libhiredis-dev): FuzzRESP's oracle, as CGatewayHiredis is the tests'.
#include <hiredis/hiredis.h>
