/* The spatial benchmark's MQTT side in C (bench/mqttspatial.py builds it with `cc ... -lmosquitto`):
 * many subscribers in one process, or the per-cell publisher, over libmosquitto, so that neither
 * is the limit of what it measures. MQTT itself is libmosquitto's; this file only reads and
 * writes the payloads (a tick header, then 16-byte rows: id int64, x float32, y float32).
 *
 *   mqttload subscribe HOST PORT   stdin: "N", then N lines "x0 y0 x1 y1 K topic1 .. topicK";
 *       prints {"ready": N} once every SUBACK is in, then reads "window START END DRAIN" (epoch
 *       seconds) and, DRAIN seconds after END, prints one JSON line per subscriber (what it got
 *       in the window: distinct ticks, rows, rows inside its box, messages, bytes its socket
 *       received) and a last one with every message's latency (ms, receipt - tick's send time).
 *   mqttload publish HOST PORT SIDE   prints {"ready": 1} once connected, then per tick reads
 *       from stdin: uint32 rows, the 16-byte tick header, SIDE*SIDE+1 uint32 row bounds of the
 *       cells, the rows sorted by cell; publishes cell n's rows to cells/<n / SIDE>/<n % SIDE>.
 *
 * Subscribers run on libmosquitto's non-blocking calls with one epoll set over their sockets.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mosquitto.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEADER 16      /* int64 tick, float64 send time (time.time()) */
#define ROW 16         /* int64 id, float32 x, float32 y */
#define TCPI_BYTES_RECEIVED 128 /* offset in struct tcp_info (Linux 4.1 and later) */

typedef struct {
    struct mosquitto *mosq;
    float box[4];
    int topics;
    char **topic;
    int subscribed, lost, fd;
    int64_t last_tick;
    long ticks, rows, useful, messages;
    uint64_t bytes_at_start, bytes_at_end;
} Subscriber;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double window_start = 1e300, window_end = 1e300;
static float *latencies;
static size_t latency_count, latency_capacity;

static void fail(const char *what, int rc) {
    fprintf(stderr, "mqttload: %s: %s\n", what, mosquitto_strerror(rc));
    exit(1);
}

static uint64_t bytes_received(int fd) {
    unsigned char info[256];
    socklen_t size = sizeof info;
    memset(info, 0, sizeof info);
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, info, &size) != 0 || size < 136) return 0;
    uint64_t bytes;
    memcpy(&bytes, info + TCPI_BYTES_RECEIVED, sizeof bytes);
    return bytes;
}

static void on_connect(struct mosquitto *mosq, void *obj, int rc) {
    Subscriber *s = obj;
    if (rc != 0) {
        fprintf(stderr, "mqttload: CONNACK refused: %s\n", mosquitto_connack_string(rc));
        exit(1);
    }
    rc = mosquitto_subscribe_multiple(mosq, NULL, s->topics, s->topic, 0, 0, NULL);
    if (rc != MOSQ_ERR_SUCCESS) fail("subscribe", rc);
}

static void on_subscribe(struct mosquitto *mosq, void *obj, int mid, int count, const int *qos) {
    ((Subscriber *)obj)->subscribed = 1;
}

static void on_disconnect(struct mosquitto *mosq, void *obj, int rc) {
    ((Subscriber *)obj)->lost = 1;
}

static void on_message(struct mosquitto *mosq, void *obj, const struct mosquitto_message *m) {
    Subscriber *s = obj;
    double at = now();
    if (at < window_start || at > window_end || m->payloadlen < HEADER) return;
    const unsigned char *p = m->payload;
    int64_t tick;
    double sent;
    memcpy(&tick, p, 8);
    memcpy(&sent, p + 8, 8);
    long rows = (m->payloadlen - HEADER) / ROW, useful = 0;
    for (long i = 0; i < rows; i++) {
        float x, y;
        memcpy(&x, p + HEADER + i * ROW + 8, 4);
        memcpy(&y, p + HEADER + i * ROW + 12, 4);
        useful += x >= s->box[0] && x < s->box[2] && y >= s->box[1] && y < s->box[3];
    }
    if (tick != s->last_tick) s->ticks++;
    s->last_tick = tick;
    s->rows += rows;
    s->useful += useful;
    s->messages++;
    if (latency_count == latency_capacity) {
        latency_capacity = latency_capacity ? 2 * latency_capacity : 1 << 16;
        latencies = realloc(latencies, latency_capacity * sizeof *latencies);
        if (!latencies) exit(2);
    }
    latencies[latency_count++] = (float)((at - sent) * 1e3);
}

static void watch(int epoll, Subscriber *s, int op) {
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = s};
    if (mosquitto_want_write(s->mosq)) event.events |= EPOLLOUT;
    epoll_ctl(epoll, op, s->fd, &event);
}

static void serve(Subscriber *s, int epoll, uint32_t events) {
    if (events & EPOLLOUT) mosquitto_loop_write(s->mosq, 1);
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        /* libmosquitto reads about one packet a call, and says it found the socket empty by
         * leaving errno at EAGAIN: go on until it does (at most 256 packets a turn). */
        for (int n = 0; n < 256; n++) {
            errno = 0;
            if (mosquitto_loop_read(s->mosq, 1) != MOSQ_ERR_SUCCESS) {
                s->lost = 1;
                epoll_ctl(epoll, EPOLL_CTL_DEL, s->fd, NULL);
                return;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        }
    }
    watch(epoll, s, EPOLL_CTL_MOD);
}

static void report(Subscriber *subs, int count) {
    for (int i = 0; i < count; i++) {
        Subscriber *s = &subs[i];
        printf("{\"ticks\": %ld, \"rows\": %ld, \"useful\": %ld, \"messages\": %ld, "
               "\"bytes\": %llu, \"lost\": %d}\n",
               s->ticks, s->rows, s->useful, s->messages,
               (unsigned long long)(s->bytes_at_end - s->bytes_at_start), s->lost);
    }
    printf("{\"latencies_ms\": [");
    for (size_t i = 0; i < latency_count; i++) printf(i ? ",%.3f" : "%.3f", latencies[i]);
    printf("]}\n");
    fflush(stdout);
}

static int subscribe_main(const char *host, int port) {
    int count;
    if (scanf("%d", &count) != 1 || count <= 0) {
        fprintf(stderr, "mqttload: expected the number of subscribers on stdin\n");
        return 1;
    }
    Subscriber *subs = calloc(count, sizeof *subs);
    int epoll = epoll_create1(0);
    for (int i = 0; i < count; i++) {
        Subscriber *s = &subs[i];
        if (scanf("%f %f %f %f %d", &s->box[0], &s->box[1], &s->box[2], &s->box[3], &s->topics) != 5)
            return fprintf(stderr, "mqttload: bad subscriber line %d\n", i), 1;
        s->topic = calloc(s->topics, sizeof *s->topic);
        for (int t = 0; t < s->topics; t++)
            if (scanf("%ms", &s->topic[t]) != 1) return fprintf(stderr, "mqttload: bad topic\n"), 1;
        char id[64];
        snprintf(id, sizeof id, "load-%d-%d", (int)getpid(), i);
        s->mosq = mosquitto_new(id, true, s);
        s->last_tick = -1;
        mosquitto_connect_callback_set(s->mosq, on_connect);
        mosquitto_subscribe_callback_set(s->mosq, on_subscribe);
        mosquitto_disconnect_callback_set(s->mosq, on_disconnect);
        mosquitto_message_callback_set(s->mosq, on_message);
        int rc = mosquitto_connect(s->mosq, host, port, 0);
        if (rc != MOSQ_ERR_SUCCESS) fail("connect", rc);
        s->fd = mosquitto_socket(s->mosq);
        watch(epoll, s, EPOLL_CTL_ADD);
    }
    struct epoll_event input = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epoll, EPOLL_CTL_ADD, STDIN_FILENO, &input);
    int ready = 0, started = 0;
    double drain = 0;
    struct epoll_event events[512];
    for (;;) {
        int n = epoll_wait(epoll, events, 512, 50);
        for (int e = 0; e < n; e++) {
            if (events[e].data.ptr == NULL) {
                char line[256];
                if (!fgets(line, sizeof line, stdin)) return 0; /* the coordinator is gone */
                if (line[0] == '\n') continue; /* the end of the last subscriber's line */
                if (sscanf(line, "window %lf %lf %lf", &window_start, &window_end, &drain) != 3)
                    return fprintf(stderr, "mqttload: expected a window, got %s", line), 1;
                continue;
            }
            serve(events[e].data.ptr, epoll, events[e].events);
        }
        double at = now();
        if (!ready) {
            int subscribed = 0;
            for (int i = 0; i < count; i++) subscribed += subs[i].subscribed;
            if (subscribed == count) {
                printf("{\"ready\": %d}\n", count);
                fflush(stdout);
                ready = 1;
            }
        }
        if (!started && at >= window_start) {
            for (int i = 0; i < count; i++) subs[i].bytes_at_start = bytes_received(subs[i].fd);
            started = 1;
        }
        if (started == 1 && at >= window_end) {
            for (int i = 0; i < count; i++) subs[i].bytes_at_end = bytes_received(subs[i].fd);
            started = 2;
        }
        if (started == 2 && at >= window_end + drain) {
            report(subs, count);
            return 0;
        }
    }
}

static int connected;

static void on_publisher_connect(struct mosquitto *mosq, void *obj, int rc) {
    if (rc != 0) {
        fprintf(stderr, "mqttload: CONNACK refused: %s\n", mosquitto_connack_string(rc));
        exit(1);
    }
    connected = 1;
}

static int read_all(void *into, size_t size) {
    return fread(into, 1, size, stdin) == size;
}

static int publish_main(const char *host, int port, int side) {
    struct mosquitto *mosq = mosquitto_new(NULL, true, NULL);
    mosquitto_connect_callback_set(mosq, on_publisher_connect);
    int rc = mosquitto_connect(mosq, host, port, 0);
    if (rc != MOSQ_ERR_SUCCESS) fail("connect", rc);
    while (!connected)
        if ((rc = mosquitto_loop(mosq, 100, 1)) != MOSQ_ERR_SUCCESS) fail("CONNACK", rc);
    /* No loop thread: each mosquitto_publish writes its packet at once (a thread woken per
     * message cost a third of a core); corked, a tick's 1,024 writes leave in full segments. */
    int fd = mosquitto_socket(mosq), on = 1, off = 0;
    printf("{\"ready\": 1}\n");
    fflush(stdout);
    int cells = side * side;
    uint32_t *bounds = malloc((cells + 1) * sizeof *bounds);
    static unsigned char payload[HEADER + 65536 * ROW];
    unsigned char *rows = NULL;
    size_t capacity = 0;
    char topic[64];
    for (;;) {
        uint32_t count;
        if (!read_all(&count, 4)) break; /* the end of the run */
        if (!read_all(payload, HEADER) || !read_all(bounds, (cells + 1) * 4)) return 1;
        if (count * (size_t)ROW > capacity) {
            capacity = count * (size_t)ROW;
            rows = realloc(rows, capacity);
        }
        if (!read_all(rows, count * (size_t)ROW)) return 1;
        setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
        for (int n = 0; n < cells; n++) {
            size_t size = (size_t)(bounds[n + 1] - bounds[n]) * ROW;
            if (size > sizeof payload - HEADER) return fprintf(stderr, "mqttload: cell too full\n"), 1;
            memcpy(payload + HEADER, rows + (size_t)bounds[n] * ROW, size);
            snprintf(topic, sizeof topic, "cells/%d/%d", n / side, n % side);
            rc = mosquitto_publish(mosq, NULL, topic, (int)(HEADER + size), payload, 0, false);
            if (rc != MOSQ_ERR_SUCCESS) fail("publish", rc);
        }
        while (mosquitto_want_write(mosq)) /* what a full socket buffer left queued */
            if ((rc = mosquitto_loop(mosq, 100, 1)) != MOSQ_ERR_SUCCESS) fail("write", rc);
        setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
        if ((rc = mosquitto_loop_misc(mosq)) != MOSQ_ERR_SUCCESS) fail("loop_misc", rc);
    }
    mosquitto_disconnect(mosq);
    return 0;
}

int main(int argc, char **argv) {
    mosquitto_lib_init();
    if (argc == 4 && strcmp(argv[1], "subscribe") == 0) return subscribe_main(argv[2], atoi(argv[3]));
    if (argc == 5 && strcmp(argv[1], "publish") == 0)
        return publish_main(argv[2], atoi(argv[3]), atoi(argv[4]));
    fprintf(stderr, "usage: mqttload subscribe HOST PORT | mqttload publish HOST PORT SIDE\n");
    return 2;
}
