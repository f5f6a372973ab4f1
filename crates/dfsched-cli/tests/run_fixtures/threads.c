/*
 * A C test program for `dfsched run` (crates/dfsched-cli/tests/run.rs).
 * It knows nothing of dfsched unless a mode asks for its C ABI, which it
 * then finds with dlsym (it is preloaded, not linked).
 *
 *   threads spin N   N threads spin; prints "pid P", one "tid T" per thread,
 *                    "ready"; runs until stdin closes, then exits 0
 *   threads hint N   as spin, and thread 0 calls dfsched_enter(1) before
 *                    "tid"; after "ready" prints "stats <json>" (and exits
 *                    3 if the dfsched API is missing)
 *   threads stats N  as spin; after "ready" prints "stats <json>" and
 *                    "last-error <the main thread's dfsched_last_error()>"
 *   threads outside C
 *                    starts one thread whose mask is CPU C alone (set at
 *                    creation through its attributes), which prints
 *                    "outside-error <its dfsched_last_error()>" and
 *                    "outside-mask <cpulist>"; then the main thread prints
 *                    "stats <json>" and exits 0
 *   threads fork N   N threads spin; prints "ready" and waits for stdin to
 *                    close; prints "parent-mask <cpulist>" of the main
 *                    thread; then fork: the child prints
 *                    "child-mask <cpulist>" of its thread before anything
 *                    else, starts 2 threads, prints "child-stats <json>",
 *                    exits 5; the parent waits, prints "child-status <s>",
 *                    and exits with the child's status
 *   threads crash N  as spin, but abort()s when stdin closes
 *   threads orphan N as spin; on the first input from stdin, forks and
 *                    exits 0 at once (its threads with it): the child
 *                    prints "child-pid C", starts 2 spinning threads,
 *                    prints "child-ready", and runs, outliving its parent,
 *                    until stdin closes; then it exits 0
 *   threads spawn    no thread of its own: its lone main thread is the one
 *                    dfsched places (on one CPU, under co-thread). Sets
 *                    DFSCHED_POLICY=none for its children, so that each
 *                    prints the mask it was created with; prints
 *                    "parent-mask <cpulist>"; then starts this program as
 *                    "threads mask T" by posix_spawn (T = posix_spawn-mask),
 *                    posix_spawnp, system and popen (whose output it
 *                    copies), each waited for and followed by
 *                    "parent-mask <cpulist>" again; then prints
 *                    "missing <posix_spawn's result for a missing file>",
 *                    "stats <json>", and exits 0
 *   threads mask T   prints "T <cpulist>" of its mask
 *   threads exit C   exits with status C
 *   threads abort    abort()s
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_THREADS 256

static atomic_int stop;
static atomic_int started;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;
static int hint_first;

static void say(const char *fmt, long v) {
    pthread_mutex_lock(&out);
    printf(fmt, v);
    fflush(stdout);
    pthread_mutex_unlock(&out);
}

static void *spin(void *arg) {
    long i = (long)arg;
    if (hint_first && i == 0) {
        int (*enter)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "dfsched_enter");
        if (enter == NULL || enter(1) != 0) {
            say("hint-failed %ld\n", 0);
        }
    }
    say("tid %ld\n", (long)syscall(SYS_gettid));
    atomic_fetch_add(&started, 1);
    while (!atomic_load(&stop)) {
    }
    return NULL;
}

static int start(pthread_t *t, int n) {
    for (long i = 0; i < n; i++) {
        if (pthread_create(&t[i], NULL, spin, (void *)i) != 0) {
            perror("pthread_create");
            exit(2);
        }
    }
    while (atomic_load(&started) < n) {
        sched_yield();
    }
    return n;
}

static void finish(pthread_t *t, int n) {
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
    }
}

static void print_stats(const char *tag) {
    const char *(*stats)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "dfsched_stats_json");
    pthread_mutex_lock(&out);
    const char *json = stats ? stats() : "none";
    printf("%s %s\n", tag, json ? json : "NULL");
    fflush(stdout);
    pthread_mutex_unlock(&out);
}

static void *outside(void *arg) {
    (void)arg;
    const char *(*last)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "dfsched_last_error");
    pthread_mutex_lock(&out);
    printf("outside-error %s\n", last ? last() : "(no dfsched)");
    fflush(stdout);
    pthread_mutex_unlock(&out);
    return NULL;
}

static void wait_stdin_eof(void) {
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
}

static void print_mask(const char *tag) {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    pthread_mutex_lock(&out);
    printf("%s ", tag);
    int first = 1;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &set)) {
            printf(first ? "%d" : ",%d", c);
            first = 0;
        }
    }
    printf("\n");
    fflush(stdout);
    pthread_mutex_unlock(&out);
}

extern char **environ;

/* Waits for child `pid`; exits 2 if it failed. */
static void reap(pid_t pid, const char *how) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: child failed (%d)\n", how, status);
        exit(2);
    }
}

/* The `spawn` mode (see the top of the file). */
static int spawn_children(void) {
    static char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        perror("readlink");
        return 2;
    }
    self[len] = '\0';
    setenv("DFSCHED_POLICY", "none", 1);
    print_mask("parent-mask");

    char *spawn_argv[] = {"threads", "mask", "posix_spawn-mask", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, self, NULL, NULL, spawn_argv, environ);
    if (rc != 0) {
        fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
        return 2;
    }
    reap(pid, "posix_spawn");
    print_mask("parent-mask");

    char *spawnp_argv[] = {"threads", "mask", "posix_spawnp-mask", NULL};
    rc = posix_spawnp(&pid, self, NULL, NULL, spawnp_argv, environ);
    if (rc != 0) {
        fprintf(stderr, "posix_spawnp: %s\n", strerror(rc));
        return 2;
    }
    reap(pid, "posix_spawnp");
    print_mask("parent-mask");

    char command[4200];
    snprintf(command, sizeof command, "'%s' mask system-mask", self);
    fflush(stdout);
    if (system(command) != 0) {
        fprintf(stderr, "system failed\n");
        return 2;
    }
    print_mask("parent-mask");

    snprintf(command, sizeof command, "'%s' mask popen-mask", self);
    FILE *p = popen(command, "r");
    if (p == NULL) {
        perror("popen");
        return 2;
    }
    char line[512];
    while (fgets(line, sizeof line, p) != NULL) {
        printf("%s", line);
    }
    if (pclose(p) != 0) {
        fprintf(stderr, "popen: child failed\n");
        return 2;
    }
    print_mask("parent-mask");

    char *missing_argv[] = {"missing", NULL};
    rc = posix_spawn(&pid, "/nonexistent/dfsched-test-program", NULL, NULL, missing_argv, environ);
    printf("missing %d\n", rc);
    print_stats("stats");
    return 0;
}

int main(int argc, char **argv) {
    static pthread_t t[MAX_THREADS];
    const char *mode = argc > 1 ? argv[1] : "spin";
    int n = argc > 2 ? atoi(argv[2]) : 4;
    if (n < 0 || n > MAX_THREADS) {
        n = 4;
    }
    if (strcmp(mode, "exit") == 0) {
        return n;
    }
    if (strcmp(mode, "abort") == 0) {
        abort();
    }
    if (strcmp(mode, "mask") == 0) {
        print_mask(argc > 2 ? argv[2] : "mask");
        return 0;
    }
    if (strcmp(mode, "spawn") == 0) {
        return spawn_children();
    }
    if (strcmp(mode, "outside") == 0) {
        pthread_attr_t attr;
        cpu_set_t one;
        pthread_t o;
        CPU_ZERO(&one);
        CPU_SET(n, &one);
        pthread_attr_init(&attr);
        pthread_attr_setaffinity_np(&attr, sizeof one, &one);
        if (pthread_create(&o, &attr, outside, NULL) != 0) {
            perror("pthread_create");
            return 2;
        }
        pthread_join(o, NULL);
        print_stats("stats");
        return 0;
    }
    say("pid %ld\n", (long)getpid());
    hint_first = strcmp(mode, "hint") == 0;
    start(t, n);
    if (strcmp(mode, "fork") == 0) {
        /* The parent's threads are placed; the child must not inherit that. */
        say("ready%ld\n", 0);
        wait_stdin_eof();
        print_mask("parent-mask");
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            print_mask("child-mask");
            pthread_t c[2];
            atomic_store(&started, 0);
            atomic_store(&stop, 0);
            hint_first = 0;
            start(c, 2);
            print_stats("child-stats");
            finish(c, 2);
            _exit(5);
        }
        int status = 0;
        waitpid(child, &status, 0);
        say("child-status %ld\n", (long)status);
        finish(t, n);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    if (strcmp(mode, "orphan") == 0) {
        say("ready%ld\n", 0);
        char buf[64];
        if (read(0, buf, sizeof buf) <= 0) {
            return 0;
        }
        pid_t child = fork();
        if (child < 0) {
            perror("fork");
            return 2;
        }
        if (child == 0) {
            pthread_t c[2];
            say("child-pid %ld\n", (long)getpid());
            atomic_store(&started, 0);
            atomic_store(&stop, 0);
            start(c, 2);
            say("child-ready%ld\n", 0);
            wait_stdin_eof();
            finish(c, 2);
            return 0;
        }
        return 0;
    }
    say("ready%ld\n", 0);
    if (hint_first || strcmp(mode, "stats") == 0) {
        print_stats("stats");
    }
    if (strcmp(mode, "stats") == 0) {
        const char *(*last)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "dfsched_last_error");
        pthread_mutex_lock(&out);
        printf("last-error %s\n", last ? last() : "(no dfsched)");
        fflush(stdout);
        pthread_mutex_unlock(&out);
    }
    wait_stdin_eof();
    if (strcmp(mode, "crash") == 0) {
        abort();
    }
    finish(t, n);
    return 0;
}
