// epoll through plain functions: glibc's struct epoll_event is packed, so Swift does not touch it.
#define _GNU_SOURCE 1
#include <sys/epoll.h>
#include <sys/socket.h>

static inline int eb_epoll_add(int ep, int fd, unsigned events) {
    struct epoll_event e;
    e.events = events;
    e.data.fd = fd;
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
}

/// Non-blocking poll (timeout 0): ready descriptors and their event masks.
static inline int eb_epoll_poll(int ep, int *fds, unsigned *masks, int max) {
    struct epoll_event evs[512];
    int n = epoll_wait(ep, evs, max > 512 ? 512 : max, 0);
    for (int i = 0; i < n; i++) {
        fds[i] = evs[i].data.fd;
        masks[i] = evs[i].events;
    }
    return n;
}

static inline unsigned eb_EPOLLIN(void) { return EPOLLIN; }
static inline unsigned eb_EPOLLRDHUP(void) { return EPOLLRDHUP; }
static inline unsigned eb_EPOLLET(void) { return EPOLLET; }
static inline int eb_accept(int fd) { return accept4(fd, 0, 0, SOCK_NONBLOCK | SOCK_CLOEXEC); }
