#include "tls_baseline.h"
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const char *tls12 = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
                           "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

static SSL_CTX *make_ctx(int server, const char *cert, const char *key, const char *ca) {
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx) return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_cipher_list(ctx, tls12);
    SSL_CTX_set1_groups_list(ctx, "X25519:P-256:P-384");
    if (server) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"bench", 5);
        if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 || SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
            SSL_CTX_free(ctx);
            return NULL;
        }
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
            SSL_CTX_free(ctx);
            return NULL;
        }
        static const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
        SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn);
    }
    return ctx;
}

typedef struct {
    SSL *ssl;
    BIO *in, *out;
} end_t;

static void end_open(end_t *e, SSL_CTX *ctx, int server) {
    e->ssl = SSL_new(ctx);
    e->in = BIO_new(BIO_s_mem());
    e->out = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(e->in, -1);
    BIO_set_mem_eof_return(e->out, -1);
    SSL_set_bio(e->ssl, e->in, e->out);
    if (server) SSL_set_accept_state(e->ssl); else SSL_set_connect_state(e->ssl);
}

static int move(end_t *from, end_t *to) {
    static char buf[64 * 1024];
    int n, moved = 0;
    while ((n = BIO_read(from->out, buf, sizeof buf)) > 0) {
        BIO_write(to->in, buf, n);
        moved += n;
    }
    return moved;
}

/* Drives both ends like the Swift pump: client out → server, server reads, server out → client, client reads. */
static int handshake(end_t *c, end_t *s) {
    char b[1];
    SSL_do_handshake(c->ssl);
    for (int i = 0; i < 64; i++) {
        int a = move(c, s);
        if (!SSL_is_init_finished(s->ssl)) SSL_do_handshake(s->ssl); else SSL_read(s->ssl, b, 0);
        int z = move(s, c);
        if (!SSL_is_init_finished(c->ssl)) SSL_do_handshake(c->ssl); else SSL_read(c->ssl, b, 1);
        if (a == 0 && z == 0 && BIO_ctrl_pending(c->out) == 0 && BIO_ctrl_pending(s->out) == 0) break;
    }
    ERR_clear_error();
    return SSL_is_init_finished(c->ssl) && SSL_is_init_finished(s->ssl);
}

static void end_close(end_t *e) {
    SSL_set_shutdown(e->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(e->ssl);
}

double tls_baseline_handshakes(const char *cert, const char *key, const char *ca, int resume, double seconds) {
    SSL_CTX *sctx = make_ctx(1, cert, key, ca), *cctx = make_ctx(0, cert, key, ca);
    if (!sctx || !cctx) return -1;
    SSL_SESSION *ticket = NULL;
    long count = 0;
    double start = now(), end = start + seconds;
    while (now() < end) {
        end_t c, s;
        end_open(&c, cctx, 0);
        end_open(&s, sctx, 1);
        SSL_set_tlsext_host_name(c.ssl, "gateway.test");
        SSL_set1_host(c.ssl, "gateway.test");
        if (resume && ticket) SSL_set_session(c.ssl, ticket);
        if (!handshake(&c, &s)) return -1;
        if (resume) {
            if (ticket && !SSL_session_reused(c.ssl)) return -1;
            SSL_SESSION_free(ticket);
            ticket = SSL_get1_session(c.ssl);
        }
        end_close(&c);
        end_close(&s);
        count++;
    }
    double rate = (double)count / (now() - start);
    SSL_SESSION_free(ticket);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    return rate;
}

double tls_baseline_bulk(const char *cert, const char *key, const char *ca, int total_mib) {
    SSL_CTX *sctx = make_ctx(1, cert, key, ca), *cctx = make_ctx(0, cert, key, ca);
    if (!sctx || !cctx) return -1;
    end_t c, s;
    end_open(&c, cctx, 0);
    end_open(&s, sctx, 1);
    SSL_set_tlsext_host_name(c.ssl, "gateway.test");
    SSL_set1_host(c.ssl, "gateway.test");
    if (!handshake(&c, &s)) return -1;
    static char chunk[16 * 1024], sink[16 * 1024];
    memset(chunk, 0x5a, sizeof chunk);
    long long total = (long long)total_mib << 20, received = 0;
    double start = now();
    while (received < total) {
        size_t n;
        if (SSL_write_ex(s.ssl, chunk, sizeof chunk, &n) != 1) return -1;
        move(&s, &c);
        while (SSL_read_ex(c.ssl, sink, sizeof sink, &n) == 1) received += (long long)n;
    }
    double rate = (double)total / (1 << 20) / (now() - start);
    end_close(&c);
    end_close(&s);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    return rate;
}
