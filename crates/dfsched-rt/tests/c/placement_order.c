/*
 * The shape of the held-out client of issue 9, built and run by
 * tests/c_abi.rs: 8 threads in 2 DFs, each hints once as it starts and then
 * works (spins). Each reads its own mask twice:
 *   early  at 30 % of its work, as the held-out client did, together with
 *          how many hints had returned before the read;
 *   late   once all 8 hints have returned, every thread still running.
 * One line per thread:
 *   thread <i> df=<d> early=<cpus> early_hinted=<k> late=<cpus>
 * Usage: placement_order [work iterations per thread]
 */
#define _GNU_SOURCE
#include <dfsched.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 8

static uint64_t app;
static long work = 10000000L;
static atomic_int hinted, read_late;

struct seen {
    int rc;
    int early_hinted;
    char early[64], late[64];
};
static struct seen seen[THREADS];

/* The calling thread's CPUs as "0,1,…". */
static void my_cpus(char *buf, size_t len) {
    cpu_set_t set;
    size_t used = 0;
    buf[0] = '\0';
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        snprintf(buf, len, "error");
        return;
    }
    for (int cpu = 0; cpu < CPU_SETSIZE && used + 8 < len; cpu++) {
        if (CPU_ISSET(cpu, &set)) {
            used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? "," : "", cpu);
        }
    }
}

static void *worker(void *arg) {
    int i = (int)(intptr_t)arg;
    struct seen *me = &seen[i];
    me->rc = dfsched_hint(app, 0, (uint64_t)(1 + i % 2));
    atomic_fetch_add(&hinted, 1);
    volatile uint64_t x = 0;
    for (long k = 0; k < work; k++) {
        x += (uint64_t)k;
        if (k == work * 3 / 10) {
            /* The count first: if it says 8, every hint returned before
             * the mask was read. */
            me->early_hinted = atomic_load(&hinted);
            my_cpus(me->early, sizeof me->early);
        }
    }
    /* Runnable until every hint has returned, then the late read, then
     * runnable until every thread has read (no exit moves anyone). */
    while (atomic_load(&hinted) < THREADS) {
        sched_yield();
    }
    my_cpus(me->late, sizeof me->late);
    atomic_fetch_add(&read_late, 1);
    while (atomic_load(&read_late) < THREADS) {
        sched_yield();
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        work = atol(argv[1]);
    }
    int rc = dfsched_app_create(&app);
    if (rc != DFSCHED_OK) {
        printf("app_create rc=%d %s\n", rc, dfsched_last_error());
        return 1;
    }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    for (int i = 0; i < THREADS; i++) {
        printf("thread %d df=%d rc=%d early=%s early_hinted=%d late=%s\n", i, 1 + i % 2,
               seen[i].rc, seen[i].early, seen[i].early_hinted, seen[i].late);
    }
    return 0;
}
