#ifndef CGATEWAY_SYSTEM_H
#define CGATEWAY_SYSTEM_H
/* Linux system calls Swift's Glibc module does not expose (epoll, eventfd, accept4), and small
   wrappers for macros and errno. Imported only by GatewayIO. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* glibc declares accept4 only under _GNU_SOURCE, which would split Glibc's module types. */
extern int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);

static inline int cgw_errno(void) { return errno; }
static inline uint32_t cgw_EPOLLIN(void) { return EPOLLIN; }
static inline uint32_t cgw_EPOLLOUT(void) { return EPOLLOUT; }
static inline uint32_t cgw_EPOLLET(void) { return EPOLLET; }
static inline uint32_t cgw_EPOLLRDHUP(void) { return EPOLLRDHUP; }
static inline uint32_t cgw_EPOLLHUP(void) { return EPOLLHUP; }
static inline uint32_t cgw_EPOLLERR(void) { return EPOLLERR; }

/* epoll_event is packed on x86_64; these keep Swift away from its layout. */
static inline int cgw_epoll_add(int epfd, int fd, uint32_t events) {
    struct epoll_event ev; ev.events = events; ev.data.u64 = 0; ev.data.fd = fd;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}
static inline int cgw_epoll_mod(int epfd, int fd, uint32_t events) {
    struct epoll_event ev; ev.events = events; ev.data.u64 = 0; ev.data.fd = fd;
    return epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
}
static inline int cgw_epoll_del(int epfd, int fd) {
    struct epoll_event ev; ev.events = 0; ev.data.u64 = 0;
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &ev);
}
/* Waits without blocking; fills parallel arrays of fds and event masks. */
static inline int cgw_epoll_poll(int epfd, int *fds, uint32_t *masks, int max) {
    struct epoll_event evs[512];
    if (max > 512) max = 512;
    int n = epoll_wait(epfd, evs, max, 0);
    for (int i = 0; i < n; i++) { fds[i] = evs[i].data.fd; masks[i] = evs[i].events; }
    return n;
}
/* Waits up to timeout_ms for the first events (the loop awaiting a reply it expects shortly). */
static inline int cgw_epoll_wait_ms(int epfd, int *fds, uint32_t *masks, int max, int timeout_ms) {
    struct epoll_event evs[512];
    if (max > 512) max = 512;
    int n = epoll_wait(epfd, evs, max, timeout_ms);
    for (int i = 0; i < n; i++) { fds[i] = evs[i].data.fd; masks[i] = evs[i].events; }
    return n;
}
static inline int cgw_accept4(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
static inline int cgw_socket(int domain) {
    return socket(domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}
static inline int cgw_setsockopt_int(int fd, int level, int name, int value) {
    return setsockopt(fd, level, name, &value, sizeof(value));
}
static inline int cgw_getsockopt_error(int fd) {
    int err = 0; socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
}
static inline ssize_t cgw_send(int fd, const void *buf, size_t len) { return send(fd, buf, len, MSG_NOSIGNAL); }
/* Reads without consuming (a PROXY protocol header is looked at before it is taken). */
static inline ssize_t cgw_recv_peek(int fd, void *buf, size_t len) { return recv(fd, buf, len, MSG_PEEK); }
static inline ssize_t cgw_sendmsg_iov(int fd, const struct iovec *iov, int n) {
    struct msghdr m = {0}; m.msg_iov = (struct iovec *)iov; m.msg_iovlen = (size_t)n;
    return sendmsg(fd, &m, MSG_NOSIGNAL);
}
static inline void cgw_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }
#endif
