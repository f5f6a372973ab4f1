/*
 * A C program using dfsched's hints whose threads hand a token round a
 * ring of pipes: THREADS threads, thread i reads a token from pipe i, works
 * on the ring's one DF (WORK passes writing every word of its own slice of
 * it), and writes the token to pipe i + 1 (mod THREADS). TOKENS tokens
 * circulate (written into pipes 0, THREADS/TOKENS, ... before the threads
 * start), so at most TOKENS threads run at once; each thread passes
 * ROUNDS tokens. Every thread hints the DF (dfsched_enter) and declares its
 * size (dfsched_df_size).
 *
 * The shape differs from pipes.c's pairs: one group of THREADS threads on
 * one DF, each woken by its predecessor only, with 1 or more tokens.
 *
 * Usage: ring THREADS ROUNDS WORK TOKENS (1 <= TOKENS < THREADS). Prints
 * "done" and exits 0; any dfsched call failing prints its last error and
 * exits 1.
 */
#include <dfsched.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define DF_BYTES 16384
#define SLICE_WORDS 512 /* each thread's slice: 4 KiB */

static long threads, rounds, work;
static int (*pipes)[2];
static volatile uint64_t *data;

static void check(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "%s: %d (%s)\n", what, rc, dfsched_last_error());
        exit(1);
    }
}

static void *member(void *p) {
    long i = (long)(intptr_t)p;
    check(dfsched_enter(1), "dfsched_enter");
    check(dfsched_df_size(1, DF_BYTES), "dfsched_df_size");
    int in = pipes[i][0];
    int out = pipes[(i + 1) % threads][1];
    volatile uint64_t *slice = data + (size_t)(i % (DF_BYTES / 8 / SLICE_WORDS)) * SLICE_WORDS;
    char token;
    for (long r = 0; r < rounds; r++) {
        if (read(in, &token, 1) != 1) {
            perror("read");
            exit(1);
        }
        for (long w = 0; w < work; w++)
            for (size_t k = 0; k < SLICE_WORDS; k++)
                slice[k] += 1;
        if (write(out, &token, 1) != 1) {
            perror("write");
            exit(1);
        }
    }
    check(dfsched_leave(), "dfsched_leave");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: ring THREADS ROUNDS WORK TOKENS\n");
        return 2;
    }
    threads = atol(argv[1]);
    rounds = atol(argv[2]);
    work = atol(argv[3]);
    long tokens = atol(argv[4]);
    if (threads < 2 || tokens < 1 || tokens >= threads) {
        fprintf(stderr, "need THREADS >= 2 and 1 <= TOKENS < THREADS\n");
        return 2;
    }
    pipes = calloc((size_t)threads, sizeof *pipes);
    data = calloc(DF_BYTES / 8, sizeof *data);
    pthread_t *ts = calloc((size_t)threads, sizeof *ts);
    if (!pipes || !data || !ts)
        return 1;
    for (long i = 0; i < threads; i++) {
        if (pipe(pipes[i])) {
            perror("pipe");
            return 1;
        }
    }
    /* A token's last pass leaves it in its next pipe: nobody reads it. */
    for (long t = 0; t < tokens; t++) {
        if (write(pipes[t * threads / tokens][1], "t", 1) != 1) {
            perror("write");
            return 1;
        }
    }
    for (long i = 0; i < threads; i++) {
        if (pthread_create(&ts[i], NULL, member, (void *)(intptr_t)i)) {
            perror("pthread_create");
            return 1;
        }
    }
    for (long i = 0; i < threads; i++)
        pthread_join(ts[i], NULL);
    printf("done\n");
    return 0;
}
