/*
 * A C program using dfsched's hints whose threads block and wake on pipes:
 * PAIRS pairs of threads play ping-pong over two pipes. Each thread hints
 * its pair's DF (dfsched_enter) and declares its size (dfsched_df_size),
 * then ROUNDS times: works on the pair's DF (WORK passes writing every
 * word), writes a byte to its partner and blocks reading its partner's
 * byte. So each thread works about half the time and blocks the other
 * half, woken by its partner's write.
 *
 * Usage: pipes PAIRS ROUNDS WORK. Prints "done" and exits 0; any dfsched
 * call failing prints its last error and exits 1.
 */
#include <dfsched.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define DF_BYTES 16384

struct pair {
    int ab[2]; /* a writes, b reads */
    int ba[2]; /* b writes, a reads */
    volatile uint64_t data[DF_BYTES / 8];
};

struct arg {
    struct pair *pair;
    uint64_t df;
    int first; /* the a side: it writes before it reads */
};

static long rounds, work;

static void check(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "%s: %d (%s)\n", what, rc, dfsched_last_error());
        exit(1);
    }
}

static void *player(void *p) {
    struct arg *a = p;
    check(dfsched_enter(a->df), "dfsched_enter");
    check(dfsched_df_size(a->df, DF_BYTES), "dfsched_df_size");
    int out = a->first ? a->pair->ab[1] : a->pair->ba[1];
    int in = a->first ? a->pair->ba[0] : a->pair->ab[0];
    char token = 't';
    for (long r = 0; r < rounds; r++) {
        if (!a->first || r > 0) {
            if (read(in, &token, 1) != 1) {
                perror("read");
                exit(1);
            }
        }
        for (long w = 0; w < work; w++)
            for (size_t i = 0; i < DF_BYTES / 8; i++)
                a->pair->data[i] += 1;
        if (write(out, &token, 1) != 1) {
            perror("write");
            exit(1);
        }
    }
    /* a wrote first: its partner's last token is still to read. */
    if (a->first && read(in, &token, 1) != 1) {
        perror("read");
        exit(1);
    }
    check(dfsched_leave(), "dfsched_leave");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: pipes PAIRS ROUNDS WORK\n");
        return 2;
    }
    int pairs = atoi(argv[1]);
    rounds = atol(argv[2]);
    work = atol(argv[3]);
    struct pair *ps = calloc((size_t)pairs, sizeof *ps);
    struct arg *args = calloc((size_t)pairs * 2, sizeof *args);
    pthread_t *ts = calloc((size_t)pairs * 2, sizeof *ts);
    if (!ps || !args || !ts)
        return 1;
    for (int k = 0; k < pairs; k++) {
        if (pipe(ps[k].ab) || pipe(ps[k].ba)) {
            perror("pipe");
            return 1;
        }
        for (int s = 0; s < 2; s++) {
            args[2 * k + s] = (struct arg){&ps[k], (uint64_t)k + 1, s == 0};
            if (pthread_create(&ts[2 * k + s], NULL, player, &args[2 * k + s])) {
                perror("pthread_create");
                return 1;
            }
        }
    }
    for (int i = 0; i < 2 * pairs; i++)
        pthread_join(ts[i], NULL);
    printf("done\n");
    return 0;
}
