/* The routers that read the instances' state (router.h): one line each. Python reads this list
 * (names, aliases, parameters) through kv_router_count / kv_router_info. */
#include "router.h"

extern const KvRouterKind kv_router_least_loaded, kv_router_kv_aware, kv_router_sglang, kv_router_llm_d,
    kv_router_mooncake, kv_router_vllm_dp;

const KvRouterKind *const kv_routers[] = {
    &kv_router_least_loaded,
    &kv_router_kv_aware,
    &kv_router_sglang,
    &kv_router_llm_d,
    &kv_router_mooncake,
    &kv_router_vllm_dp,
    NULL,
};

KV_EXPORT i64 kv_router_count(void) {
    i64 n = 0;
    while (kv_routers[n] != NULL) n++;
    return n;
}

/* "name|aliases|params" of router k */
KV_EXPORT const char *kv_router_name(i64 k) { return kv_routers[k]->name; }
KV_EXPORT const char *kv_router_aliases(i64 k) { return kv_routers[k]->aliases; }
KV_EXPORT const char *kv_router_params(i64 k) { return kv_routers[k]->params; }
