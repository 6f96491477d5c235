/*
 * kafkatwist bench load generator: N connections, each sending one fixed,
 * pre-encoded request frame, waiting for the whole response (4-byte size
 * prefix + body), and sending it again (ping-pong).  Single thread, epoll,
 * edge-triggered.  Loopback only; bounded by time.
 *
 *   loadgen HOST PORT CONNECTIONS WARMUP_SECONDS SECONDS FRAME_FILE
 *   loadgen -m [-p] HOST WARMUP_SECONDS SECONDS PORT:FRAME_FILE [PORT:FRAME_FILE ...]
 *
 * The second form opens one connection per PORT:FRAME_FILE argument (several
 * brokers, a frame each: e.g. a Produce to one partition per connection).
 * With -p every response is read as a flexible Produce response (v9-v12)
 * and the first partition's error code is checked: a response whose code is
 * not 0 (or that cannot be read) is counted apart and never as an answer.
 *
 * Prints one JSON object on stdout: responses counted in the measuring
 * window, its length, latency percentiles (microseconds, 1 us resolution
 * up to 2 s), errors, how many connections got at least one answer, the
 * generator's own CPU seconds in the window, and (-m) the same counts for
 * each port.
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HIST_US 2000000
#define SCRATCH (1 << 20)
#define KEEP 512          /* bytes of each response body kept for checking */
#define MAX_PORTS 16

struct frame {
    const char *path;
    unsigned char *bytes;
    size_t len;
};

struct portStats {
    int port;
    uint64_t counted, failed, unparsed;
};

struct conn {
    int fd;
    struct frame *frame;
    struct portStats *stats;
    unsigned char body[KEEP];
    size_t bodyGot;
    int sending;          /* 1 while the request is (partly) unsent */
    size_t sendOffset;
    unsigned char head[4];
    int headGot;
    int64_t bodyLeft;     /* -1 while reading the size prefix */
    int64_t sentAt;       /* ns */
    long answered;
    int dead;
};

static uint32_t *hist;
static uint64_t overflow, counted, errors, closedByPeer, failed, unparsed;
static uint64_t errorCodes[65536];
static int checkProduce;
static struct portStats ports[MAX_PORTS];
static int nports;
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
        ssize_t n = send(c->fd, c->frame->bytes + c->sendOffset, c->frame->len - c->sendOffset, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == EINTR) continue;
            fail(c, 0);
            return;
        }
        c->sendOffset += (size_t)n;
        if (c->sendOffset == c->frame->len) c->sending = 0;
    }
}

static void startRequest(struct conn *c, int64_t now) {
    c->sending = 1;
    c->sendOffset = 0;
    c->headGot = 0;
    c->bodyLeft = -1;
    c->bodyGot = 0;
    c->sentAt = now;
    doSend(c);
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
    int inWindow = now >= windowStart && now < windowEnd;
    int code = checkProduce ? produceErrorCode(c->body, c->bodyGot) : 0;
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
            if (c->bodyGot < KEEP) {
                size_t keep = KEEP - c->bodyGot < (size_t)take ? KEEP - c->bodyGot : (size_t)take;
                memcpy(c->body + c->bodyGot, scratch + i, keep);
                c->bodyGot += keep;
            }
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

static double cpuSeconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
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
            "       %s -m [-p] HOST WARMUP_SECONDS SECONDS PORT:FRAME_FILE [PORT:FRAME_FILE ...]\n",
            name, name);
    exit(2);
}

int main(int argc, char **argv) {
    const char *host;
    int nconn;
    double warmup, seconds;
    struct conn *conns;
    struct frame *frames;
    int nframes = 0, multi = 0;
    int *connPort;
    if (argc >= 2 && strcmp(argv[1], "-m") == 0) {
        multi = 1;
        int a = 2;
        if (a < argc && strcmp(argv[a], "-p") == 0) { checkProduce = 1; a++; }
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

    int ep = epoll_create1(0);
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
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }

    int64_t start = nowNs();
    windowStart = start + (int64_t)(warmup * 1e9);
    windowEnd = windowStart + (int64_t)(seconds * 1e9);
    /* Let in-flight responses drain for a moment after the window. */
    int64_t hardEnd = windowEnd + 2000000000LL;
    double cpuAtStart = -1, cpuAtEnd = -1;
    for (int k = 0; k < nconn; k++)
        if (!conns[k].dead) startRequest(&conns[k], start);

    struct epoll_event evs[1024];
    for (;;) {
        int64_t now = nowNs();
        if (cpuAtStart < 0 && now >= windowStart) cpuAtStart = cpuSeconds();
        if (cpuAtEnd < 0 && now >= windowEnd) cpuAtEnd = cpuSeconds();
        if (now >= hardEnd) break;
        if (now >= windowEnd) {
            int busy = 0;
            for (int k = 0; k < nconn && !busy; k++)
                busy = !conns[k].dead && (conns[k].sending || conns[k].bodyLeft != -1 || conns[k].headGot);
            if (!busy) break;
        }
        /* Wake at the window's edges, so its CPU time is read on time. */
        int64_t edge = cpuAtStart < 0 ? windowStart : cpuAtEnd < 0 ? windowEnd : hardEnd;
        int timeout = (int)((edge - now) / 1000000) + 1;
        if (timeout > 50) timeout = 50;
        int n = epoll_wait(ep, evs, 1024, timeout);
        for (int k = 0; k < n; k++) {
            struct conn *c = evs[k].data.ptr;
            if (c->dead) continue;
            uint32_t e = evs[k].events;
            if (c->sending && (e & EPOLLOUT)) doSend(c);
            if (!c->dead && (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) doRecv(c);
        }
    }
    if (cpuAtStart < 0) cpuAtStart = cpuSeconds();
    if (cpuAtEnd < 0) cpuAtEnd = cpuSeconds();

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
           "\"frame_bytes\": %zu, \"cpu_window_s\": %.3f",
           (unsigned long long)counted, seconds, (unsigned long long)p50, (unsigned long long)p99,
           (unsigned long long)p999, (unsigned long long)overflow, (unsigned long long)errors,
           (unsigned long long)closedByPeer, connectFailures, nconn, answered, frames[0].len,
           cpuAtEnd - cpuAtStart);
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
