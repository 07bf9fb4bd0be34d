/* What the simulator measures as it goes: the inter-token gaps (a log histogram), the cluster's
 * time series (thinned by doubling its stride when full), per-instance peaks. */
#include <math.h>

#include "sim.h"

/* the inter-token histogram's bins, for Python to read it */
KV_EXPORT const f64 kv_itl_min_s = ITL_MIN_S;
KV_EXPORT const f64 kv_itl_ratio = ITL_RATIO;

void metrics_token_gap(Sim *s, f64 gap) {
    f64 *itl = s->io->itl;
    i64 bins = s->io->itl_n - ITL_HEAD;
    itl[ITL_SUM] += gap;
    itl[ITL_COUNT] += 1;
    if (gap > itl[ITL_MAX]) itl[ITL_MAX] = gap;
    if (gap != s->itl_gap) {
        i64 k = 0;
        if (gap > ITL_MIN_S) {
            /* bounded before the cast: an infinite or huge gap lands in the last bin */
            f64 x = log(gap / ITL_MIN_S) / log(ITL_RATIO) + 1.0;
            k = x < (f64)(bins - 1) ? (i64)x : bins - 1;
        }
        s->itl_gap = gap;
        s->itl_bin = k;
    }
    itl[ITL_HEAD + s->itl_bin] += 1;
}

/* one row of the whole cluster after a step, every `stride` steps */
void metrics_series(Sim *s) {
    SimIO *io = s->io;
    i64 cap = io->series_n / NUM_SERIES;
    s->steps_all += 1;
    if (s->steps_all % s->stride != 0) return;
    f64 *series = io->series;
    if (s->nseries == cap) {
        for (i64 r = 0; r < cap / 2; r++)
            for (i64 c = 0; c < NUM_SERIES; c++) series[r * NUM_SERIES + c] = series[(2 * r + 1) * NUM_SERIES + c];
        s->nseries = cap / 2;
        s->stride *= 2;
    }
    f64 *row = series + s->nseries * NUM_SERIES;
    i64 run = 0, wait = 0, held = 0, hit = 0, prompt = 0;
    for (i64 q = 0; q < s->N; q++) {
        run += s->inst[q].nrun;
        wait += s->inst[q].qlen;
        held += req_held(s, q);
        hit += s->inst[q].counters[first_hit_tokens];
        prompt += s->inst[q].counters[first_prompt_tokens];
    }
    row[S_TIME] = s->now;
    row[S_RUNNING] = (f64)run;
    row[S_WAITING] = (f64)wait;
    row[S_HELD] = (f64)held;
    row[S_HIT] = (f64)hit;
    row[S_PROMPT] = (f64)prompt;
    s->nseries += 1;
}

void metrics_peaks(Sim *s, i64 j) {
    i64 *c = s->inst[j].counters;
    i64 held = req_held(s, j);
    if (held > c[peak_held_blocks]) c[peak_held_blocks] = held;
    if (s->inst[j].nrun > c[peak_running]) c[peak_running] = s->inst[j].nrun;
}
