#!/usr/bin/env bash
# smt-traces.sh — record real programs' memory traces for `dfsched sim smt
# --workload traces DIR`, one command for all.
#
#   scripts/smt-traces.sh [--out DIR] [--skip N] [--accesses N] [--dfsched BIN] [--force]
#
# Runs each candidate program of this machine (and three small C kernels
# built with gcc; the last six programs were added on Nov 26) under
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
  # Run alone first: a program that fails on its own input (a missing
  # header, a bad option) would leave a trace of its error path.
  if ! "$@" >/dev/null 2>"$work/err" </dev/null; then
    echo "skip $name: it fails on its own: $(tail -n 2 "$work/err" | tr '\n' ' ')" >&2; return
  fi
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
# Its input is a file, preprocessed by the driver first: cc1 alone does not
# know the multiarch include paths (before Nov 26 it met a missing
# <bits/libc-header-start.h> and the trace was of its start and its error).
if command -v gcc >/dev/null; then
  for h in assert ctype errno fcntl inttypes limits locale math pthread signal stdarg stdint stdio stdlib \
    string time unistd arpa/inet netinet/in sys/mman sys/socket sys/stat sys/wait; do
    echo "#include <$h.h>"
  done > "$work/k.c"
  echo 'int f(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) s += a[i] * a[i]; return s; }' >> "$work/k.c"
  gcc -E -o "$work/k.i" "$work/k.c"
  record cc1 "$(gcc -print-prog-name=cc1)" -fpreprocessed -quiet -O2 -o /dev/null "$work/k.i"
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
# More programs of this machine whose data structures grow with their input
# (hash tables, a trie, a B-tree, template instances), as SPEC2000's do.
# Chosen for what they are, before any grid ran on them; their input is
# source text (Python's standard library, a few MiB in path order), whose
# vocabulary is far larger than the licences'.
find "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" -name '*.py' 2>/dev/null \
  | LC_ALL=C sort | xargs cat 2>/dev/null | head -c 8000000 > "$work/source" || true
record perl perl -e 'my %c; while (<>) { $c{$_}++ for split } print scalar(keys %c), "\n"' "$work/source"
record mawk mawk '{ for (i = 1; i <= NF; i++) c[$i]++ } END { for (w in c) n++; print n }' "$work/source"
# zstd at its default level 3: a 512 KiB hash table and a 256 KiB chain table.
record zstd zstd -c -3 "$work/source"
# Primary-key look-ups in a scattered order over a 100 000-row table.
record sqlite3-join sqlite3 :memory: 'create table t(a integer primary key, b); with recursive c(x) as (select 1 union all select x + 1 from c where x < 100000) insert into t select x, x * 7 % 1000 from c; select sum(y.b) from t x join t y on y.a = (x.a * 7919) % 100000 + 1;'
python3 -c 'import json; print(json.dumps([{"k": i * 7919 % 5000, "v": [i, str(i)]} for i in range(60000)]))' > "$work/data.json"
record jq jq -c 'group_by(.k) | map({k: .[0].k, n: length}) | length' "$work/data.json"
# The C++ front end on the standard containers (cc1plus, not the g++ driver).
if command -v g++ >/dev/null; then
  cat > "$work/k.cc" <<'CC'
#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>
std::map<std::string, std::vector<int>> index_words(const std::vector<std::string> &ws) {
  std::map<std::string, std::vector<int>> m; for (int i = 0; i < (int)ws.size(); i++) m[ws[i]].push_back(i); return m; }
std::unordered_map<int, std::string> invert(const std::map<std::string, std::vector<int>> &m) {
  std::unordered_map<int, std::string> r; for (auto &[w, is] : m) for (int i : is) r.emplace(i, w); return r; }
std::vector<std::string> top(std::vector<std::pair<std::string, int>> v) {
  std::sort(v.begin(), v.end(), [](auto &a, auto &b) { return a.second > b.second; });
  std::vector<std::string> out; for (auto &p : v) out.push_back(p.first); return out; }
CC
  g++ -std=c++17 -E -o "$work/k.ii" "$work/k.cc"
  record cc1plus "$(g++ -print-prog-name=cc1plus)" -fpreprocessed -quiet -O2 -std=c++17 -o /dev/null "$work/k.ii"
fi
ls -l "$out" >&2
