#!/usr/bin/env bash
# quiet.sh — run a benchmark the way dfsched's published figures were taken.
#
#   scripts/quiet.sh [--max-load L] [--wait-s S] [--no-prio] -- COMMAND ARGS…
#
# 1. Waits (up to --wait-s, default 300 s) until the 1-minute load average is
#    at most --max-load (default 0.5 per CPU), so that no build or test runs
#    beside the measurement; prints the load it started at.
# 2. Runs COMMAND in a session of its own (setsid) whose autogroup is given
#    nice -19 (root only; --no-prio or a non-root user skips this), so that
#    background daemons on a shared 2-CPU guest take little from it. Every
#    mode of a benchmark runs in that one session, so the comparison stays
#    fair: the priority is the same for vanilla and for dfsched.
# 3. Prints the load average at the end, and exits with COMMAND's status.
#
# It never changes anything outside the command's own session.
set -euo pipefail

max_load=""
wait_s=300
prio=1
while [ $# -gt 0 ]; do
  case "$1" in
    --max-load) max_load="$2"; shift 2 ;;
    --wait-s) wait_s="$2"; shift 2 ;;
    --no-prio) prio=0; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "quiet.sh: no command (see --help)" >&2
  exit 2
fi
cpus=$(nproc)
[ -n "$max_load" ] || max_load=$(awk -v c="$cpus" 'BEGIN { printf "%.2f", 0.5 * c }')

load1() { cut -d' ' -f1 /proc/loadavg; }
deadline=$(( $(date +%s) + wait_s ))
while awk -v l="$(load1)" -v m="$max_load" 'BEGIN { exit !(l > m) }'; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "quiet.sh: load average $(load1) still above $max_load after ${wait_s}s; measuring anyway (say so beside the figures)" >&2
    break
  fi
  sleep 5
done
echo "quiet.sh: start $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $cpus CPUs" >&2

if [ "$prio" = 1 ] && [ "$(id -u)" = 0 ] && [ -w /proc/self/autogroup ]; then
  # The new session's autogroup is the shell's after setsid: renice it, then
  # exec the command in it.
  set +e
  setsid --wait bash -c 'echo -19 > /proc/self/autogroup && exec "$@"' quiet "$@"
  status=$?
  set -e
else
  [ "$prio" = 1 ] && echo "quiet.sh: not root or no autogroups: running at the default priority" >&2
  set +e
  setsid --wait "$@"
  status=$?
  set -e
fi
echo "quiet.sh: end $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$status"
