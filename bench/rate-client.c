/* rate-client: an open-loop HTTP/1.1 load generator for bench/latency-at-rate (plain C, epoll).
 *
 *   rate-client --port P --rate R --duration D [--warmup W] [--conns K] [--expect 200]
 *               (--request FILE | --presigned FILE) [--host 127.0.0.1] [--drain S]
 *
 * Request i is scheduled at t0 + i/R, over K keep-alive connections to HOST:P, at most one request
 * outstanding per connection (no pipelining). Its latency runs from its SCHEDULED time to the end of
 * its response: a request whose time has come while its connection is busy waits, and that wait is
 * counted (no coordinated omission). "late" counts requests sent more than 1 ms after their time.
 *
 *   --request FILE    one raw HTTP/1.1 request (sent as is, again and again); any free connection
 *                     takes the oldest due request (one queue for all connections).
 *   --presigned FILE  the file `attest-sim presign` writes (one request a line, tab-separated:
 *                     method, target, key id, challenge or "-", assertion, body), built into requests
 *                     as bench/presigned-client.py does. Line i goes to connection i % K (with a number
 *                     of keys divisible by K each key stays on one connection, in order): one queue
 *                     per connection. The run ends early when the file does.
 *   --rate 0          closed loop instead (each connection sends its next request when the previous
 *                     answer is in; latency from the send): to find the maximum rate.
 *
 * Requests scheduled in the first W seconds are sent but left out of the numbers (closed loop:
 * responses in the first W seconds). After the schedule ends the client waits up to --drain seconds
 * (default 30) for the answers still due. Responses: status line, Content-Length or chunked.
 *
 * Output: one line of key=value (latencies in ms) on stdout, statuses on stderr. Exits 1 when a
 * response has another status than --expect (default 200), a connection breaks or closes, the
 * drain times out, or nothing was measured; 2 on usage errors. Free connections are taken in turn
 * (FIFO), so that none stays without a first request for long (gatewayd closes a connection whose
 * first request head has not come within limits.header_timeout, 10 s, of the accept).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct { char *data; size_t len; } req_t;

typedef struct {
  int fd;
  int busy;              /* a request is outstanding */
  uint64_t idx;          /* index of the outstanding request */
  uint64_t sched_ns;     /* its scheduled time (closed loop: its send time) */
  const req_t *req;
  size_t sent;           /* bytes of req written (== req->len: all written) */
  char *buf; size_t blen, bcap;
  uint64_t next;         /* presigned: next request index for this connection */
} conn_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *m) { fprintf(stderr, "rate-client: %s\n", m); exit(2); }

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  size_t cap = 1 << 20, n = 0;
  char *b = malloc(cap);
  for (;;) {
    if (n == cap) { cap *= 2; b = realloc(b, cap); }
    size_t r = fread(b + n, 1, cap - n, f);
    if (r == 0) break;
    n += r;
  }
  fclose(f);
  *len = n;
  return b;
}

/* One presigned line -> a raw request, as bench/presigned-client.py builds it. */
static req_t build_presigned(char *line, const char *host) {
  char *f[6];
  int k = 0;
  f[k++] = line;
  for (char *p = line; *p && k < 6; p++)
    if (*p == '\t') { *p = 0; f[k++] = p + 1; }
  if (k < 6) die("a presigned line has fewer than 6 tab-separated fields");
  const char *method = f[0], *target = f[1], *key = f[2], *chal = f[3], *assertion = f[4], *body = f[5];
  size_t blen = strlen(body);
  int has_len = blen > 0 || !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH");
  size_t cap = strlen(method) + strlen(target) + strlen(host) + strlen(key) + strlen(chal) + strlen(assertion) + blen + 256;
  req_t r;
  r.data = malloc(cap);
  int n = snprintf(r.data, cap, "%s %s HTTP/1.1\r\nHost: %s\r\nX-App-Attest-Key-Id: %s\r\nX-App-Assertion: %s\r\n",
                   method, target, host, key, assertion);
  if (strcmp(chal, "-")) n += snprintf(r.data + n, cap - n, "X-App-Attest-Challenge: %s\r\n", chal);
  if (has_len) n += snprintf(r.data + n, cap - n, "Content-Length: %zu\r\nContent-Type: application/octet-stream\r\n", blen);
  n += snprintf(r.data + n, cap - n, "\r\n");
  memcpy(r.data + n, body, blen);
  r.len = (size_t)n + blen;
  return r;
}

/* Parses one complete response at b[0..len): returns its length (0 if incomplete, -1 if malformed)
 * and its status. */
static long parse_response(const char *b, size_t len, int *status) {
  const char *end = memmem(b, len, "\r\n\r\n", 4);
  if (!end) return len > 65536 ? -1 : 0;
  size_t head = (size_t)(end - b) + 4;
  if (len < 12 || memcmp(b, "HTTP/1.", 7)) return -1;
  *status = atoi(b + 9);
  long clen = 0;
  int chunked = 0;
  const char *p = memchr(b, '\n', head) + 1;
  while (p < b + head - 2) {
    const char *eol = memchr(p, '\n', (size_t)(b + head - p));
    if (!eol) break;
    if (!strncasecmp(p, "content-length:", 15)) clen = atol(p + 15);
    else if (!strncasecmp(p, "transfer-encoding:", 18)) {
      for (const char *q = p + 18; q + 7 <= eol; q++)
        if (!strncasecmp(q, "chunked", 7)) chunked = 1;
    }
    p = eol + 1;
  }
  if (*status / 100 == 1 || *status == 204 || *status == 304) return (long)head;
  if (!chunked) return len >= head + (size_t)clen ? (long)(head + (size_t)clen) : 0;
  size_t pos = head;
  for (;;) {
    const char *eol = memmem(b + pos, len - pos, "\r\n", 2);
    if (!eol) return 0;
    long size = strtol(b + pos, NULL, 16);
    pos = (size_t)(eol - b) + 2;
    if (size == 0) {  /* trailers until an empty line */
      for (;;) {
        const char *e = memmem(b + pos, len - pos, "\r\n", 2);
        if (!e) return 0;
        size_t l = (size_t)(e - (b + pos));
        pos += l + 2;
        if (l == 0) return (long)pos;
      }
    }
    if (len < pos + (size_t)size + 2) return 0;
    pos += (size_t)size + 2;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p) {  /* nearest rank, ms */
  if (!n) return 0;
  size_t k = (size_t)(p / 100.0 * (double)n + 0.999999);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return (double)v[k - 1] / 1e6;
}

static int ep_fd;
static uint64_t late_all, late_measured, sent_count;

/* Hands request idx (scheduled at sched) to connection c and writes it (the rest on EPOLLOUT). */
static int start_send(conn_t *conns, int c, uint64_t idx, uint64_t sched, const req_t *req, int closed, uint64_t warm_idx) {
  conn_t *cn = &conns[c];
  cn->busy = 1; cn->idx = idx; cn->sched_ns = sched; cn->req = req; cn->sent = 0;
  uint64_t s = now_ns();
  if (closed) cn->sched_ns = s;
  else if (s > sched + 1000000) { late_all++; if (idx >= warm_idx) late_measured++; }
  sent_count++;
  ssize_t w = write(cn->fd, req->data, req->len);
  if (w < 0 && errno != EAGAIN) { perror("write"); return -1; }
  cn->sent = w < 0 ? 0 : (size_t)w;
  if (cn->sent < req->len) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = (uint32_t)c};
    epoll_ctl(ep_fd, EPOLL_CTL_MOD, cn->fd, &ev);
  }
  return 0;
}

int main(int argc, char **argv) {
  int port = 0, nconns = 64, expect = 200;
  double rate = -1, duration = 10, warmup = 0, drain = 30;
  const char *host = "127.0.0.1", *reqfile = NULL, *presfile = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) die("an option lacks its value (see the header of bench/rate-client.c)");
    const char *v = argv[++i];
    if (!strcmp(a, "--port")) port = atoi(v);
    else if (!strcmp(a, "--rate")) rate = atof(v);
    else if (!strcmp(a, "--duration")) duration = atof(v);
    else if (!strcmp(a, "--warmup")) warmup = atof(v);
    else if (!strcmp(a, "--conns")) nconns = atoi(v);
    else if (!strcmp(a, "--expect")) expect = atoi(v);
    else if (!strcmp(a, "--host")) host = v;
    else if (!strcmp(a, "--drain")) drain = atof(v);
    else if (!strcmp(a, "--request")) reqfile = v;
    else if (!strcmp(a, "--presigned")) presfile = v;
    else die("unknown option (see the header of bench/rate-client.c)");
  }
  if (!port || rate < 0 || nconns < 1 || duration <= 0 || (!reqfile == !presfile))
    die("needs --port, --rate, and one of --request / --presigned");
  int closed = rate == 0;
  char hostport[300];
  snprintf(hostport, sizeof hostport, "%s:%d", host, port);

  /* The requests. */
  req_t *reqs = NULL;
  uint64_t nreqs = 0;
  if (reqfile) {
    reqs = malloc(sizeof *reqs);
    reqs[0].data = read_file(reqfile, &reqs[0].len);
    if (!reqs[0].len) die("empty request file");
    nreqs = 1;
  } else {
    size_t len;
    char *all = read_file(presfile, &len);
    size_t cap = 1024;
    reqs = malloc(cap * sizeof *reqs);
    char *p = all, *end = all + len;
    while (p < end) {
      char *nl = memchr(p, '\n', (size_t)(end - p));
      if (!nl) nl = end;
      *nl = 0;
      if (nl > p) {
        if (nreqs == cap) { cap *= 2; reqs = realloc(reqs, cap * sizeof *reqs); }
        reqs[nreqs++] = build_presigned(p, hostport);
      }
      p = nl + 1;
    }
    if (!nreqs) die("empty presigned file");
  }

  /* Total scheduled requests (open loop). */
  uint64_t total = closed ? UINT64_MAX : (uint64_t)(rate * (warmup + duration) + 0.5);
  int truncated = 0;
  if (!closed && presfile && total > nreqs) { total = nreqs; truncated = 1; }
  double interval = closed ? 0 : 1e9 / rate;
  uint64_t warm_idx = closed ? 0 : (uint64_t)(rate * warmup + 0.5);

  /* Connections. */
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) die("--host must be a numeric IPv4 address");
  int ep = epoll_create1(0);
  ep_fd = ep;
  conn_t *conns = calloc((size_t)nconns, sizeof *conns);
  for (int c = 0; c < nconns; c++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { perror("connect"); return 1; }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    conns[c].fd = fd;
    conns[c].bcap = 65536;
    conns[c].buf = malloc(conns[c].bcap);
    conns[c].next = (uint64_t)c;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)c};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  struct epoll_event tev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);

  size_t lcap = closed ? 1 << 20 : (size_t)(total - warm_idx) + 16;
  uint64_t *lat = malloc(lcap * sizeof *lat);
  size_t nlat = 0;
  uint64_t completed = 0, measured_done = 0, non2xx = 0, unexpected = 0;
  uint64_t statuses[600] = {0};
  uint64_t head = 0;  /* request mode: next index to hand out (one queue for all) */
  /* Free connections, a FIFO ring: each connection is used in turn (a LIFO stack would leave some
   * idle at low rates, and a server may close a connection that sends no first request in time). */
  int *fring = malloc((size_t)nconns * sizeof *fring), fhead = 0, nfree = 0;
#define FPUSH(c) (fring[(fhead + nfree++) % nconns] = (c))
#define FPOP() (nfree--, fhead = (fhead + 1) % nconns, fring[(fhead + nconns - 1) % nconns])
  for (int c = 0; c < nconns; c++) FPUSH(c);
  int broken = 0;
  uint64_t armed = 0;  /* the timer's current deadline (0: none) */
  uint64_t last_done_ns = 0;

  uint64_t t0 = now_ns() + 1000000;  /* 1 ms from now */
  uint64_t t_warm = t0 + (uint64_t)(warmup * 1e9), t_end = t0 + (uint64_t)((warmup + duration) * 1e9);
  uint64_t deadline = t_end + (uint64_t)(drain * 1e9);
#define SCHED(i) (closed ? 0 : t0 + (uint64_t)((double)(i) * interval))

  for (;;) {
    uint64_t now = now_ns();
    /* Hand what is due to free connections. */
    uint64_t next_due = 0;
    if (closed) {
      for (int k = nfree; now < t_end && k > 0; k--) {
        int c = FPOP();
        uint64_t i = presfile ? conns[c].next : head;
        if (presfile && i >= nreqs) { FPUSH(c); truncated = 1; continue; }  /* this connection's lines are used up */
        if (presfile) conns[c].next = i + (uint64_t)nconns; else head++;
        if (start_send(conns, c, i, now, &reqs[presfile ? i : 0], 1, 0)) { broken = 1; goto done; }
      }
    } else if (reqfile) {
      while (nfree && head < total) {
        uint64_t t = SCHED(head);
        if (t > now) { next_due = t; break; }
        int c = FPOP();
        if (start_send(conns, c, head, t, &reqs[0], 0, warm_idx)) { broken = 1; goto done; }
        head++;
      }
    } else {
      for (int k = nfree; k > 0; k--) {
        int c = FPOP();
        uint64_t i = conns[c].next;
        if (i >= total) { FPUSH(c); continue; }
        uint64_t t = SCHED(i);
        if (t > now) { if (!next_due || t < next_due) next_due = t; FPUSH(c); continue; }
        conns[c].next = i + (uint64_t)nconns;
        if (start_send(conns, c, i, t, &reqs[i], 0, warm_idx)) { broken = 1; goto done; }
      }
    }
    /* Done? */
    int outstanding = nconns - nfree;
    int more = closed ? now < t_end && !(presfile && nfree == nconns && truncated) : (reqfile ? head < total : 0);
    if (!closed && presfile)
      for (int c = 0; c < nconns; c++) if (conns[c].next < total) { more = 1; break; }
    if (!more && !outstanding) break;
    if (now > deadline) { fprintf(stderr, "rate-client: drain timed out with %d outstanding\n", outstanding); broken = 1; break; }
    /* Arm the timer for the next due send. */
    if (next_due && next_due != armed) {
      struct itimerspec its = {0};
      its.it_value.tv_sec = (time_t)(next_due / 1000000000ull);
      its.it_value.tv_nsec = (long)(next_due % 1000000000ull);
      timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
      armed = next_due;
    }
    struct epoll_event evs[256];
    int wait_ms = 100;
    if (closed && now < t_end) { uint64_t left = (t_end - now) / 1000000 + 1; if (left < (uint64_t)wait_ms) wait_ms = (int)left; }
    int n = epoll_wait(ep, evs, 256, wait_ms);
    if (n < 0 && errno != EINTR) { perror("epoll_wait"); return 1; }
    for (int e = 0; e < n; e++) {
      uint32_t c = evs[e].data.u32;
      if (c == UINT32_MAX) { uint64_t x; (void)!read(tfd, &x, sizeof x); armed = 0; continue; }
      conn_t *cn = &conns[c];
      if ((evs[e].events & EPOLLOUT) && cn->busy && cn->sent < cn->req->len) {
        ssize_t w = write(cn->fd, cn->req->data + cn->sent, cn->req->len - cn->sent);
        if (w < 0 && errno != EAGAIN) { perror("write"); broken = 1; goto done; }
        if (w > 0) cn->sent += (size_t)w;
        if (cn->sent == cn->req->len) {
          struct epoll_event ev = {.events = EPOLLIN, .data.u32 = c};
          epoll_ctl(ep, EPOLL_CTL_MOD, cn->fd, &ev);
        }
      }
      if (!(evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      for (;;) {
        if (cn->blen == cn->bcap) { cn->bcap *= 2; cn->buf = realloc(cn->buf, cn->bcap); }
        ssize_t r = read(cn->fd, cn->buf + cn->blen, cn->bcap - cn->blen);
        if (r == 0) { fprintf(stderr, "rate-client: connection %u closed by the server\n", c); broken = 1; goto done; }
        if (r < 0) { if (errno == EAGAIN) break; perror("read"); broken = 1; goto done; }
        cn->blen += (size_t)r;
      }
      for (;;) {
        int status = 0;
        long used = parse_response(cn->buf, cn->blen, &status);
        if (used < 0) { fprintf(stderr, "rate-client: malformed response on connection %u\n", c); broken = 1; goto done; }
        if (used == 0) break;
        if (!cn->busy) { fprintf(stderr, "rate-client: unsolicited response on connection %u\n", c); broken = 1; goto done; }
        uint64_t t = now_ns();
        completed++;
        if (status >= 0 && status < 600) statuses[status]++;
        if (status / 100 != 2) non2xx++;
        if (status != expect && unexpected++ < 3)
          fprintf(stderr, "rate-client: unexpected status %d: %.*s\n", status, (int)(cn->blen < 300 ? cn->blen : 300), cn->buf);
        int measured = closed ? (t >= t_warm && t <= t_end) : cn->idx >= warm_idx;
        if (measured) {
          if (nlat == lcap) { lcap *= 2; lat = realloc(lat, lcap * sizeof *lat); }
          lat[nlat++] = t - cn->sched_ns;
          measured_done++;
          last_done_ns = t;
        }
        memmove(cn->buf, cn->buf + used, cn->blen - (size_t)used);
        cn->blen -= (size_t)used;
        cn->busy = 0;
        FPUSH((int)c);  /* closed loop: the top of the loop sends its next one at once */
      }
    }
  }
done:;
  double window_s;
  if (closed) {
    window_s = duration;
    if (truncated && last_done_ns > t_warm && (double)(last_done_ns - t_warm) / 1e9 < window_s) window_s = (double)(last_done_ns - t_warm) / 1e9;
  }
  else {
    uint64_t end = last_done_ns > t_warm ? last_done_ns : t_end;
    window_s = (double)(end - t_warm) / 1e9;
    double sched_s = (double)(total - warm_idx) / rate;  /* at least the schedule's own span */
    if (window_s < sched_s) window_s = sched_s;
  }
  qsort(lat, nlat, sizeof *lat, cmp_u64);
  printf("sent=%llu completed=%llu measured=%llu non2xx=%llu unexpected=%llu rate=%.0f achieved=%.0f "
         "p50=%.3f p90=%.3f p99=%.3f p999=%.3f max=%.3f late=%llu late_measured=%llu conns=%d truncated=%d broken=%d\n",
         (unsigned long long)sent_count, (unsigned long long)completed, (unsigned long long)measured_done,
         (unsigned long long)non2xx, (unsigned long long)unexpected, closed ? 0.0 : rate,
         window_s > 0 ? (double)measured_done / window_s : 0.0, pct(lat, nlat, 50), pct(lat, nlat, 90),
         pct(lat, nlat, 99), pct(lat, nlat, 99.9), nlat ? (double)lat[nlat - 1] / 1e6 : 0.0,
         (unsigned long long)late_all, (unsigned long long)late_measured, nconns, truncated, broken);
  fprintf(stderr, "rate-client: statuses:");
  for (int s = 0; s < 600; s++) if (statuses[s]) fprintf(stderr, " %d×%llu", s, (unsigned long long)statuses[s]);
  fprintf(stderr, "%s\n", truncated ? " (the presigned file ended before the schedule)" : "");
  if (!nlat) fprintf(stderr, "rate-client: no response in the measured period\n");
  return (broken || unexpected || !nlat) ? 1 : 0;
}
