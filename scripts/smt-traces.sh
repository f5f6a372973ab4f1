#!/usr/bin/env bash
# smt-traces.sh — record real programs' memory traces for `dfsched sim smt
# --workload traces DIR`, one command for all.
#
#   scripts/smt-traces.sh [--out DIR] [--skip N] [--accesses N] [--dfsched BIN] [--force]
#
# Runs each candidate program of this machine (and three small C kernels
# built with gcc) under
# `valgrind --tool=lackey --trace-mem=yes` and pipes the text into
# `dfsched trace import`, which keeps a window of --accesses accesses after
# the first --skip (defaults: 2 000 000 and 4 000 000), one DIR/NAME.dftrace
# per program (an existing one is kept unless --force). A program that is
# missing is skipped with a note. The traces
# stay out of git (DIR defaults to bench-out/traces, which .gitignore
# covers); only the tiny fixtures in crates/dfsched-cli/tests/fixtures/smt
# are committed.
set -euo pipefail

out=bench-out/traces
skip=2000000
accesses=4000000
bin=target/release/dfsched
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --skip) skip="$2"; shift 2 ;;
    --accesses) accesses="$2"; shift 2 ;;
    --dfsched) bin="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
[ -x "$bin" ] || { echo "$bin is missing: cargo build --release" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Inputs: a few MiB of text the compressors and sort chew on.
for i in $(seq 1 40); do cat /usr/share/common-licenses/* 2>/dev/null || true; done > "$work/text"
seq 1 400000 | shuf --random-source=<(yes) > "$work/numbers"

record() { # NAME COMMAND…
  local name=$1; shift
  if ! command -v "$1" >/dev/null; then echo "skip $name: $1 not installed" >&2; return; fi
  if [ -s "$out/$name.dftrace" ] && [ "$force" = 0 ]; then echo "keep $out/$name.dftrace (--force to redo)" >&2; return; fi
  echo "recording $name" >&2
  # lackey writes its trace to valgrind's log, sent here to fd 3 and a fifo;
  # the program's own output is discarded. Once `trace import` has its
  # window it exits, and the valgrind it was reading from (our own child,
  # by its pid) is stopped rather than left to run the program to its end.
  local fifo="$work/fifo"
  rm -f "$fifo"; mkfifo "$fifo"
  valgrind --tool=lackey --trace-mem=yes --log-fd=3 "$@" 3>"$fifo" >/dev/null 2>&1 </dev/null &
  local vg=$!
  "$bin" trace import --skip "$skip" --accesses "$accesses" --out "$out/$name.dftrace" <"$fifo" || true
  # SIGKILL: valgrind hands SIGTERM to the program, which may take its
  # time (under lackey) to act on it.
  kill -KILL "$vg" 2>/dev/null || true
  wait "$vg" 2>/dev/null || true
}

record gzip gzip -c -6 "$work/text"
record bzip2 bzip2 -c "$work/text"
record xz xz -c -T1 "$work/text"
record sort sort -n "$work/numbers"
# A fixed hash seed: with Python's random one each recording differs.
PYTHONHASHSEED=0 record python3 "$(python3 -c 'import sys; print(sys.executable)')" -c 'import json; d = {str(i): [i] * 8 for i in range(200000)}; json.dumps(d)'
record sqlite3 sqlite3 :memory: 'create table t(a, b); with recursive c(x) as (select 1 union all select x + 1 from c where x < 200000) insert into t select x, x * 7 % 1000 from c; select b, count(*) from t group by b order by 2 desc limit 3;'
# The compiler proper, not the gcc driver (lackey would trace the driver).
# Its input is a file: record() gives the program no stdin.
if command -v gcc >/dev/null; then
  cat /usr/include/stdio.h /usr/include/stdlib.h /usr/include/string.h > "$work/k.c" 2>/dev/null || true
  echo 'int f(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) s += a[i] * a[i]; return s; }' >> "$work/k.c"
  record cc1 "$(gcc -print-prog-name=cc1)" -quiet -O2 -o /dev/null "$work/k.c"
fi
# Small C kernels (the issue's "a few small C kernels"), generic on purpose:
# none is shaped to be hot in chosen super-sets, so they do not favour the
# set-level policy. stream: a sequential sum over 32 MiB; chase: a random
# cyclic pointer chase over 1 MiB; matmul: a naive 96 x 96 double multiply
# (three matrices, 216 KiB), repeated.
if command -v gcc >/dev/null; then
  cat > "$work/stream.c" <<'C'
#include <stdlib.h>
int main(void) { long n = 4L << 20; volatile long s = 0; long *a = calloc(n, sizeof *a);
  for (int r = 0; r < 8; r++) for (long i = 0; i < n; i++) s += a[i]; return (int)(s & 1); }
C
  cat > "$work/chase.c" <<'C'
#include <stdlib.h>
int main(void) { long n = (1L << 20) / sizeof(long); long *next = malloc(n * sizeof *next); long *perm = malloc(n * sizeof *perm);
  unsigned x = 12345; for (long i = 0; i < n; i++) perm[i] = i;
  for (long i = n - 1; i > 0; i--) { x = x * 1103515245u + 12345u; long j = x % (i + 1); long t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
  for (long i = 0; i < n; i++) next[perm[i]] = perm[(i + 1) % n];
  volatile long p = 0; for (long k = 0; k < 50L * n; k++) p = next[p]; return (int)(p & 1); }
C
  cat > "$work/matmul.c" <<'C'
#define N 96
static double a[N][N], b[N][N], c[N][N];
int main(void) { for (int i = 0; i < N; i++) for (int j = 0; j < N; j++) { a[i][j] = i + j; b[i][j] = i - j; }
  for (int r = 0; r < 40; r++) for (int i = 0; i < N; i++) for (int j = 0; j < N; j++) { double s = 0; for (int k = 0; k < N; k++) s += a[i][k] * b[k][j]; c[i][j] += s; }
  return (int)c[1][1] & 1; }
C
  for k in stream chase matmul; do
    gcc -O1 -o "$work/$k" "$work/$k.c" && record "$k" "$work/$k"
  done
fi
ls -l "$out" >&2
