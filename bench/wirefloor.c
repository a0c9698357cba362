/* The floor under any relay on this machine (bench/wirefloor.py builds it with `cc -O2`): a
 * sender that does nothing but write one precomputed WebSocket binary frame to each of N loopback
 * TCP connections RATE times a second, and receivers that read the frames, parse their lengths
 * and record each one's latency. Both are one thread over one epoll set of non-blocking sockets.
 *
 *   wirefloor send N SIZE RATE   listens on 127.0.0.1 (a free port), prints {"port": P}; accepts
 *       N connections, prints {"ready": N}, then pushes: connection i's push of tick t is due at
 *       t0 + (t + i / N) / RATE, so the pushes are spread over each tick as a relay's are. A frame
 *       (server to client: unmasked, opcode 2) carries a SIZE-byte payload that opens with the
 *       tick (int64), its due time and its send time (float64, epoch seconds); the rest is the
 *       same every time. A connection whose last frame is not fully written yet, or whose due
 *       push the sender reaches more than a tick late, skips to the latest tick (coalesced, as a
 *       relay's latest-value queue does). stdin: "window START END" (epoch seconds); at END it
 *       prints {"pushes", "coalesced", "partial"} counted over pushes due in [START, END).
 *   wirefloor receive PORT COUNT FILE   opens COUNT connections, prints {"ready": COUNT}; stdin:
 *       "window START END DRAIN"; DRAIN seconds after END it prints what each connection got of
 *       the frames due in [START, END) ({"ticks": [...], "frames", "bytes", "lost"}) and writes
 *       each such frame's latencies to FILE as float32 pairs (ms from its due time, from its send
 *       time to receipt).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STAMP 24 /* int64 tick, float64 due time, float64 send time */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void more_files(void) { /* one descriptor a connection: as many as the hard limit allows */
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
}

static int watch(int epoll, int fd, uint32_t events, uint64_t key, int op) {
    struct epoll_event event = {.events = events, .data.u64 = key};
    return epoll_ctl(epoll, op, fd, &event);
}

static int read_window(double *start, double *end, double *drain) {
    char line[256];
    if (!fgets(line, sizeof line, stdin)) return -1; /* the coordinator is gone */
    int n = drain ? sscanf(line, "window %lf %lf %lf", start, end, drain)
                  : sscanf(line, "window %lf %lf", start, end);
    if (n != (drain ? 3 : 2)) {
        fprintf(stderr, "wirefloor: expected a window, got %s", line);
        exit(1);
    }
    return 0;
}

/* -- the sender ------------------------------------------------------------------------------ */

typedef struct {
    int fd;
    size_t pending; /* bytes of its last frame still to write (at rest + total - pending) */
    unsigned char *rest;
} Peer;

static int send_main(int count, size_t size, double rate) {
    more_files();
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) != 0 ||
        listen(listener, 4096) != 0 || getsockname(listener, (struct sockaddr *)&address, &length))
        die("wirefloor: listen");
    printf("{\"port\": %d}\n", ntohs(address.sin_port));
    fflush(stdout);
    Peer *peers = calloc(count, sizeof *peers);
    int on = 1;
    for (int i = 0; i < count; i++) {
        if ((peers[i].fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) < 0) die("wirefloor: accept");
        setsockopt(peers[i].fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on); /* as asyncio's */
    }
    close(listener);

    /* The frame: 2 header bytes, 2 more for a 16-bit length, 8 more for a 64-bit one. */
    size_t head = size < 126 ? 2 : size < 65536 ? 4 : 10, total = head + size;
    unsigned char *frame = calloc(total, 1);
    frame[0] = 0x82; /* FIN, binary */
    frame[1] = head == 2 ? (unsigned char)size : head == 4 ? 126 : 127;
    for (size_t b = 2; b < head; b++) /* the longer length, big-endian */
        frame[b] = (unsigned char)(size >> (8 * (head - 1 - b)));
    memset(frame + head + STAMP, 'x', size - STAMP);

    int epoll = epoll_create1(0);
    for (int i = 0; i < count; i++) watch(epoll, peers[i].fd, 0, i, EPOLL_CTL_ADD); /* errors only */
    watch(epoll, STDIN_FILENO, EPOLLIN, UINT64_MAX, EPOLL_CTL_ADD);
    double period = 1.0 / rate, start = INFINITY, end = INFINITY, t0 = now();
    long pushes = 0, coalesced = 0, partial = 0, lost = 0, reported = 0;
    int64_t next = 0; /* the next slot: connection next % count's push of tick next / count */
    printf("{\"ready\": %d}\n", count);
    fflush(stdout);
    struct epoll_event events[1024];
    for (;;) {
        double at = now();
        int64_t due = (int64_t)floor((at - t0) * rate * count); /* the last slot due by now */
        for (; due - next >= count; next++) { /* over a tick behind: each skips to the latest */
            double due_at = t0 + (double)next * period / count;
            coalesced += due_at >= start && due_at < end;
        }
        for (; next <= due; next++) {
            Peer *p = &peers[next % count];
            int64_t tick = next / count;
            double due_at = t0 + (double)next * period / count;
            int counted = due_at >= start && due_at < end; /* due in the window */
            if (p->pending) { /* its last frame is still going out: this push coalesces */
                coalesced += counted;
                continue;
            }
            double sent = now();
            memcpy(frame + head, &tick, 8);
            memcpy(frame + head + 8, &due_at, 8);
            memcpy(frame + head + 16, &sent, 8);
            ssize_t n = send(p->fd, frame, total, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN) {
                lost++;
                p->pending = SIZE_MAX; /* never again */
                continue;
            }
            pushes += counted;
            if ((size_t)(n < 0 ? 0 : n) < total) { /* the rest when the socket has room */
                partial += counted;
                if (!p->rest) p->rest = malloc(total);
                p->pending = total - (n < 0 ? 0 : n);
                memcpy(p->rest + total - p->pending, frame + total - p->pending, p->pending);
                watch(epoll, p->fd, EPOLLOUT, next % count, EPOLL_CTL_MOD);
            }
        }
        if (!reported && at >= end) {
            printf("{\"pushes\": %ld, \"coalesced\": %ld, \"partial\": %ld, \"lost\": %ld}\n",
                   pushes, coalesced, partial, lost);
            fflush(stdout);
            reported = 1;
        }
        double wait = t0 + (double)next * period / count - now(); /* to the next slot */
        int n = epoll_wait(epoll, events, 1024, wait > 0 ? (int)ceil(wait * 1e3) : 0);
        for (int e = 0; e < n; e++) {
            uint64_t key = events[e].data.u64;
            if (key == UINT64_MAX) {
                if (read_window(&start, &end, NULL) < 0) return 0;
                continue;
            }
            Peer *p = &peers[key];
            if (p->pending == SIZE_MAX) continue;
            if (events[e].events & (EPOLLERR | EPOLLHUP)) {
                lost++;
                p->pending = SIZE_MAX;
                epoll_ctl(epoll, EPOLL_CTL_DEL, p->fd, NULL);
                continue;
            }
            ssize_t w = send(p->fd, p->rest + total - p->pending, p->pending, MSG_NOSIGNAL);
            if (w > 0) p->pending -= w;
            if (!p->pending) watch(epoll, p->fd, 0, key, EPOLL_CTL_MOD);
        }
    }
}

/* -- the receivers --------------------------------------------------------------------------- */

typedef struct {
    int fd;
    unsigned char head[10 + STAMP]; /* a frame's header and stamp, as they arrive */
    size_t have, skip;              /* bytes of it so far; payload bytes left after the stamp */
    int64_t last_tick;
    long ticks;
} Reader;

static double window_start = INFINITY, window_end = INFINITY;
static float *latencies;
static size_t latency_count, latency_capacity;
static long frames_in_window, bytes_in_window;

/* The frame whose header and stamp r holds arrived at `at`: counted if due in the window. */
static int record(Reader *r, double at) {
    size_t head = r->head[1] == 126 ? 4 : r->head[1] == 127 ? 10 : 2;
    int64_t tick;
    double due, sent;
    memcpy(&tick, r->head + head, 8);
    memcpy(&due, r->head + head + 8, 8);
    memcpy(&sent, r->head + head + 16, 8);
    if (due < window_start || due >= window_end) return 0;
    if (tick != r->last_tick) r->ticks++;
    r->last_tick = tick;
    frames_in_window++;
    if (latency_count + 2 > latency_capacity) {
        latency_capacity = latency_capacity ? 2 * latency_capacity : 1 << 16;
        if (!(latencies = realloc(latencies, latency_capacity * sizeof *latencies))) exit(2);
    }
    latencies[latency_count++] = (float)((at - due) * 1e3);
    latencies[latency_count++] = (float)((at - sent) * 1e3);
    return 1;
}

/* Parse what one read brought: header and stamp bytes are gathered, the rest skipped. */
static void parse(Reader *r, const unsigned char *data, size_t n, double at) {
    while (n) {
        if (r->skip) {
            size_t take = r->skip < n ? r->skip : n;
            r->skip -= take, data += take, n -= take;
            continue;
        }
        r->head[r->have++] = *data++, n--;
        if (r->have < 2) continue;
        size_t head = r->head[1] == 126 ? 4 : r->head[1] == 127 ? 10 : 2;
        if (r->have < head + STAMP) continue;
        uint64_t size = head == 2 ? r->head[1] & 0x7f : 0; /* big-endian after the 2 bytes */
        for (size_t b = 2; b < head; b++) size = size << 8 | r->head[b];
        if (record(r, at)) bytes_in_window += (long)(head + size);
        r->skip = size - STAMP, r->have = 0;
    }
}

static int receive_main(int port, int count, const char *file) {
    more_files();
    Reader *readers = calloc(count, sizeof *readers);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int epoll = epoll_create1(0);
    for (int i = 0; i < count; i++) {
        Reader *r = &readers[i];
        r->last_tick = -1;
        if ((r->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) < 0) die("wirefloor: socket");
        if (connect(r->fd, (struct sockaddr *)&address, sizeof address) != 0 && errno != EINPROGRESS)
            die("wirefloor: connect");
        watch(epoll, r->fd, EPOLLIN, i, EPOLL_CTL_ADD);
    }
    watch(epoll, STDIN_FILENO, EPOLLIN, UINT64_MAX, EPOLL_CTL_ADD);
    printf("{\"ready\": %d}\n", count);
    fflush(stdout);
    static unsigned char buffer[1 << 16];
    struct epoll_event events[1024];
    double drain = 0;
    long lost = 0;
    for (;;) {
        int n = epoll_wait(epoll, events, 1024, 50);
        double at = now();
        for (int e = 0; e < n; e++) {
            uint64_t key = events[e].data.u64;
            if (key == UINT64_MAX) {
                if (read_window(&window_start, &window_end, &drain) < 0) return 0;
                continue;
            }
            Reader *r = &readers[key];
            ssize_t got = read(r->fd, buffer, sizeof buffer);
            if (got > 0) {
                parse(r, buffer, (size_t)got, at);
            } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                lost++;
                epoll_ctl(epoll, EPOLL_CTL_DEL, r->fd, NULL);
            }
        }
        if (at >= window_end + drain) break;
    }
    printf("{\"frames\": %ld, \"bytes\": %ld, \"lost\": %ld, \"ticks\": [", frames_in_window,
           bytes_in_window, lost);
    for (int i = 0; i < count; i++) printf(i ? ",%ld" : "%ld", readers[i].ticks);
    printf("]}\n");
    FILE *out = fopen(file, "wb");
    if (!out || fwrite(latencies, sizeof *latencies, latency_count, out) != latency_count) die(file);
    fclose(out);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "send") == 0 && atol(argv[3]) >= STAMP)
        return send_main(atoi(argv[2]), (size_t)atol(argv[3]), atof(argv[4]));
    if (argc == 5 && strcmp(argv[1], "receive") == 0)
        return receive_main(atoi(argv[2]), atoi(argv[3]), argv[4]);
    fprintf(stderr, "usage: wirefloor send N SIZE(>=24) RATE | wirefloor receive PORT COUNT FILE\n");
    return 2;
}
