#ifndef CBENCH_OPENSSL_SHIM_H
#define CBENCH_OPENSSL_SHIM_H
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#endif
