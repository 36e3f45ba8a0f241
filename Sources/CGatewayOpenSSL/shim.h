#ifndef CGATEWAY_OPENSSL_SHIM_H
#define CGATEWAY_OPENSSL_SHIM_H
/* Only GatewayCrypto imports this module. Macros that Swift cannot import become static inline functions. */
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/cms.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/params.h>
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

/* TLS (TLSServerContext, TLSClientContext, TLSSession). */
static inline int cgw_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int v) { return (int)SSL_CTX_set_min_proto_version(ctx, v); }
static inline int cgw_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int v) { return (int)SSL_CTX_set_max_proto_version(ctx, v); }
static inline int cgw_SSL_CTX_set1_groups_list(SSL_CTX *ctx, const char *list) { return (int)SSL_CTX_set1_groups_list(ctx, list); }
static inline int cgw_SSL_CTX_add0_chain_cert(SSL_CTX *ctx, X509 *x) { return (int)SSL_CTX_add0_chain_cert(ctx, x); }
static inline void cgw_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) { (void)SSL_CTX_set_session_cache_mode(ctx, mode); }
static inline long cgw_SSL_SESS_CACHE_OFF(void) { return SSL_SESS_CACHE_OFF; }
static inline long cgw_SSL_SESS_CACHE_CLIENT(void) { return SSL_SESS_CACHE_CLIENT; }
static inline void cgw_SSL_CTX_set_mode_partial_write(SSL_CTX *ctx) {
    (void)SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
}
/* No compression, no renegotiation, the server's cipher order (ChaCha20 first for clients that prefer it). */
static inline uint64_t cgw_server_options(void) {
    return SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA;
}
static inline uint64_t cgw_client_options(void) { return SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION; }
static inline int cgw_SSL_CTX_set_app_data(SSL_CTX *ctx, void *arg) { return SSL_CTX_set_app_data(ctx, arg); }
static inline void *cgw_SSL_CTX_get_app_data(const SSL_CTX *ctx) { return SSL_CTX_get_app_data(ctx); }
static inline void cgw_SSL_CTX_set_servername_callback(SSL_CTX *ctx, int (*cb)(SSL *, int *, void *), void *arg) {
    (void)SSL_CTX_set_tlsext_servername_callback(ctx, cb);
    (void)SSL_CTX_set_tlsext_servername_arg(ctx, arg);
}
static inline int cgw_SSL_set_tlsext_host_name(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }
static inline int cgw_TLSEXT_NAMETYPE_host_name(void) { return TLSEXT_NAMETYPE_host_name; }
static inline void cgw_BIO_set_mem_eof_return(BIO *b, int v) { (void)BIO_set_mem_eof_return(b, v); }
static inline void cgw_BIO_set_no_close(BIO *b) { (void)BIO_set_close(b, BIO_NOCLOSE); }
/* Ticket protection for the ticket key callback: HMAC-SHA256 with the given key. */
static inline int cgw_ticket_hmac_init(EVP_MAC_CTX *hctx, const unsigned char *key, size_t keylen) {
    OSSL_PARAM params[3];
    params[0] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, (void *)key, keylen);
    params[1] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
    params[2] = OSSL_PARAM_construct_end();
    return EVP_MAC_CTX_set_params(hctx, params);
}
static inline int cgw_ERR_GET_REASON(unsigned long e) { return ERR_GET_REASON(e); }
static inline int cgw_ERR_GET_LIB(unsigned long e) { return ERR_GET_LIB(e); }
static inline int cgw_SSL_AD_REASON_OFFSET(void) { return SSL_AD_REASON_OFFSET; }
static inline STACK_OF(X509_NAME) *cgw_sk_X509_NAME_new_null(void) { return sk_X509_NAME_new_null(); }
static inline int cgw_sk_X509_NAME_push(STACK_OF(X509_NAME) *sk, X509_NAME *n) { return sk_X509_NAME_push(sk, n); }
static inline void cgw_sk_X509_NAME_pop_free(STACK_OF(X509_NAME) *sk) { sk_X509_NAME_pop_free(sk, X509_NAME_free); }
/* Allocated bytes of a memory BIO's buffer (it grows with the largest burst and never shrinks). */
static inline size_t cgw_BIO_mem_capacity(BIO *b) {
    BUF_MEM *m = NULL;
    (void)BIO_get_mem_ptr(b, &m);
    return m == NULL ? 0 : m->max;
}
/* CMS SignedData (App Attest receipts: CMSSignedData). */
static inline int cgw_sk_X509_num(const STACK_OF(X509) *sk) { return sk_X509_num(sk); }
static inline X509 *cgw_sk_X509_value(const STACK_OF(X509) *sk, int i) { return sk_X509_value(sk, i); }
static inline void cgw_sk_X509_pop_free(STACK_OF(X509) *sk) { sk_X509_pop_free(sk, X509_free); }
static inline int cgw_sk_CMS_SignerInfo_num(STACK_OF(CMS_SignerInfo) *sk) { return sk_CMS_SignerInfo_num(sk); }
/* The P-256 domain parameters as a key without a point: made once, then only read (copying its
   parameters into a new key reads it; OpenSSL's EC key manager shares the curve's precomputed
   table by reference count). NULL if OpenSSL cannot make it. */
static inline EVP_PKEY *cgw_p256_parameters(void) {
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (ctx == NULL) return NULL;
    char group[] = "prime256v1";
    OSSL_PARAM params[2];
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, group, 0);
    params[1] = OSSL_PARAM_construct_end();
    EVP_PKEY *key = NULL;
    if (EVP_PKEY_fromdata_init(ctx) != 1 || EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_KEY_PARAMETERS, params) != 1) key = NULL;
    EVP_PKEY_CTX_free(ctx);
    return key;
}

/* A P-256 public key from its X9.62 point (the caller checked 65 bytes, 0x04 first): a copy of
   `parameters` (cgw_p256_parameters) given the point, which OpenSSL checks is on the curve
   (EC_POINT_oct2point -> EC_POINT_set_affine_coordinates). Paid on every key a loop's cache has
   not seen yet: ~3.9 us here, against ~13.7 us for an import by group name (EVP_PKEY_fromdata
   builds the curve's group anew for every key) and ~88 us for d2i_PUBKEY of the same key as a
   SubjectPublicKeyInfo (the generic decoder chain), OpenSSL 3.0. NULL when the point is refused. */
static inline EVP_PKEY *cgw_p256_public_key(const EVP_PKEY *parameters, const unsigned char *point, size_t length) {
    EVP_PKEY *key = EVP_PKEY_new();
    if (key == NULL) return NULL;
    if (EVP_PKEY_copy_parameters(key, parameters) != 1 || EVP_PKEY_set1_encoded_public_key(key, point, length) != 1) {
        EVP_PKEY_free(key);
        return NULL;
    }
    return key;
}

#endif
