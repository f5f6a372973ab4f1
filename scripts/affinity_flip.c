/* affinity_flip.c — what one sched_setaffinity of the calling thread costs it,
 * moving it to the other CPU each time (or, with a second argument, staying on
 * CPU 0): the floor under a moving hint's cost in `dfsched bench overhead`.
 *
 *   gcc -O2 -o affinity_flip scripts/affinity_flip.c && ./affinity_flip 100 && ./affinity_flip 100 same
 *
 * Prints the mean CPU time (the thread's CPU clock) and wall time per call over
 * N calls, 25 ms apart so that each starts from a sleeping thread as a hint does.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long clock_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int same = argc > 2;
    if (n <= 0) {
        fprintf(stderr, "usage: %s N [same]\n", argv[0]);
        return 2;
    }
    cpu_set_t to[2];
    CPU_ZERO(&to[0]);
    CPU_ZERO(&to[1]);
    CPU_SET(0, &to[0]);
    CPU_SET(same ? 0 : 1, &to[1]);
    long long cpu = 0, wall = 0;
    for (int i = 0; i < n; i++) {
        long long c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), w0 = clock_ns(CLOCK_MONOTONIC);
        if (sched_setaffinity(0, sizeof(cpu_set_t), &to[i & 1]) != 0) {
            perror("sched_setaffinity");
            return 1;
        }
        cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        wall += clock_ns(CLOCK_MONOTONIC) - w0;
        usleep(25000);
    }
    printf("%s: per call cpu %.1f us, wall %.1f us\n", same ? "same CPU" : "other CPU",
           cpu / 1e3 / n, wall / 1e3 / n);
    return 0;
}
