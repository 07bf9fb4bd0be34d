/* The vLLM v1 scheduler style (docs/engines.md, "vLLM v1" cites vllm/v1/core/sched/scheduler.py):
 * running requests first, in admission order, each as many tokens as the budget leaves (a
 * prefill chunk, or 1 to decode); when one needs a block and none is free, the newest running
 * request is preempted (possibly itself) and goes back to the front of the waiting queue; waiting
 * requests join, first come first served, only in a step that preempted nothing. */
#include "sim.h"

/* Preempt the newest running request of instance j: its blocks are released, and it waits at the
 * front of the queue to recompute its prompt and the tokens it generated. Returns it. */
static i64 preempt_newest(Sim *s, i64 j, i64 *budget) {
    Inst *q = &s->inst[j];
    i64 victim = q->running[q->nrun - 1];
    q->nrun -= 1;
    i64 given = req_take_back(s, j, victim);
    /* (a victim scheduled this step gives back its tokens and its drafting slots: scheduler.py:950-955) */
    *budget += given + (given > 0 ? s->io->cfg[SPEC_DRAFT_SLOTS] : 0);
    queue_push_front(s, q, victim);
    return victim;
}

void vllm_schedule(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    const i64 *cfg = s->io->cfg;
    /* the input budget (scheduler.py:721-722): each scheduled request also takes the drafter's new
     * slots in the batch (SPEC_DRAFT_SLOTS: max_num_new_slots_for_drafting, speculative.py:2058-2097,
     * 1 for a draft model, else 0) */
    i64 budget = cfg[MAX_BATCHED], slots = cfg[SPEC_DRAFT_SLOTS];
    int preempted = 0;
    int mamba = s->mode == MODE_HYBRID && hyb_mamba(s);
    if (s->mode == MODE_HYBRID) hyb_step_starts(s, j);
    /* 1. running requests first, in admission order */
    for (i64 r = 0; r < q->nrun && budget > slots;) {
        i64 i = q->running[r];
        /* speculative decoding: a decoding request is scheduled with its k draft tokens (vLLM
         * 0.33.0 scheduler.py:839-848, num_tokens_with_spec - num_computed_tokens, within the token
         * budget), at most up to max_model_len (:852-857) */
        i64 want_new = s->computed[i] < s->target[i] ? kv_min(s->target[i] - s->computed[i], budget - slots) : 1;
        if (cfg[SPEC_K] > 0 && s->decoding[i]) {
            want_new = kv_min(1 + cfg[SPEC_K], budget - slots);
            if (cfg[MAX_MODEL_LEN] > 0) want_new = kv_max(1, kv_min(want_new, cfg[MAX_MODEL_LEN] - s->computed[i] - 1));
        }
        if (mamba && (want_new = hyb_split(s, i, s->computed[i], want_new)) == 0) {
            r++; /* no block-aligned chunk fits the budget: it waits a step (scheduler.py:890) */
            continue;
        }
        int ok = 1;
        /* KV for the scheduled tokens and the drafter's lookahead slots (allocate_slots with
         * num_lookahead_tokens: scheduler.py:914-918; vllm.py:626-652: k for EAGLE, MTP and a
         * draft model, 0 for n-gram) */
        while (!req_grow(s, j, i, s->computed[i] + want_new + cfg[SPEC_LOOKAHEAD])) {
            if (s->failed) return;
            preempted = 1;
            if (preempt_newest(s, j, &budget) == i) {
                ok = 0;
                break;
            }
        }
        if (!ok) break;
        s->new_tokens[i] = want_new;
        budget -= want_new + slots;
        r++;
    }
    if (preempted) return;
    /* 2. waiting requests, first come first served; the head that cannot start stops the loop.
     * Without chunked prefill a prompt waits for a step with room for all of it (unless nothing
     * runs: vLLM would wait forever, as it requires a budget of max_model_len then) */
    while (q->qlen > 0 && budget > slots && q->nrun < cfg[MAX_SEQS]) {
        i64 i = q->qhead;
        i64 n = req_admit(s, j, i, budget - slots, cfg[CHUNKED] != 0 || q->nrun == 0);
        if (n <= 0) break;
        queue_pop_front(s, q);
        q->running[q->nrun++] = i;
        s->new_tokens[i] = n;
        budget -= n + slots;
    }
}
