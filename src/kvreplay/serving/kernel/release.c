/* Closed-loop arrivals (docs/sessions.md): a request is sent when the requests it waits for have
 * been answered (or sent, for a link that fires on the send), plus the link's delay: a session's
 * next turn waits for its previous answer and its think time; an agent's request waits for the
 * subagents whose results it reads; a lane's next session waits for the end of its previous one
 * (serving/closed.py builds those links from the trace).
 *
 * Each request keeps a count of the links it still waits for (waits_left) and the latest time one
 * of them released it to (ready_at). When a request is released (its client sends it, at its
 * engine time less send_delay_s: the host's API server in between) or ends (release_ended:
 * finished, rejected or refused: a client that got an error goes on), its links of that kind fire:
 * each target counts one down and takes max(ready_at, the time + the link's delay); one that
 * reaches 0 is sent at its ready_at. (Firing on the client's send, when the release is known, lets
 * a subagent reach the engine before its parent's request does, as two clients' requests can.) Released requests wait in a heap by send time, then by request (the
 * lower first), which the event loop reads as it reads the trace's arrivals in the open loop. The
 * open loop (cfg CLOSED 0) uses none of this: release_ended only counts.
 *
 * Lanes (N concurrent sessions, serving/lanes.py): the sessions beyond the first N wait in
 * lane_queue, in draw order, each first request counting one wait for a lane; when a session's
 * last request ends, its lane takes the next of them (a load generator's pool of N users), which
 * reaches the engine its lane_delay_s later (the host's API server, as every request's links add). */
#include <math.h>
#include <stdlib.h>

#include "sim.h"

static inline int before(const Sim *s, i64 a, i64 b) {
    return s->rel_t[a] < s->rel_t[b] || (s->rel_t[a] == s->rel_t[b] && s->rel_i[a] < s->rel_i[b]);
}

static inline void swap(Sim *s, i64 a, i64 b) {
    f64 t = s->rel_t[a];
    s->rel_t[a] = s->rel_t[b];
    s->rel_t[b] = t;
    i64 i = s->rel_i[a];
    s->rel_i[a] = s->rel_i[b];
    s->rel_i[b] = i;
}

static void push(Sim *s, f64 t, i64 i) {
    i64 k = s->rel_n++;
    s->rel_t[k] = t;
    s->rel_i[k] = i;
    while (k > 0) {
        i64 parent = (k - 1) / 2;
        if (before(s, parent, k)) break;
        swap(s, parent, k);
        k = parent;
    }
}

i64 release_pop(Sim *s) {
    i64 top = s->rel_i[0];
    s->rel_n -= 1;
    s->rel_t[0] = s->rel_t[s->rel_n];
    s->rel_i[0] = s->rel_i[s->rel_n];
    for (i64 k = 0;;) {
        i64 a = 2 * k + 1, b = a + 1, c = a;
        if (a >= s->rel_n) break;
        if (b < s->rel_n && before(s, b, a)) c = b;
        if (before(s, k, c)) break;
        swap(s, c, k);
        k = c;
    }
    return top;
}

f64 release_next_t(const Sim *s) { return s->rel_n > 0 ? s->rel_t[0] : INFINITY; }

static void fire(Sim *s, i64 i, int on_send, f64 t);

/* request i is released to reach the engine at t: queued, and its links that fire on its client's
 * send fire at that send */
static void released(Sim *s, f64 t, i64 i) {
    push(s, t, i);
    SimIO *io = s->io;
    fire(s, i, 1, t - (i < io->send_delay_s_n ? io->send_delay_s[i] : 0.0));
}

void release_setup(Sim *s) {
    SimIO *io = s->io;
    s->closed = io->cfg[CLOSED] != 0;
    if (!s->closed) return;
    i64 n = s->n;
    s->waits_left = malloc((size_t)(n > 0 ? n : 1) * sizeof(i64));
    s->ready_at = malloc((size_t)(n > 0 ? n : 1) * sizeof(f64));
    s->rel_t = malloc((size_t)(n > 0 ? n : 1) * sizeof(f64));
    s->rel_i = malloc((size_t)(n > 0 ? n : 1) * sizeof(i64));
    for (i64 i = 0; i < n; i++) {
        s->waits_left[i] = io->waits[i];
        s->ready_at[i] = -INFINITY;
    }
    for (i64 i = 0; i < n; i++)
        if (io->waits[i] == 0) released(s, io->arrival[i], i);
    if (io->session_n == n && n > 0) {
        i64 sessions = 0;
        for (i64 i = 0; i < n; i++) sessions = kv_max(sessions, io->session[i] + 1);
        s->session_left = calloc((size_t)sessions, sizeof(i64));
        for (i64 i = 0; i < n; i++) s->session_left[io->session[i]] += 1;
    }
}

/* one of request k's links fired, releasing it to time t; when none is left it is sent at the
 * latest such time */
static void count_down(Sim *s, i64 k, f64 t) {
    if (t > s->ready_at[k]) s->ready_at[k] = t;
    if (--s->waits_left[k] == 0) released(s, s->ready_at[k], k);
}

/* request i's links that fire on its send (on_send 1) or on its end (0), at time t */
static void fire(Sim *s, i64 i, int on_send, f64 t) {
    SimIO *io = s->io;
    for (i64 e = io->next_offsets[i]; e < io->next_offsets[i + 1]; e++)
        if ((io->next_on_send[e] != 0) == on_send) count_down(s, io->next_ids[e], t + io->next_delay_s[e]);
}

void release_sent(Sim *s, i64 i) { (void)s, (void)i; /* (its send's links fired on its release) */ }

void release_teardown(Sim *s) {
    free(s->waits_left);
    free(s->rel_t);
    free(s->rel_i);
    free(s->ready_at);
    free(s->session_left);
}

void release_ended(Sim *s, i64 i) { release_ended_at(s, i, s->now); }

/* request i ended at `t` as its client sees it (a finished one: its last token out of the host's
 * output path, timing/host.py) */
void release_ended_at(Sim *s, i64 i, f64 t) {
    s->done += 1;
    if (!s->closed) return;
    SimIO *io = s->io;
    fire(s, i, 0, t);
    if (s->session_left != NULL && --s->session_left[io->session[i]] == 0 && s->lane_next < io->lane_queue_n) {
        i64 k = s->lane_next++; /* the session ended: its lane takes the next one, which reaches the engine */
        count_down(s, io->lane_queue[k], t + (k < io->lane_delay_s_n ? io->lane_delay_s[k] : 0.0)); /* its delay on */
    }
}
