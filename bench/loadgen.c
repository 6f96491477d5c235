/*
 * kafkatwist bench load generator: N connections, each sending one fixed,
 * pre-encoded request frame, waiting for the whole response (4-byte size
 * prefix + body), and sending it again (ping-pong).  Single thread, epoll,
 * edge-triggered.  Loopback only; bounded by time.
 *
 *   loadgen HOST PORT CONNECTIONS WARMUP_SECONDS SECONDS FRAME_FILE
 *   loadgen -m [-p] [-u] [-w N] [-B] HOST WARMUP_SECONDS SECONDS PORT:FRAME_FILE [PORT:FRAME_FILE ...]
 *
 * The second form opens one connection per PORT:FRAME_FILE argument (several
 * brokers, a frame each: e.g. a Produce to one partition per connection).
 * With -p every response is read as a flexible Produce response (v9-v12)
 * and the first partition's error code is checked: a response whose code is
 * not 0 (or that cannot be read) is counted apart and never as an answer.
 *
 * What the generator itself costs per request is kept small, as on a
 * 2-core machine it takes CPU the brokers would use: a connection waits
 * only for input (EPOLLOUT only while a send is partial), and a response
 * read whole is not followed by a recv that would return EAGAIN.  With -u
 * the connections run on io_uring instead of epoll (raw syscalls, no
 * liburing): a request is one send SQE (completion posted only on failure)
 * and one recv SQE into the connection's own buffer, all of a loop's
 * submitted by the one io_uring_enter that also waits; with
 * IORING_SETUP_DEFER_TASKRUN the kernel wakes the generator only once -w N
 * completions (default 1) are ready, or 1 ms after it began waiting --
 * fewer wake-ups and context switches on the brokers' CPUs.  Where the
 * kernel refuses io_uring, -u falls back to epoll ("engine" says which ran).
 * -B runs the generator as SCHED_BATCH (woken, it does not preempt the
 * thread on its CPU).
 *
 * Prints one JSON object on stdout: responses counted in the measuring
 * window, its length, latency percentiles (microseconds, 1 us resolution
 * up to 2 s), errors, how many connections got at least one answer, the
 * generator's own CPU seconds in the window (user and system apart), its
 * context switches and syscalls (send, recv, wait) in the window, and (-m)
 * the same counts for each port.
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
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HIST_US 2000000
#define SCRATCH (1 << 20)
#define KEEP 512          /* bytes of each response body kept for checking */
#define MAX_PORTS 16
#define URING_MAX_CONNS 4096

struct frame {
    const char *path;
    unsigned char *bytes;
    size_t len;
};

struct portStats {
    int port;
    uint64_t counted, failed, unparsed;
};

#define BODY(c) ((c)->head + 4)

struct conn {
    int fd;
    struct frame *frame;
    struct portStats *stats;
    unsigned char head[4 + KEEP];   /* the size prefix, then the body's first KEEP bytes */
    size_t bodyGot;
    int sending;          /* 1 while the request is (partly) unsent */
    int wantOut;          /* epoll: EPOLLOUT registered (a partial send) */
    int inflight;         /* a request sent and its response not yet whole */
    size_t sendOffset;
    int headGot;
    int64_t bodyLeft;     /* -1 while reading the size prefix */
    int64_t sentAt;       /* ns */
    long answered;
    int dead;
};

static uint32_t *hist;
static uint64_t overflow, counted, errors, closedByPeer, failed, unparsed;
static uint64_t errorCodes[65536];
static uint64_t sends, recvs, waits;     /* syscalls (io_uring: SQEs and enters) */
static int checkProduce;
static struct portStats ports[MAX_PORTS];
static int nports;
static int64_t windowStart, windowEnd;
static unsigned char scratch[SCRATCH];
static int ep = -1;
static struct conn *conns;
static int nconn;

static int64_t nowNs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void fail(struct conn *c, int peer) {
    if (c->dead) return;
    c->dead = 1;
    c->inflight = 0;
    if (peer) closedByPeer++; else errors++;
    shutdown(c->fd, SHUT_RDWR);   /* io_uring: ends a recv still pending on it */
    close(c->fd);
}

/* -- io_uring, by raw syscalls ------------------------------------------- */

struct uring {
    int fd;
    unsigned *sqHead, *sqTail, sqMask, sqEntries, *sqArray;
    unsigned *cqHead, *cqTail, cqMask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    unsigned tail;        /* our copy of the SQ tail */
    unsigned toSubmit;
};

static struct uring ring;
static int useUring;
static int waitBatch = 1;
static int batchPolicy;

static int uringSetup(unsigned entries) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 2;
    int fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (fd < 0) return -1;
    if (!(p.features & IORING_FEAT_SINGLE_MMAP) || !(p.features & IORING_FEAT_EXT_ARG)) { close(fd); return -1; }
    size_t sqSize = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cqSize = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    size_t size = sqSize > cqSize ? sqSize : cqSize;
    unsigned char *rings = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
    if (rings == MAP_FAILED) { close(fd); return -1; }
    struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    if (sqes == MAP_FAILED) { close(fd); return -1; }
    ring.fd = fd;
    ring.sqHead = (unsigned *)(rings + p.sq_off.head);
    ring.sqTail = (unsigned *)(rings + p.sq_off.tail);
    ring.sqMask = *(unsigned *)(rings + p.sq_off.ring_mask);
    ring.sqEntries = p.sq_entries;
    ring.sqArray = (unsigned *)(rings + p.sq_off.array);
    ring.cqHead = (unsigned *)(rings + p.cq_off.head);
    ring.cqTail = (unsigned *)(rings + p.cq_off.tail);
    ring.cqMask = *(unsigned *)(rings + p.cq_off.ring_mask);
    ring.cqes = (struct io_uring_cqe *)(rings + p.cq_off.cqes);
    ring.sqes = sqes;
    ring.tail = *ring.sqTail;
    return 0;
}

/* Submit what is queued and wait for up to `want` completions or `timeoutNs`. */
static void uringEnter(unsigned want, int64_t timeoutNs) {
    __atomic_store_n(ring.sqTail, ring.tail, __ATOMIC_RELEASE);
    struct __kernel_timespec ts = {.tv_sec = timeoutNs / 1000000000LL, .tv_nsec = timeoutNs % 1000000000LL};
    struct io_uring_getevents_arg arg = {.sigmask = 0, .sigmask_sz = _NSIG / 8, .ts = (uint64_t)(uintptr_t)&ts};
    unsigned flags = IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG;
    for (;;) {
        long r = syscall(__NR_io_uring_enter, ring.fd, ring.toSubmit, want, flags, &arg, sizeof arg);
        waits++;
        if (r >= 0 || errno == ETIME || errno == EINTR) break;
        if (errno == EAGAIN || errno == EBUSY) { want = 0; continue; }   /* CQ full: reap first */
        perror("io_uring_enter");
        exit(3);
    }
    ring.toSubmit = 0;
}

static struct io_uring_sqe *uringSqe(void) {
    if (ring.tail - __atomic_load_n(ring.sqHead, __ATOMIC_ACQUIRE) == ring.sqEntries) uringEnter(0, 0);
    unsigned index = ring.tail & ring.sqMask;
    struct io_uring_sqe *sqe = &ring.sqes[index];
    memset(sqe, 0, sizeof *sqe);
    ring.sqArray[index] = index;
    ring.tail++;
    ring.toSubmit++;
    return sqe;
}

#define OP_SEND 0
#define OP_RECV 1

static void uringSend(struct conn *c) {
    struct io_uring_sqe *sqe = uringSqe();
    sqe->opcode = IORING_OP_SEND;
    sqe->fd = c->fd;
    sqe->addr = (uint64_t)(uintptr_t)(c->frame->bytes + c->sendOffset);
    sqe->len = (unsigned)(c->frame->len - c->sendOffset);
    /* All of it or a failure; a completion only for a failure. */
    sqe->msg_flags = MSG_NOSIGNAL | MSG_WAITALL;
    sqe->flags = IOSQE_CQE_SKIP_SUCCESS;
    sqe->user_data = (uint64_t)(c - conns) << 1 | OP_SEND;
    sends++;
}

/* The next recv of a response: the size prefix, then the body's kept part, then the rest into scratch. */
static void uringRecv(struct conn *c) {
    struct io_uring_sqe *sqe = uringSqe();
    sqe->opcode = IORING_OP_RECV;
    sqe->fd = c->fd;
    if (c->bodyLeft < 0) {
        sqe->addr = (uint64_t)(uintptr_t)(c->head + c->headGot);
        /* the prefix and the kept body are adjacent: one recv reads both */
        sqe->len = (unsigned)(4 - c->headGot + KEEP);
    } else if (c->bodyGot < KEEP) {
        sqe->addr = (uint64_t)(uintptr_t)(BODY(c) + c->bodyGot);
        sqe->len = (unsigned)(KEEP - c->bodyGot);
    } else {
        sqe->addr = (uint64_t)(uintptr_t)scratch;
        sqe->len = SCRATCH;
    }
    if ((int64_t)sqe->len > c->bodyLeft && c->bodyLeft >= 0) sqe->len = (unsigned)c->bodyLeft;
    sqe->user_data = (uint64_t)(c - conns) << 1 | OP_RECV;
    recvs++;
}

/* -- requests and responses ---------------------------------------------- */

static void wantOutput(struct conn *c, int want) {
    if (c->wantOut == want) return;
    c->wantOut = want;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET | EPOLLRDHUP | (want ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void doSend(struct conn *c) {
    while (c->sending) {
        ssize_t n = send(c->fd, c->frame->bytes + c->sendOffset, c->frame->len - c->sendOffset, MSG_NOSIGNAL);
        sends++;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) { wantOutput(c, 1); return; }
            if (errno == EINTR) continue;
            fail(c, 0);
            return;
        }
        c->sendOffset += (size_t)n;
        if (c->sendOffset == c->frame->len) c->sending = 0;
    }
    wantOutput(c, 0);
}

static void startRequest(struct conn *c, int64_t now) {
    c->sending = 1;
    c->inflight = 1;
    c->sendOffset = 0;
    c->headGot = 0;
    c->bodyLeft = -1;
    c->bodyGot = 0;
    c->sentAt = now;
    if (useUring) {
        c->sending = 0;   /* the kernel sends it all, or the send's completion says it failed */
        uringSend(c);
        uringRecv(c);
    } else {
        doSend(c);
    }
}

/* Unsigned varint (Kafka's flexible versions); -1 past the end or too long. */
static int64_t uvarint(const unsigned char *b, size_t len, size_t *at) {
    uint64_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (*at >= len) return -1;
        unsigned char x = b[(*at)++];
        v |= (uint64_t)(x & 0x7f) << shift;
        if (!(x & 0x80)) return (int64_t)v;
    }
    return -1;
}

/*
 * The first partition's error code of a flexible Produce response (v9-v12):
 * correlation id, header tagged fields, then responses[0].name,
 * responses[0].partition_responses[0].{index, error_code}.  -1 if the kept
 * bytes do not hold it.
 */
static int produceErrorCode(const unsigned char *b, size_t len) {
    size_t at = 4;
    int64_t tags = uvarint(b, len, &at);
    if (tags < 0) return -1;
    for (int64_t t = 0; t < tags; t++) {
        if (uvarint(b, len, &at) < 0) return -1;
        int64_t size = uvarint(b, len, &at);
        if (size < 0 || (uint64_t)size > len - at) return -1;
        at += (size_t)size;
    }
    int64_t topics = uvarint(b, len, &at);        /* compact array: count + 1 */
    if (topics < 2) return -1;
    int64_t name = uvarint(b, len, &at);          /* compact string: length + 1 */
    if (name < 1 || (uint64_t)(name - 1) > len - at) return -1;
    at += (size_t)(name - 1);
    int64_t partitions = uvarint(b, len, &at);
    if (partitions < 2 || len - at < 6) return -1;
    at += 4;                                      /* index */
    return (int)((uint16_t)(b[at] << 8 | b[at + 1]));
}

static void completed(struct conn *c, int64_t now) {
    c->answered++;
    c->inflight = 0;
    int inWindow = now >= windowStart && now < windowEnd;
    int code = checkProduce ? produceErrorCode(BODY(c), c->bodyGot) : 0;
    if (code != 0) {
        if (inWindow) {
            if (code < 0) { unparsed++; c->stats->unparsed++; }
            else { failed++; c->stats->failed++; errorCodes[code]++; }
        }
    } else if (inWindow) {
        int64_t us = (now - c->sentAt) / 1000;
        if (us < HIST_US) hist[us]++; else overflow++;
        counted++;
        c->stats->counted++;
    }
    if (now < windowEnd) startRequest(c, now);
}

/* The size prefix is whole: the body's length, or -1 (a protocol error). */
static int64_t bodySize(struct conn *c) {
    int32_t size = (int32_t)((uint32_t)c->head[0] << 24 | (uint32_t)c->head[1] << 16 |
                             (uint32_t)c->head[2] << 8 | c->head[3]);
    return size < 4 ? -1 : size;
}

/* io_uring: a recv's completion, `n` bytes where uringRecv asked for them. */
static void received(struct conn *c, int n) {
    if (n == 0) { fail(c, 1); return; }
    if (n < 0) { fail(c, 0); return; }
    size_t got = (size_t)n;
    if (c->bodyLeft < 0) {
        size_t head = 4 - (size_t)c->headGot;
        if (got < head) { c->headGot += n; uringRecv(c); return; }
        c->headGot = 4;
        got -= head;
        c->bodyLeft = bodySize(c);
        if (c->bodyLeft < 0) { fail(c, 0); return; }
        /* what followed the prefix landed in body[] */
        if ((int64_t)got > c->bodyLeft) { fail(c, 0); return; }   /* more than one response */
        c->bodyGot = got;
        c->bodyLeft -= (int64_t)got;
    } else {
        if ((int64_t)got > c->bodyLeft) { fail(c, 0); return; }
        if (c->bodyGot < KEEP) c->bodyGot += got;
        c->bodyLeft -= (int64_t)got;
    }
    if (c->bodyLeft == 0) completed(c, nowNs());
    else uringRecv(c);
}

static void doRecv(struct conn *c) {
    for (;;) {
        ssize_t n = recv(c->fd, scratch, SCRATCH, 0);
        recvs++;
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
                    c->bodyLeft = bodySize(c);
                    if (c->bodyLeft < 0) { fail(c, 0); return; }
                }
                continue;
            }
            ssize_t take = n - i;
            if (take > c->bodyLeft) take = (ssize_t)c->bodyLeft;
            if (c->bodyGot < KEEP) {
                size_t keep = KEEP - c->bodyGot < (size_t)take ? KEEP - c->bodyGot : (size_t)take;
                memcpy(BODY(c) + c->bodyGot, scratch + i, keep);
                c->bodyGot += keep;
            }
            c->bodyLeft -= take;
            i += take;
            if (c->bodyLeft == 0) {
                if (i != n) { fail(c, 0); return; }  /* more than one response: protocol error */
                completed(c, nowNs());
                /* One request in flight: nothing more can be waiting until it is answered, and
                 * its answer is a new edge. */
                return;
            }
        }
    }
}

struct usage {
    double user, sys;
    long voluntary, involuntary;
};

static struct usage cpuUsage(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct usage u = {ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
                      ru.ru_nvcsw, ru.ru_nivcsw};
    return u;
}

static struct frame *loadFrame(struct frame *frames, int *nframes, const char *path) {
    for (int k = 0; k < *nframes; k++)
        if (strcmp(frames[k].path, path) == 0) return &frames[k];
    struct frame *fr = &frames[(*nframes)++];
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    struct stat st;
    fstat(fileno(f), &st);
    fr->path = path;
    fr->len = (size_t)st.st_size;
    fr->bytes = malloc(fr->len ? fr->len : 1);
    if (fr->len < 4 || fread(fr->bytes, 1, fr->len, f) != fr->len) { fprintf(stderr, "%s: no frame\n", path); exit(2); }
    fclose(f);
    return fr;
}

static struct portStats *portStats(int port) {
    for (int k = 0; k < nports; k++)
        if (ports[k].port == port) return &ports[k];
    if (nports == MAX_PORTS) { fprintf(stderr, "more than %d ports\n", MAX_PORTS); exit(2); }
    ports[nports].port = port;
    return &ports[nports++];
}

static void usage(const char *name) {
    fprintf(stderr,
            "usage: %s HOST PORT CONNECTIONS WARMUP_SECONDS SECONDS FRAME_FILE\n"
            "       %s -m [-p] [-u] [-w N] [-B] HOST WARMUP_SECONDS SECONDS PORT:FRAME_FILE [PORT:FRAME_FILE ...]\n"
            "       %s -s PORT SECONDS RESPONSE_BYTES\n",
            name, name, name);
    exit(2);
}

/*
 * -s: the floor.  A one-thread epoll server on 127.0.0.1:PORT that answers
 * every size-prefixed request with a fixed Produce v9 response of
 * RESPONSE_BYTES (the request's correlation id, one topic "x", partition 0,
 * error code 0, zero padding) and does nothing else: what any server pays
 * per small request in the kernel (a recv and a send over loopback TCP,
 * with the other side's receive work that loopback runs in the sender's
 * context), for setting beside a broker's figure.  Prints its port, then
 * runs until SECONDS pass.
 */
struct serverConn {
    int fd;
    unsigned char in[65536];
    size_t got;
};

static int serve(int port, double seconds, int responseBytes) {
    if (responseBytes < 20 || responseBytes > 4096) { fprintf(stderr, "bad response size\n"); return 2; }
    unsigned char response[4096];
    memset(response, 0, sizeof response);
    int32_t size = responseBytes - 4;
    response[0] = (unsigned char)(size >> 24); response[1] = (unsigned char)(size >> 16);
    response[2] = (unsigned char)(size >> 8); response[3] = (unsigned char)size;
    /* body: correlation id [4..8), header tags 0, topics 1+1, name "x", partitions 1+1, index 0, error 0 */
    unsigned char body[] = {0, 2, 2, 'x', 2, 0, 0, 0, 0, 0, 0};
    memcpy(response + 8, body, sizeof body);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 1024) != 0) {
        perror("bind");
        return 2;
    }
    socklen_t len = sizeof addr;
    getsockname(listener, (struct sockaddr *)&addr, &len);
    printf("%d\n", ntohs(addr.sin_port));
    fflush(stdout);
    int sep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(sep, EPOLL_CTL_ADD, listener, &ev);
    int64_t end = nowNs() + (int64_t)(seconds * 1e9);
    struct epoll_event evs[256];
    while (nowNs() < end) {
        int n = epoll_wait(sep, evs, 256, 100);
        for (int k = 0; k < n; k++) {
            struct serverConn *c = evs[k].data.ptr;
            if (c == NULL) {
                int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
                if (fd < 0) continue;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                c = calloc(1, sizeof *c);
                c->fd = fd;
                struct epoll_event cev = {.events = EPOLLIN | EPOLLET | EPOLLRDHUP, .data.ptr = c};
                epoll_ctl(sep, EPOLL_CTL_ADD, fd, &cev);
                continue;
            }
            for (;;) {
                ssize_t r = recv(c->fd, c->in + c->got, sizeof c->in - c->got, 0);
                if (r <= 0) {
                    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
                    epoll_ctl(sep, EPOLL_CTL_DEL, c->fd, NULL);
                    close(c->fd);
                    free(c);
                    c = NULL;
                    break;
                }
                c->got += (size_t)r;
                while (c->got >= 4) {
                    size_t frame = 4 + (size_t)((uint32_t)c->in[0] << 24 | (uint32_t)c->in[1] << 16 |
                                                (uint32_t)c->in[2] << 8 | c->in[3]);
                    if (frame > sizeof c->in) { c->got = 0; break; }
                    if (c->got < frame) break;
                    memcpy(response + 4, c->in + 8, 4);   /* the correlation id */
                    if (send(c->fd, response, (size_t)responseBytes, MSG_NOSIGNAL) < 0) break;
                    memmove(c->in, c->in + frame, c->got - frame);
                    c->got -= frame;
                }
                if (c->got < 4 || (size_t)r < sizeof c->in) break;   /* read to the end of what came */
            }
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *host;
    double warmup, seconds;
    struct frame *frames;
    int nframes = 0, multi = 0;
    int *connPort;
    if (argc == 5 && strcmp(argv[1], "-s") == 0) return serve(atoi(argv[2]), atof(argv[3]), atoi(argv[4]));
    if (argc >= 2 && strcmp(argv[1], "-m") == 0) {
        multi = 1;
        int a = 2;
        for (; a < argc && argv[a][0] == '-'; a++) {
            if (strcmp(argv[a], "-p") == 0) checkProduce = 1;
            else if (strcmp(argv[a], "-u") == 0) useUring = 1;
            else if (strcmp(argv[a], "-w") == 0 && a + 1 < argc) waitBatch = atoi(argv[++a]);
            else if (strcmp(argv[a], "-B") == 0) batchPolicy = 1;
            else usage(argv[0]);
        }
        if (waitBatch < 1) usage(argv[0]);
        if (argc - a < 4) usage(argv[0]);
        host = argv[a];
        warmup = atof(argv[a + 1]);
        seconds = atof(argv[a + 2]);
        nconn = argc - (a + 3);
        if (nconn > 20000) usage(argv[0]);
        conns = calloc((size_t)nconn, sizeof(struct conn));
        frames = calloc((size_t)nconn, sizeof(struct frame));
        connPort = calloc((size_t)nconn, sizeof(int));
        for (int k = 0; k < nconn; k++) {
            char *spec = argv[a + 3 + k];
            char *colon = strchr(spec, ':');
            if (!colon) usage(argv[0]);
            *colon = 0;
            connPort[k] = atoi(spec);
            conns[k].frame = loadFrame(frames, &nframes, colon + 1);
            conns[k].stats = portStats(connPort[k]);
        }
    } else {
        if (argc != 7) usage(argv[0]);
        host = argv[1];
        nconn = atoi(argv[3]);
        warmup = atof(argv[4]);
        seconds = atof(argv[5]);
        if (nconn < 1 || nconn > 20000) usage(argv[0]);
        conns = calloc((size_t)nconn, sizeof(struct conn));
        frames = calloc(1, sizeof(struct frame));
        connPort = calloc((size_t)nconn, sizeof(int));
        struct frame *fr = loadFrame(frames, &nframes, argv[6]);
        struct portStats *ps = portStats(atoi(argv[2]));
        for (int k = 0; k < nconn; k++) {
            connPort[k] = ps->port;
            conns[k].frame = fr;
            conns[k].stats = ps;
        }
    }
    if (nconn < 1 || seconds <= 0 || seconds > 600 || warmup < 0 || warmup > 60) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    hist = calloc(HIST_US, sizeof(uint32_t));

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) { fprintf(stderr, "bad host\n"); return 2; }
    if (((ntohl(addr.sin_addr.s_addr) >> 24) & 0xff) != 127) { fprintf(stderr, "loopback only\n"); return 2; }

    if (batchPolicy) {
        /* SCHED_BATCH: woken, the generator does not preempt the thread on its CPU (a broker's). */
        struct sched_param sp = {.sched_priority = 0};
        if (sched_setscheduler(0, SCHED_BATCH, &sp) != 0) perror("sched_setscheduler");
    }
    const char *engine = "epoll";
    if (useUring) {
        unsigned entries = 1;
        while (entries < 2 * (unsigned)nconn + 16) entries <<= 1;
        if (nconn <= URING_MAX_CONNS && uringSetup(entries) == 0) engine = "io_uring";
        else useUring = 0;
    }
    if (!useUring) ep = epoll_create1(0);
    int connectFailures = 0;
    for (int k = 0; k < nconn; k++) {
        struct conn *c = &conns[k];
        addr.sin_port = htons((uint16_t)connPort[k]);
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            c->dead = 1;
            connectFailures++;
            if (c->fd >= 0) close(c->fd);
            continue;
        }
        if (useUring) continue;   /* io_uring waits on a blocking socket's readiness itself */
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        /* Input only: EPOLLOUT is added while a send is partial (wantOutput). */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }

    int64_t start = nowNs();
    windowStart = start + (int64_t)(warmup * 1e9);
    windowEnd = windowStart + (int64_t)(seconds * 1e9);
    /* Let in-flight responses drain for a moment after the window. */
    int64_t hardEnd = windowEnd + 2000000000LL;
    int started = 0, ended = 0;
    struct usage atStart = {0}, atEnd = {0};
    uint64_t callsAtStart[3] = {0}, callsAtEnd[3] = {0};
    for (int k = 0; k < nconn; k++)
        if (!conns[k].dead) startRequest(&conns[k], start);

    struct epoll_event evs[1024];
    for (;;) {
        int64_t now = nowNs();
        if (!started && now >= windowStart) {
            started = 1;
            atStart = cpuUsage();
            callsAtStart[0] = sends; callsAtStart[1] = recvs; callsAtStart[2] = waits;
        }
        if (!ended && now >= windowEnd) {
            ended = 1;
            atEnd = cpuUsage();
            callsAtEnd[0] = sends; callsAtEnd[1] = recvs; callsAtEnd[2] = waits;
        }
        if (now >= hardEnd) break;
        int inflight = 0;
        for (int k = 0; k < nconn; k++)
            inflight += !conns[k].dead && conns[k].inflight;
        if (now >= windowEnd && !inflight) break;
        /* Wake at the window's edges, so its CPU time is read on time. */
        int64_t edge = !started ? windowStart : !ended ? windowEnd : hardEnd;
        int64_t timeout = edge - now + 1000000;
        if (useUring) {
            unsigned want = (unsigned)(waitBatch < inflight ? waitBatch : inflight);
            if (want < 1) want = 1;
            /* A batch waits at most 1 ms: a slow broker's answers are not held back longer. */
            if (timeout > 1000000 && want > 1) timeout = 1000000;
            if (timeout > 50000000) timeout = 50000000;
            uringEnter(want, timeout);
            unsigned head = *ring.cqHead, tail = __atomic_load_n(ring.cqTail, __ATOMIC_ACQUIRE);
            for (; head != tail; head++) {
                struct io_uring_cqe *cqe = &ring.cqes[head & ring.cqMask];
                struct conn *c = &conns[cqe->user_data >> 1];
                int op = (int)(cqe->user_data & 1), res = cqe->res;
                __atomic_store_n(ring.cqHead, head + 1, __ATOMIC_RELEASE);
                if (c->dead) continue;
                if (op == OP_SEND) fail(c, res == -EPIPE || res == -ECONNRESET);   /* only failures post */
                else received(c, res);
            }
        } else {
            if (timeout > 50000000) timeout = 50000000;
            int n = epoll_wait(ep, evs, 1024, (int)(timeout / 1000000));
            waits++;
            for (int k = 0; k < n; k++) {
                struct conn *c = evs[k].data.ptr;
                if (c->dead) continue;
                uint32_t e = evs[k].events;
                if (c->sending && (e & EPOLLOUT)) doSend(c);
                if (!c->dead && (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) doRecv(c);
            }
        }
    }
    if (!started) { atStart = cpuUsage(); callsAtStart[0] = sends; callsAtStart[1] = recvs; callsAtStart[2] = waits; }
    if (!ended) { atEnd = cpuUsage(); callsAtEnd[0] = sends; callsAtEnd[1] = recvs; callsAtEnd[2] = waits; }

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
           "\"frame_bytes\": %zu, \"cpu_window_s\": %.3f, \"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f, "
           "\"voluntary_switches\": %ld, \"involuntary_switches\": %ld, "
           "\"sends\": %llu, \"recvs\": %llu, \"waits\": %llu, \"engine\": \"%s\", \"wait_batch\": %d, "
           "\"sched_batch\": %d",
           (unsigned long long)counted, seconds, (unsigned long long)p50, (unsigned long long)p99,
           (unsigned long long)p999, (unsigned long long)overflow, (unsigned long long)errors,
           (unsigned long long)closedByPeer, connectFailures, nconn, answered, frames[0].len,
           (atEnd.user - atStart.user) + (atEnd.sys - atStart.sys), atEnd.user - atStart.user,
           atEnd.sys - atStart.sys, atEnd.voluntary - atStart.voluntary,
           atEnd.involuntary - atStart.involuntary, (unsigned long long)(callsAtEnd[0] - callsAtStart[0]),
           (unsigned long long)(callsAtEnd[1] - callsAtStart[1]), (unsigned long long)(callsAtEnd[2] - callsAtStart[2]),
           engine, useUring ? waitBatch : 1, batchPolicy);
    if (multi) {
        printf(", \"failed_responses\": %llu, \"unparsed_responses\": %llu, \"error_codes\": {",
               (unsigned long long)failed, (unsigned long long)unparsed);
        int first = 1;
        for (int code = 0; code < 65536; code++)
            if (errorCodes[code]) {
                printf("%s\"%d\": %llu", first ? "" : ", ", (int16_t)code, (unsigned long long)errorCodes[code]);
                first = 0;
            }
        printf("}, \"ports\": {");
        for (int k = 0; k < nports; k++)
            printf("%s\"%d\": {\"responses\": %llu, \"failed\": %llu, \"unparsed\": %llu}", k ? ", " : "",
                   ports[k].port, (unsigned long long)ports[k].counted, (unsigned long long)ports[k].failed,
                   (unsigned long long)ports[k].unparsed);
        printf("}");
    }
    printf("}\n");
    return 0;
}
