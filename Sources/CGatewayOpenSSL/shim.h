#ifndef CGATEWAY_OPENSSL_SHIM_H
#define CGATEWAY_OPENSSL_SHIM_H
/* Only GatewayCrypto imports this module. Macros that Swift cannot import become static inline functions. */
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <time.h>

static inline STACK_OF(X509) *cgw_sk_X509_new_null(void) { return sk_X509_new_null(); }
static inline int cgw_sk_X509_push(STACK_OF(X509) *sk, X509 *x) { return sk_X509_push(sk, x); }
static inline void cgw_sk_X509_free(STACK_OF(X509) *sk) { sk_X509_free(sk); }
static inline long cgw_BIO_get_mem_data(BIO *b, char **pp) { return BIO_get_mem_data(b, pp); }
static inline time_t cgw_timegm(struct tm *tm) { return timegm(tm); }
static inline unsigned long cgw_XN_FLAG_RFC2253(void) { return XN_FLAG_RFC2253; }
#endif
