/* wake_floor.c — what a thread that wakes every PERIOD ms costs itself on this
 * machine, before any work: the floor under a balancer pass's CPU in
 * `dfsched bench overhead`.
 *
 *   gcc -O2 -o wake_floor scripts/wake_floor.c && ./wake_floor 30 100
 *
 * Runs N cycles of nanosleep(PERIOD ms) in three ways, interleaved cycle by
 * cycle so that they see the same machine: nothing after the wake, one
 * open/read/close of /proc/stat, and one pread of /proc/stat through a
 * descriptor kept open. Prints the mean CPU time (the thread's CPU clock) per
 * cycle of each, and the same read in a hot loop for comparison. On a VM the
 * first one is the price of a wake-up; the gap between the second and the
 * hot loop is what cold caches cost a read after 100 ms asleep.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static char buf[1 << 16];

static void read_opened(void) {
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, buf, sizeof buf) < 0) {
        perror("/proc/stat");
        exit(1);
    }
    close(fd);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 30;
    int ms = argc > 2 ? atoi(argv[2]) : 100;
    if (n <= 0 || ms <= 0 || ms >= 1000) {
        fprintf(stderr, "usage: %s N PERIOD_MS (0 < PERIOD_MS < 1000)\n", argv[0]);
        return 2;
    }
    int kept = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (kept < 0) {
        perror("/proc/stat");
        return 1;
    }
    struct timespec period = {0, ms * 1000000L};
    long long spent[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        for (int way = 0; way < 3; way++) {
            long long before = cpu_ns();
            nanosleep(&period, NULL);
            if (way == 1) {
                read_opened();
            } else if (way == 2 && pread(kept, buf, sizeof buf, 0) < 0) {
                perror("pread /proc/stat");
                return 1;
            }
            spent[way] += cpu_ns() - before;
        }
    }
    long long hot = cpu_ns();
    for (int i = 0; i < 1000; i++) {
        read_opened();
    }
    hot = cpu_ns() - hot;
    printf("%d cycles of %d ms, CPU us per cycle: wake only %.1f, wake + open/read /proc/stat %.1f, "
           "wake + pread kept /proc/stat %.1f; open/read in a hot loop %.1f\n",
           n, ms, spent[0] / 1e3 / n, spent[1] / 1e3 / n, spent[2] / 1e3 / n, hot / 1e3 / 1000);
    return 0;
}
