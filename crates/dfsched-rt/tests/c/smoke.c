/*
 * A C program using dfsched.h, built and run by tests/c_abi.rs, which checks
 * its output. Modes (argv[1]):
 *   ok        4 threads in 2 DFs, then every bad input, then the counters
 *   badenv    run with a bad DFSCHED_* variable: every call fails, the
 *             program goes on
 *   disabled  run with DFSCHED_DISABLE=1: every call succeeds, nothing moves
 */
#define _GNU_SOURCE
#include <dfsched.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#define WORKERS 4

static pthread_barrier_t registered, entered, printed;
static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cond = PTHREAD_COND_INITIALIZER;
static uintptr_t turn;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

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

/* Worker i: registers (a hint to no DF), then, when every worker has
 * registered, enters DF 1 + i % 2 in index order, so the engine sees a fixed
 * sequence of events with the whole load known. */
static void *worker(void *arg) {
    uintptr_t i = (uintptr_t)arg;
    uint64_t df = 1 + i % 2;
    char cpus[256];
    int reg = dfsched_leave();
    int rc, again;
    pthread_barrier_wait(&registered);
    pthread_mutex_lock(&turn_lock);
    while (turn != i) pthread_cond_wait(&turn_cond, &turn_lock);
    rc = dfsched_enter(df);
    turn++;
    pthread_cond_broadcast(&turn_cond);
    pthread_mutex_unlock(&turn_lock);
    /* A repeated enter is the fast path. */
    again = dfsched_enter(df);
    pthread_barrier_wait(&entered);
    my_cpus(cpus, sizeof cpus);
    pthread_mutex_lock(&out);
    printf("worker df=%" PRIu64 " reg=%d rc=%d again=%d cpus=%s\n", df, reg, rc, again, cpus);
    pthread_mutex_unlock(&out);
    /* Stay alive until every worker has printed: the placement is final. */
    pthread_barrier_wait(&printed);
    return NULL;
}

static int run_ok(void) {
    pthread_t threads[WORKERS];
    uint64_t app = 0;
    const char *json, *msg;
    int rc;

    printf("init rc=%d\n", dfsched_init());
    pthread_barrier_init(&registered, NULL, WORKERS);
    pthread_barrier_init(&entered, NULL, WORKERS);
    pthread_barrier_init(&printed, NULL, WORKERS);
    for (uintptr_t i = 0; i < WORKERS; i++) {
        pthread_create(&threads[i], NULL, worker, (void *)i);
    }
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(threads[i], NULL);
    }

    /* Arguments are evaluated in no fixed order: call first, then print. */
    rc = dfsched_hint(999, 0, 1);
    printf("unknown_app rc=%d msg=%s\n", rc, dfsched_last_error());
    rc = dfsched_hint(0, 5, 6);
    printf("not_in_df rc=%d msg=%s\n", rc, dfsched_last_error());
    rc = dfsched_app_create(NULL);
    printf("null_out rc=%d msg=%s\n", rc, dfsched_last_error());
    rc = dfsched_app_create(&app);
    printf("app_create rc=%d app=%" PRIu64 "\n", rc, app);
    /* The last-error pointer stays valid: it shows the latest message. */
    msg = dfsched_last_error();
    rc = dfsched_hint(app, 0, 1);
    printf("wrong_app rc=%d msg=%s\n", rc, msg);
    printf("leave rc=%d\n", dfsched_leave());
    printf("balance rc=%d\n", dfsched_balance_now());
    printf("strerror %s\n", dfsched_strerror(DFSCHED_E_NOT_IN_DF));
    printf("strerror_unknown %s\n", dfsched_strerror(12345));
    json = dfsched_stats_json();
    printf("stats %s\n", json ? json : "NULL");
    printf("done\n");
    return 0;
}

static int run_badenv(void) {
    char before[256], after[256];
    const char *json;
    int rc;
    my_cpus(before, sizeof before);
    rc = dfsched_enter(1);
    printf("enter rc=%d msg=%s\n", rc, dfsched_last_error());
    printf("init rc=%d\n", dfsched_init());
    json = dfsched_stats_json();
    printf("stats %s\n", json ? json : "NULL");
    my_cpus(after, sizeof after);
    printf("unmoved %d\n", strcmp(before, after) == 0);
    printf("done\n");
    return 0;
}

static int run_disabled(void) {
    char before[256], after[256];
    uint64_t app = 0;
    my_cpus(before, sizeof before);
    printf("enter rc=%d\n", dfsched_enter(1));
    printf("hint rc=%d\n", dfsched_hint(999, 3, 4));
    printf("app_create rc=%d\n", dfsched_app_create(&app));
    printf("app %" PRIu64 "\n", app);
    my_cpus(after, sizeof after);
    printf("unmoved %d\n", strcmp(before, after) == 0);
    printf("stats %s\n", dfsched_stats_json());
    printf("done\n");
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(mode, "ok") == 0) return run_ok();
    if (strcmp(mode, "badenv") == 0) return run_badenv();
    if (strcmp(mode, "disabled") == 0) return run_disabled();
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
