/*
 * A C test program for rules on thread names (crates/dfsched-cli/tests/
 * rules.rs, attach.rs). It has no line of dfsched: it names its threads
 * with pthread_setname_np, as servers do, and spins.
 *
 *   named NAME...   one spinning thread per NAME; the threads of odd index
 *                   name themselves, the others are named by the main thread
 *                   right after pthread_create (both ways a program may use).
 *                   Prints "pid P", one "tid T" per thread, "ready"; then
 *                   for each line "spawn NAME" read from stdin starts one
 *                   more spinning thread, named NAME by the main thread,
 *                   and prints "tid T"; when stdin closes, exits 0.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_int stop;

struct arg {
    const char *name; /* set by the thread itself when not NULL */
    atomic_long tid;
};

static void *spin(void *p)
{
    struct arg *a = p;
    if (a->name)
        pthread_setname_np(pthread_self(), a->name);
    atomic_store(&a->tid, (long)syscall(SYS_gettid));
    volatile unsigned long x = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        x++;
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc - 1;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    struct arg *a = calloc((size_t)n, sizeof *a);
    if (!t || !a)
        return 2;
    printf("pid %d\n", (int)getpid());
    for (int i = 0; i < n; i++) {
        a[i].name = (i % 2) ? argv[i + 1] : NULL;
        if (pthread_create(&t[i], NULL, spin, &a[i]) != 0)
            return 2;
        if (i % 2 == 0 && pthread_setname_np(t[i], argv[i + 1]) != 0)
            return 2;
    }
    for (int i = 0; i < n; i++) {
        while (atomic_load(&a[i].tid) == 0)
            usleep(1000);
        printf("tid %ld\n", atomic_load(&a[i].tid));
    }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "spawn ", 6) != 0)
            continue;
        line[strcspn(line, "\n")] = 0;
        struct arg *b = calloc(1, sizeof *b);
        pthread_t u;
        if (!b || pthread_create(&u, NULL, spin, b) != 0 || pthread_setname_np(u, line + 6) != 0)
            return 2;
        pthread_detach(u);
        while (atomic_load(&b->tid) == 0)
            usleep(1000);
        printf("tid %ld\n", atomic_load(&b->tid));
        fflush(stdout);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return 0;
}
