#ifndef TLS_BASELINE_H
#define TLS_BASELINE_H
/* The bench loops in C on raw OpenSSL with memory BIOs: the baseline TLSSession is compared with. */
/* Full (resume = 0) or resumed (resume = 1) TLS 1.3 handshakes per second for `seconds`; -1 on error. */
double tls_baseline_handshakes(const char *cert, const char *key, const char *ca, int resume, double seconds);
/* MiB per second moved server → client in 16 KiB writes (encrypt + decrypt), `total_mib` in all; -1 on error. */
double tls_baseline_bulk(const char *cert, const char *key, const char *ca, int total_mib);
#endif
