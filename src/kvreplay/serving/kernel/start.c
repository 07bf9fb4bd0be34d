/* A request's start: the one transition every admission path ends with (requests.c's block-level
 * pools, hybrid.c's groups, sglang.c's radix pools), below them all (sim.h declares it). */
#include "sim.h"

/* Request i was admitted with `hit` tokens cached (hit_blocks through the tiers): its first
 * schedule is recorded (a recomputation after a preemption is counted apart), and it runs. A
 * request whose KV came from a prefill instance starts decoding: everything but its next token is
 * in KV. */
void req_started(Sim *s, i64 j, i64 i, i64 hit, i64 hit_blocks) {
    SimIO *io = s->io;
    if (s->kv_in[i]) {
        s->kv_in[i] = 0;
        io->status[i] = RUNNING;
        s->computed[i] = s->target[i] - 1;
        s->decoding[i] = 1;
        return;
    }
    if (io->preemptions[i] == 0) {
        io->scheduled_s[i] = s->now;
        io->hit_tokens[i] = hit;
        io->hit_blocks[i] = hit_blocks;
        s->inst[j].counters[first_hit_tokens] += hit;
        s->inst[j].counters[first_prompt_tokens] += io->L[i];
    } else {
        s->inst[j].counters[recomputed_tokens] += s->target[i] - hit;
    }
    io->status[i] = RUNNING;
    /* the last prompt token is always computed (it gives the first token's logits), even when a
     * block-level policy hit the whole prompt */
    s->computed[i] = hit < s->target[i] ? hit : s->target[i] - 1;
}
