/*
 * dfsched.h — data-affinity scheduling for Linux threads (libdfsched.so).
 *
 * A thread tells dfsched which data fragment (DF) it is about to work on;
 * dfsched runs the threads of one DF where that data already is (one cache
 * domain, or one CPU under heavy load) by setting their CPU affinity, and a
 * balancer thread moves whole DF groups when CPUs become imbalanced.
 * (Pinter & Zalmanovici, "Data affinity scheduling", §4.1.)
 *
 * Build:   cc prog.c $(pkg-config --cflags --libs dfsched)
 *
 * Vocabulary:
 *   application  owns a DF map; application 0 always exists and is a
 *                thread's default; dfsched_app_create() makes more.
 *   DF           a non-zero uint64_t naming a piece of data within its
 *                application; 0 means "no DF".
 *   thread       registered with dfsched on its first hint (under the hint's
 *                application, for good); its exit is noticed without any call.
 *   allowed CPUs a thread's CPU mask at its first hint (within the CPUs of
 *                the thread that started dfsched); dfsched never places it
 *                outside them. A new thread inherits its creator's mask, so
 *                spawn workers from a thread that has not hinted. A mask set
 *                later by anyone else (taskset -p, a cpuset, the program's
 *                own sched_setaffinity) is honoured from the thread's next
 *                placement on.
 *
 * All functions work on the process's default dfsched runtime, started on
 * the first call and configured from the environment (below). They are
 * thread-safe. Every int-returning function returns DFSCHED_OK (0) or a
 * negative DFSCHED_E_* code; on failure the calling thread's
 * dfsched_last_error() describes it, the program goes on, and the thread
 * stays where the kernel put it. No function ever aborts or unwinds into C.
 *
 * Environment (read once, at the first call; a bad value makes every call
 * return DFSCHED_E_CONFIG and applies nothing; any other DFSCHED_* name is
 * refused as unknown):
 *   DFSCHED_DISABLE=0|1              1: every call is a successful no-op (0)
 *   DFSCHED_POLICY=P                 threads that give no DF: data-affinity
 *                                    (unmanaged; the default), co-thread (the
 *                                    process's threads form one group),
 *                                    smt-pair (every thread pinned by its
 *                                    profile's cache activity, complementary
 *                                    threads on one core's SMT siblings;
 *                                    needs DFSCHED_SMT_PROFILE and SMT), or
 *                                    none (as DFSCHED_DISABLE=1)
 *   DFSCHED_SMT_PROFILE=FILE         the profile `dfsched profile` wrote, for
 *                                    DFSCHED_POLICY=smt-pair only; a missing
 *                                    or garbled file, or no SMT siblings:
 *                                    the runtime does not start
 *   DFSCHED_PRELOAD=0|1              1: when libdfsched.so is loaded (by
 *                                    LD_PRELOAD; `dfsched run` sets this), a
 *                                    constructor starts dfsched and every
 *                                    thread is attached from its creation (0)
 *   DFSCHED_BALANCE_INTERVAL_MS=N    ms between balancer passes; 0 = no
 *                                    balancer thread (100; at most 3600000)
 *   DFSCHED_IMBALANCE_PCT=N          imbalance threshold, percent (25; 1..1000)
 *   DFSCHED_SPLIT_AFTER_PASSES=N     stuck imbalanced passes before a group is
 *                                    split; 0 = never (10)
 *   DFSCHED_HEAVY_LOAD_MILLI=N       runnable threads per CPU x1000 from which
 *                                    a group's home is one CPU (2000; >= 1000)
 *   DFSCHED_MAX_MOVES_PER_PASS=N     moves per balancer pass (16; >= 1)
 *   DFSCHED_MOVE_UNMANAGED=0|1       1: the balancer may pin a thread in no
 *                                    group (no DF, data-affinity) to one CPU
 *                                    to even out the load; 0: such threads
 *                                    are left to the kernel (0)
 *   DFSCHED_EXTERNAL_LOAD=0|1        weigh other processes' runnable threads
 *                                    per CPU before each pass, from the
 *                                    agent's shared /proc scan, else from
 *                                    our own (1). CFS shares a CPU between
 *                                    task groups first, so a thread of our
 *                                    own group (session autogroup or cpu
 *                                    cgroup) counts as one thread, while
 *                                    another group counts as one thread in
 *                                    all, spread over the CPUs its runnable
 *                                    threads are on: a 30-thread build in
 *                                    another terminal weighs ~0.5 thread
 *                                    per CPU on 2 CPUs, not 15
 *   DFSCHED_EXTERNAL_WINDOW=N        the load of processes not under dfsched
 *                                    counts per CPU as its minimum over the
 *                                    last N samples (one per pass), so a
 *                                    momentary burst (a build, a shell) is
 *                                    ignored and lasting load is seen after
 *                                    N passes; 1 = no damping (3; 1..100)
 *   DFSCHED_IDLE_PASSES=N            a registered thread that used no CPU
 *                                    over the last N balancer passes (and at
 *                                    least 200 ms) counts as blocked, not as
 *                                    load, until it runs or hints again;
 *                                    0 = every registered thread counts as
 *                                    runnable until it exits (2; 0..100)
 *   DFSCHED_RULES=JSON               rules giving this process its policy and
 *                                    each thread a DF or "leave alone" by
 *                                    command name, executable, cgroup, user
 *                                    and thread name, first match wins;
 *                                    written by `dfsched run --rules FILE`
 *                                    from a TOML file (none). Threads are
 *                                    matched when created and again when
 *                                    renamed with pthread_setname_np, which
 *                                    the library then interposes too
 *   DFSCHED_SYSFS_ROOT=DIR           where sys/devices/system/... is read (/)
 *   DFSCHED_AGENT=auto|off|PATH      the `dfsched agent` to share the load
 *                                    view with (its Unix socket); auto: the
 *                                    default socket if an agent listens (auto)
 *   DFSCHED_AGENT_TRUST_ROOT=0|1     also use an agent run by root, in a
 *                                    root-owned directory no one else may
 *                                    write (0: only this uid's agent, in a
 *                                    directory of its own with mode 0700)
 *   DFSCHED_AGENT_TIMEOUT_MS=N       the budget of one exchange with the
 *                                    agent in a balancer pass (50; 1..10000)
 *   DFSCHED_AGENT_LONE_PASSES=N      while the agent serves this process
 *                                    alone, exchange every N passes and
 *                                    sample for itself between (10; 1..1000)
 *   DFSCHED_SCX=auto|off|PATH        the sched_ext body: threads get the
 *                                    SCHED_EXT policy and placements go to
 *                                    dfsched's BPF scheduler (dfsched-scx run,
 *                                    root's socket) instead of affinity masks;
 *                                    auto: when the kernel's sched_ext
 *                                    scheduler is dfsched's (auto)
 *   DFSCHED_LOG=LEVEL                the runtime's own events on stderr, one
 *                                    line each: off|error|warn|info|debug|trace
 *                                    (off)
 *   DFSCHED_STATS=PATH               at exit, write dfsched_stats_json() to
 *                                    PATH; %p in it becomes the pid (none)
 *   DFSCHED_RECORD=FILE              record what the runtime sees into FILE
 *                                    (FILE.PID if FILE exists) for `dfsched
 *                                    record inspect` and `dfsched sim replay`;
 *                                    docs/record-format.md (off)
 *   DFSCHED_RECORD_BUFFER=N          events the recording buffer holds between
 *                                    writes; a full buffer drops and counts,
 *                                    never waits (32768; 64..16777216)
 *   DFSCHED_ENGINE_LOG=FILE          log every event the engine handles and
 *                                    its decisions into FILE (FILE.PID if
 *                                    FILE exists; mode 0600, no symlink), JSON
 *                                    lines, for `dfsched engine-replay FILE`
 *                                    (off)
 *   DFSCHED_ENGINE_LOG_MAX_BYTES=N   the engine log's size limit: past it a
 *                                    `truncated` line ends the file and later
 *                                    events are only counted (67108864;
 *                                    65536..1099511627776)
 *   DFSCHED_LIB=PATH                 read by `dfsched run` (where libdfsched.so
 *                                    is); ignored by the library
 * Booleans also accept true/false, yes/no, on/off.
 *
 * Under LD_PRELOAD with DFSCHED_PRELOAD=1 the library interposes
 * pthread_create (passing every call through to libc's): each new thread
 * attaches itself before the program's start routine runs. If dfsched fails,
 * the thread runs anyway, unplaced; the failure is counted
 * (preload_attach_failures in the stats) and is that thread's
 * dfsched_last_error(). The program's own hints reach the same runtime.
 *
 * fork(): dfsched in a child never uses the parent's state. The child's
 * thread gets back the CPUs it was allowed before dfsched placed it (only
 * async-signal-safe work is done in the child at fork), and the child's
 * first dfsched call (under LD_PRELOAD: its first pthread_create) starts a
 * fresh runtime from the environment. A child that execs inherits
 * LD_PRELOAD and DFSCHED_*, and so the policy.
 */
#ifndef DFSCHED_H
#define DFSCHED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes. Values are stable. */
#define DFSCHED_OK                 0   /* success */
#define DFSCHED_E_INTERNAL        -1   /* a bug inside dfsched (a caught panic) */
#define DFSCHED_E_INVALID_ARG     -2   /* NULL pointer or bad argument */
#define DFSCHED_E_CONFIG          -3   /* bad DFSCHED_* variable; dfsched did not start */
#define DFSCHED_E_TOPOLOGY        -4   /* sysfs topology missing or garbled (message names the file) */
#define DFSCHED_E_NO_CPU          -5   /* the allowed CPUs hold no CPU of the topology */
#define DFSCHED_E_UNKNOWN_APP     -6   /* the application was never created */
#define DFSCHED_E_WRONG_APP       -7   /* the thread belongs to another application */
#define DFSCHED_E_NOT_IN_DF       -8   /* cur_df is not the thread's current DF
                                          (e.g. a DF switch from a thread that never hinted) */
#define DFSCHED_E_REFUSED         -9   /* refused by the engine for another reason */
#define DFSCHED_E_PERM           -10   /* sched_setaffinity: EPERM; the thread was not moved */
#define DFSCHED_E_INVAL          -11   /* sched_setaffinity: EINVAL even after re-reading the
                                          thread's allowed CPUs; the thread was not moved */
#define DFSCHED_E_NO_THREAD      -12   /* the thread is gone (ESRCH) */
#define DFSCHED_E_OS             -13   /* another system call failure (errno in the message) */
#define DFSCHED_E_IO             -14   /* reading /proc failed */
#define DFSCHED_E_SHUT_DOWN      -15   /* the runtime was shut down */
#define DFSCHED_E_THREAD_EXITING -16   /* called from a thread-local destructor of an exiting thread */

/*
 * Starts dfsched now, so a bad configuration shows at start-up rather than
 * at the first hint. Optional: every other call starts it too.
 */
int dfsched_init(void);

/*
 * The paper's call: the calling thread leaves DF cur_df and works on
 * next_df of application app from now on (0 = no DF for either; app 0 =
 * the process's default application). The first hint registers the thread
 * under app. If the thread's placement changes it is moved before the call
 * returns, so it never touches next_df's data on the wrong CPU. A hint that
 * repeats the thread's DF (cur_df == next_df == its DF) takes no lock and
 * makes no system call.
 * Errors: DFSCHED_E_UNKNOWN_APP, DFSCHED_E_WRONG_APP, DFSCHED_E_NOT_IN_DF,
 * DFSCHED_E_PERM / DFSCHED_E_INVAL (the hint counts, the thread is not
 * moved), DFSCHED_E_CONFIG, DFSCHED_E_SHUT_DOWN, ...
 */
int dfsched_hint(uint64_t app, uint64_t cur_df, uint64_t next_df);

/*
 * The everyday form: dfsched_hint(<the thread's application, 0 if it has
 * not hinted>, <its current DF or 0>, df).
 */
int dfsched_enter(uint64_t df);

/* Leaves the calling thread's DF: dfsched_hint(<its app>, <its DF>, 0). */
int dfsched_leave(void);

/*
 * Declares the size in bytes of DF `df` of the calling thread's application
 * (0 if it has not hinted). Optional: it changes no placement; a recording
 * (DFSCHED_RECORD) keeps it so that `dfsched sim replay` knows the data's
 * size, and without it the replay assumes a default (docs/record-format.md).
 * df 0 or bytes 0: DFSCHED_E_INVALID_ARG.
 */
int dfsched_df_size(uint64_t df, uint64_t bytes);

/*
 * Registers the calling thread with no hint (application 0, no DF) so that
 * the policy places it: under co-thread it joins its process's co-thread
 * group and is moved to the group's home before the call returns; under
 * data-affinity it is an unmanaged thread the balancer may move.
 * Idempotent. Under LD_PRELOAD with DFSCHED_PRELOAD=1 every thread is
 * attached without this call.
 * Errors: DFSCHED_E_PERM / DFSCHED_E_INVAL (registered, not moved),
 * DFSCHED_E_CONFIG, DFSCHED_E_NO_CPU, DFSCHED_E_SHUT_DOWN, ...
 */
int dfsched_attach(void);

/*
 * Creates an application (an empty DF map) and stores its id in *out.
 * out must point to a writable uint64_t; NULL gives DFSCHED_E_INVALID_ARG.
 */
int dfsched_app_create(uint64_t *out);

/* Runs one balancer pass now and carries out its moves (tests, benchmarks). */
int dfsched_balance_now(void);

/*
 * dfsched's counters as a JSON object. The runtime's own: hint_calls,
 * fast_hints, affinity_calls (sched_setaffinity made), scx_body (placements
 * go to dfsched's sched_ext scheduler), scx_placements, scx_failures, affinity_failures
 * {esrch, eperm, einval, other}, refused_calls {unknown_app, wrong_app,
 * not_in_df, no_cpu, shut_down, thread_exiting, other}, balance_errors,
 * balance_cpu_ns, recent_pass_cpu_ns, threads_registered, threads_attached,
 * threads_exited, threads_active, external_*, preload_attach_failures, ...;
 * the engine's under "engine": hints, placements (decided), refused,
 * balance_passes, group_moves, splits, task_moves, rehomes, ...
 * The string lives in a thread-local buffer: valid until the calling
 * thread's next dfsched_stats_json() call or its exit. Do not free it.
 * Returns NULL on failure (see dfsched_last_error()).
 */
const char *dfsched_stats_json(void);

/*
 * The message of the calling thread's most recent failed dfsched call, or
 * "" if none failed (successful calls leave it alone). The pointer is to a
 * thread-local buffer that never moves: it stays valid until the calling
 * thread exits and always shows the thread's latest message (at most 1023
 * bytes). Never NULL; do not free it.
 */
const char *dfsched_last_error(void);

/* A static description of an error code. Never NULL; do not free it. */
const char *dfsched_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* DFSCHED_H */
