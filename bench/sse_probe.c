/* sse_probe: open N streaming HTTP requests at once and record when each SSE event arrives.
 *
 * A load generator that keeps up with the server (issue 13): the Python asyncio client of
 * timing_fidelity.py spends ~30 us per received chunk, a whole core at 30k chunks/s on the
 * machine the server runs on, and its own lag shows up as server ITL error.  This one is an
 * epoll loop in C.  bench/timing_fidelity.py builds it with the system C compiler when one is
 * there (--client c, the default when it builds) and reads its output.
 *
 *   sse_probe HOST PORT N REQUEST_FILE OUT_FILE [WARM_MS [WAVES]]
 *
 * REQUEST_FILE holds the whole HTTP request (with "Connection: close", or for WAVES > 1 a
 * keep-alive one).  The N connections are opened back to back, each request written as soon
 * as its connection is up; with WARM_MS, all connections are opened first and the requests
 * written WARM_MS later, back to back.  With WAVES > 1, once every stream of a wave has ended
 * (its chunked terminator), the request is written again on every connection, back to back, as
 * a pooled client running fixed-length requests at a fixed concurrency does; only the last
 * wave is recorded.  OUT_FILE gets one
 * line per stream: the time its request was written, then the arrival time of each SSE event
 * ("data: " occurrences, so the simulated text must not contain that string: it does not),
 * CLOCK_MONOTONIC seconds (Python's time.monotonic).  OUT_FILE.kernel gets the same lines with,
 * for each event, when the kernel received the bytes of the read that brought it (SO_TIMESTAMPNS,
 * the last segment of that read, moved to CLOCK_MONOTONIC): the probe's own delay in reading
 * is not in it, so the two files tell the server's lateness from the client's.  Exit status 1 if
 * a socket could not be opened or a stream did not end within 60 s of silence (the file is then
 * partial or absent).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    int sent;            /* bytes of the request written */
    double t_sent;
    double *events;
    double *kernel;      /* the kernel's receive time of the read that brought each event (SO_TIMESTAMPNS) */
    int n_events, cap;
    char tail[6];        /* the last bytes read, for a "data: " split across reads */
    int tail_len;
    char end[7];         /* the last 7 bytes read: a chunked response ends with "\r\n0\r\n\r\n" */
    int end_len;
    int done;
} stream_t;

/* Whether this read ends the response (keep-alive waves: chunked encoding's last chunk). */
static int ends_response(stream_t *s, const char *buf, int len) {
    static const char term[] = "\r\n0\r\n\r\n";
    char joined[14];
    int keep = len < 7 ? len : 7, have = s->end_len + keep > 7 ? 7 - keep : s->end_len;
    memcpy(joined, s->end + s->end_len - have, have);
    memcpy(joined + have, buf + len - keep, keep);
    s->end_len = have + keep;
    memcpy(s->end, joined, s->end_len);
    return s->end_len == 7 && memcmp(s->end, term, 7) == 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double realtime_offset(void) {      /* CLOCK_REALTIME - CLOCK_MONOTONIC, seconds */
    struct timespec r, m;
    clock_gettime(CLOCK_MONOTONIC, &m);
    clock_gettime(CLOCK_REALTIME, &r);
    return (r.tv_sec - m.tv_sec) + (r.tv_nsec - m.tv_nsec) * 1e-9;
}

/* read() that also returns the kernel's receive time of the bytes (monotonic seconds; 0 if none) */
static int read_stamped(int fd, char *buf, int size, double offset, double *stamp) {
    struct iovec iov = {.iov_base = buf, .iov_len = size};
    char control[256];
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    int r = recvmsg(fd, &msg, 0);
    *stamp = 0;
    if (r > 0)
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof ts);
                *stamp = ts.tv_sec + ts.tv_nsec * 1e-9 - offset;
            }
    return r;
}

/* "data: " has no border (no prefix that is also a suffix): occurrences never overlap, and one
 * that starts in the last 5 bytes of a read is incomplete there, so keeping those 5 bytes in
 * front of the next read counts every event exactly once. */
static int count_events(stream_t *s, const char *buf, int len) {
    static const char pat[] = "data: ";
    static char joined[5 + 65536];
    memcpy(joined, s->tail, s->tail_len);
    memcpy(joined + s->tail_len, buf, len);
    int total = s->tail_len + len, n = 0;
    for (int i = 0; i + 6 <= total; i++)
        if (joined[i] == 'd' && memcmp(joined + i, pat, 6) == 0) { n++; i += 5; }
    s->tail_len = total < 5 ? total : 5;
    memcpy(s->tail, joined + total - s->tail_len, s->tail_len);
    return n;
}

/* One line per stream: when its request was written, then each event's time (read or kernel). */
static int write_times(const char *path, stream_t *streams, int n, int kernel) {
    FILE *out = fopen(path, "w");
    if (!out) { perror("out file"); return 1; }
    for (int i = 0; i < n; i++) {
        fprintf(out, "%.9f", streams[i].t_sent);
        for (int e = 0; e < streams[i].n_events; e++)
            fprintf(out, " %.9f", kernel ? streams[i].kernel[e] : streams[i].events[e]);
        fputc('\n', out);
    }
    fclose(out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 6 || argc > 8) {
        fprintf(stderr, "usage: %s HOST PORT N REQUEST_FILE OUT_FILE [WARM_MS [WAVES]]\n", argv[0]);
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]), n = atoi(argv[3]);
    FILE *rf = fopen(argv[4], "rb");
    if (!rf) { perror("request file"); return 2; }
    static char req[65536];
    int req_len = fread(req, 1, sizeof req, rf);
    fclose(rf);

    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "not an IPv4 address: %s\n", host);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);               /* a reset connection is a failed stream, not our death */
    struct rlimit rl;                       /* N sockets: raise the soft limit on descriptors */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)n + 64 ? rl.rlim_max : (rlim_t)n + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    int ep = epoll_create1(0);
    stream_t *streams = calloc(n, sizeof *streams);
    for (int i = 0; i < n; i++) {
        stream_t *s = &streams[i];
        s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (s->fd < 0) { perror("socket"); return 1; }
        int one = 1;
        setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(s->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
        if (connect(s->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
            perror("connect"); return 1;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
    }
    int open_streams = n;
    static char buf[65536];
    struct epoll_event evs[256];
    int warm_ms = argc >= 7 ? atoi(argv[6]) : 0;
    int waves = argc == 8 ? atoi(argv[7]) : 1, wave = 1, ended = 0;
    if (warm_ms > 0) {
        /* Open every connection first, let the server accept them, then send all the requests
         * at once: a burst of requests on open connections, without the accept in it. */
        int connected = 0;
        while (connected < n) {
            int k = epoll_wait(ep, evs, 256, 60000);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) { fprintf(stderr, "connections not up after 60 s\n"); return 1; }
            for (int j = 0; j < k; j++) {
                struct epoll_event ev = {.events = 0, .data.u32 = evs[j].data.u32};
                epoll_ctl(ep, EPOLL_CTL_MOD, streams[evs[j].data.u32].fd, &ev);
                connected++;
            }
        }
        usleep(warm_ms * 1000);
        for (int i = 0; i < n; i++) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = i};
            epoll_ctl(ep, EPOLL_CTL_MOD, streams[i].fd, &ev);
        }
    }
    while (open_streams > 0) {
        int k = epoll_wait(ep, evs, 256, 60000);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { fprintf(stderr, "no event for 60 s with %d streams open\n", open_streams); break; }
        double t = now(), offset = realtime_offset();
        for (int j = 0; j < k; j++) {
            stream_t *s = &streams[evs[j].data.u32];
            if (s->done) continue;
            if ((evs[j].events & EPOLLOUT) && s->sent < req_len) {
                if (s->sent == 0) s->t_sent = now();
                int w = write(s->fd, req + s->sent, req_len - s->sent);
                if (w > 0) s->sent += w;
                if (s->sent == req_len) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = evs[j].data.u32};
                    epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
                }
            }
            if (evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                for (;;) {
                    double stamp;
                    int r = read_stamped(s->fd, buf, sizeof buf, offset, &stamp);
                    if (r > 0) {
                        int m = count_events(s, buf, r);
                        if (s->n_events + m > s->cap) {
                            s->cap = (s->cap + m) * 2;
                            s->events = realloc(s->events, s->cap * sizeof(double));
                            s->kernel = realloc(s->kernel, s->cap * sizeof(double));
                            if (!s->events || !s->kernel) { perror("realloc"); return 1; }
                        }
                        for (int e = 0; e < m; e++) {
                            s->kernel[s->n_events] = stamp > 0 ? stamp : t;
                            s->events[s->n_events++] = t;
                        }
                        if (waves > 1 && ends_response(s, buf, r) && wave < waves && ++ended == n) {
                            /* every stream of this wave has ended: the next wave, all at once */
                            wave++;
                            ended = 0;
                            for (int i = 0; i < n; i++) {
                                stream_t *o = &streams[i];
                                o->n_events = o->tail_len = o->end_len = 0;
                                o->t_sent = now();
                                if (write(o->fd, req, req_len) != req_len) {
                                    fprintf(stderr, "wave %d: request not written at once\n", wave);
                                    return 1;
                                }
                            }
                        }
                        if (waves > 1 && wave == waves && s->end_len == 7 &&
                            memcmp(s->end, "\r\n0\r\n\r\n", 7) == 0) {
                            s->done = 1;               /* the last wave's response is complete */
                            open_streams--;
                            epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
                            close(s->fd);
                            break;
                        }
                        continue;
                    }
                    if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                        s->done = 1;
                        open_streams--;
                        epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
                        close(s->fd);
                    }
                    break;
                }
            }
        }
    }
    char kpath[4096];
    snprintf(kpath, sizeof kpath, "%s.kernel", argv[5]);
    if (write_times(argv[5], streams, n, 0) || write_times(kpath, streams, n, 1)) return 2;
    return open_streams > 0;
}
