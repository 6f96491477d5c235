/*
 * kafkatwist bench load generator: N connections, each sending one fixed,
 * pre-encoded request frame, waiting for the whole response (4-byte size
 * prefix + body), and sending it again (ping-pong).  Single thread, epoll,
 * edge-triggered.  Loopback only; bounded by time.
 *
 *   loadgen HOST PORT CONNECTIONS WARMUP_SECONDS SECONDS FRAME_FILE
 *
 * Prints one JSON object on stdout: responses counted in the measuring
 * window, its length, latency percentiles (microseconds, 1 us resolution
 * up to 2 s), errors, and how many connections got at least one answer.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HIST_US 2000000
#define SCRATCH (1 << 20)

struct conn {
    int fd;
    int sending;          /* 1 while the request is (partly) unsent */
    size_t sendOffset;
    unsigned char head[4];
    int headGot;
    int64_t bodyLeft;     /* -1 while reading the size prefix */
    int64_t sentAt;       /* ns */
    long answered;
    int dead;
};

static unsigned char *frame;
static size_t frameLen;
static uint32_t *hist;
static uint64_t overflow, counted, errors, closedByPeer;
static int64_t windowStart, windowEnd;
static unsigned char scratch[SCRATCH];

static int64_t nowNs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void fail(struct conn *c, int peer) {
    if (c->dead) return;
    c->dead = 1;
    if (peer) closedByPeer++; else errors++;
    close(c->fd);
}

static void doSend(struct conn *c) {
    while (c->sending) {
        ssize_t n = send(c->fd, frame + c->sendOffset, frameLen - c->sendOffset, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == EINTR) continue;
            fail(c, 0);
            return;
        }
        c->sendOffset += (size_t)n;
        if (c->sendOffset == frameLen) c->sending = 0;
    }
}

static void startRequest(struct conn *c, int64_t now) {
    c->sending = 1;
    c->sendOffset = 0;
    c->headGot = 0;
    c->bodyLeft = -1;
    c->sentAt = now;
    doSend(c);
}

static void completed(struct conn *c, int64_t now) {
    c->answered++;
    if (now >= windowStart && now < windowEnd) {
        int64_t us = (now - c->sentAt) / 1000;
        if (us < HIST_US) hist[us]++; else overflow++;
        counted++;
    }
    if (now < windowEnd) startRequest(c, now);
}

static void doRecv(struct conn *c) {
    for (;;) {
        ssize_t n = recv(c->fd, scratch, SCRATCH, 0);
        if (n == 0) { fail(c, 1); return; }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == EINTR) continue;
            fail(c, 0);
            return;
        }
        ssize_t i = 0;
        while (i < n) {
            if (c->sending) { fail(c, 0); return; }  /* bytes before the request was sent */
            if (c->bodyLeft < 0) {
                c->head[c->headGot++] = scratch[i++];
                if (c->headGot == 4) {
                    int32_t size = (int32_t)((uint32_t)c->head[0] << 24 | (uint32_t)c->head[1] << 16 |
                                             (uint32_t)c->head[2] << 8 | c->head[3]);
                    if (size < 4) { fail(c, 0); return; }
                    c->bodyLeft = size;
                }
                continue;
            }
            ssize_t take = n - i;
            if (take > c->bodyLeft) take = (ssize_t)c->bodyLeft;
            c->bodyLeft -= take;
            i += take;
            if (c->bodyLeft == 0) {
                if (i != n) { fail(c, 0); return; }  /* more than one response: protocol error */
                completed(c, nowNs());
                if (c->dead) return;
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s HOST PORT CONNECTIONS WARMUP_SECONDS SECONDS FRAME_FILE\n", argv[0]);
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]);
    int nconn = atoi(argv[3]);
    double warmup = atof(argv[4]), seconds = atof(argv[5]);
    if (nconn < 1 || nconn > 20000 || seconds <= 0 || seconds > 600 || warmup < 0 || warmup > 60) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    FILE *f = fopen(argv[6], "rb");
    if (!f) { perror("frame file"); return 2; }
    struct stat st;
    fstat(fileno(f), &st);
    frameLen = (size_t)st.st_size;
    frame = malloc(frameLen);
    if (fread(frame, 1, frameLen, f) != frameLen) { perror("read frame"); return 2; }
    fclose(f);
    hist = calloc(HIST_US, sizeof(uint32_t));

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) { fprintf(stderr, "bad host\n"); return 2; }
    if (((ntohl(addr.sin_addr.s_addr) >> 24) & 0xff) != 127) { fprintf(stderr, "loopback only\n"); return 2; }

    int ep = epoll_create1(0);
    struct conn *conns = calloc((size_t)nconn, sizeof(struct conn));
    int connectFailures = 0;
    for (int k = 0; k < nconn; k++) {
        struct conn *c = &conns[k];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            c->dead = 1;
            connectFailures++;
            if (c->fd >= 0) close(c->fd);
            continue;
        }
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }

    int64_t start = nowNs();
    windowStart = start + (int64_t)(warmup * 1e9);
    windowEnd = windowStart + (int64_t)(seconds * 1e9);
    /* Let in-flight responses drain for a moment after the window. */
    int64_t hardEnd = windowEnd + 2000000000LL;
    for (int k = 0; k < nconn; k++)
        if (!conns[k].dead) startRequest(&conns[k], start);

    struct epoll_event evs[1024];
    for (;;) {
        int64_t now = nowNs();
        if (now >= hardEnd) break;
        if (now >= windowEnd) {
            int busy = 0;
            for (int k = 0; k < nconn && !busy; k++)
                busy = !conns[k].dead && (conns[k].sending || conns[k].bodyLeft != -1 || conns[k].headGot);
            if (!busy) break;
        }
        int n = epoll_wait(ep, evs, 1024, 50);
        for (int k = 0; k < n; k++) {
            struct conn *c = evs[k].data.ptr;
            if (c->dead) continue;
            uint32_t e = evs[k].events;
            if (c->sending && (e & EPOLLOUT)) doSend(c);
            if (!c->dead && (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) doRecv(c);
        }
    }

    uint64_t p50 = 0, p99 = 0, p999 = 0, seen = 0, total = counted - overflow;
    int have50 = 0, have99 = 0, have999 = 0;
    for (int us = 0; us < HIST_US && total; us++) {
        seen += hist[us];
        if (!have50 && seen * 100 >= total * 50) { p50 = us; have50 = 1; }
        if (!have99 && seen * 100 >= total * 99) { p99 = us; have99 = 1; }
        if (!have999 && seen * 1000 >= total * 999) { p999 = us; have999 = 1; break; }
    }
    long answered = 0;
    for (int k = 0; k < nconn; k++)
        if (conns[k].answered > 0) answered++;
    printf("{\"responses\": %llu, \"seconds\": %.6f, \"p50_us\": %llu, \"p99_us\": %llu, "
           "\"p999_us\": %llu, \"over_2s\": %llu, \"errors\": %llu, \"closed_by_peer\": %llu, "
           "\"connect_failures\": %d, \"connections\": %d, \"answered_connections\": %ld, "
           "\"frame_bytes\": %zu}\n",
           (unsigned long long)counted, seconds, (unsigned long long)p50, (unsigned long long)p99,
           (unsigned long long)p999, (unsigned long long)overflow, (unsigned long long)errors,
           (unsigned long long)closedByPeer, connectFailures, nconn, answered, frameLen);
    return 0;
}
