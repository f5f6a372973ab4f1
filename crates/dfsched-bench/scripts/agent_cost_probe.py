#!/usr/bin/env python3
"""Where the agent path's cost goes in `bench cothreads` 9 x 3 (co-thread).

Starts 9 co-thread workers of `dfsched bench cothreads-worker` (3 threads,
16 KiB, 7 s), as `bench cothreads --processes 9 --threads 3` does, sharing one
private agent (or none), and over a 4 s window in the middle reads the
schedstat CPU time and the voluntary/involuntary context switches of every
thread: the workers' `dfsched-balance` threads, their worker threads, and the
agent's threads by name (`dfsched-agent-c`: connections, which run the shared
/proc scan; `dfsched-agent-t`: the tick, sharing detection), plus the agent's
counters (reports, scans, ticks per second) from `dfsched agent --status`.

  VARIANT   off       DFSCHED_AGENT=off (each pass scans /proc itself)
            default   an agent with its defaults (tick 100 ms, scan fresh 50 ms)
            scan1000  scans at most once a second (isolates the scan's share)
            tick1000  ticks once a second (isolates the tick's share)
            both1000  both

Usage: agent_cost_probe.py VARIANT   (DFSCHED_BIN: the dfsched binary,
default target/release/dfsched). Prints the table of the README's
"Where the agent path's cost goes". Throughput ("ops total") on a shared
machine means nothing; CPU and switches per second are what it is for.
"""
import os, sys, time, subprocess, json, re, tempfile
BIN = os.environ.get("DFSCHED_BIN", os.path.join(os.path.dirname(__file__), "../../../target/release/dfsched"))
variant = sys.argv[1]   # off | default | scan1000 | tick1000 | both1000
agent = None; env = dict(os.environ)
d = tempfile.mkdtemp(prefix="ovh-probe-"); os.chmod(d, 0o700); sock = os.path.join(d, "agent.sock")
if variant != "off":
    tick = "1000" if variant in ("tick1000", "both1000") else "100"
    fresh = "1000" if variant in ("scan1000", "both1000") else "50"
    agent = subprocess.Popen([BIN, "agent", "--foreground", "--socket", sock, "--tick-ms", tick, "--scan-fresh-ms", fresh, "--idle-exit", "120"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        if os.path.exists(sock): break
        time.sleep(0.01)
    env["DFSCHED_AGENT"] = sock
else:
    env["DFSCHED_AGENT"] = "off"
ws = [subprocess.Popen([BIN, "bench", "cothreads-worker", "--mode", "co-thread", "--process", str(i), "--threads", "3", "--shared-bytes", "16384", "--seconds", "7"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env) for i in range(9)]
for w in ws: assert w.stdout.readline().strip() == b"ready"
for w in ws: w.stdin.write(b"go\n"); w.stdin.flush()
def tasks(pid):
    res = {}
    try: tids = os.listdir(f"/proc/{pid}/task")
    except OSError: return res
    for t in tids:
        try:
            comm = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            ss = open(f"/proc/{pid}/task/{t}/schedstat").read().split()
            st = open(f"/proc/{pid}/task/{t}/status").read()
            vol = int(re.search(r"\bvoluntary_ctxt_switches:\s+(\d+)", st).group(1))
            inv = int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", st).group(1))
            res[t] = (comm, int(ss[0]), vol, inv)
        except (OSError, AttributeError): pass
    return res
def status():
    if not agent: return {}
    try: return json.loads(subprocess.run([BIN, "agent", "--status", "--socket", sock], capture_output=True, timeout=5).stdout)["counters"]
    except Exception as e: return {}
time.sleep(1.5)
def snap(): return [tasks(w.pid) for w in ws], (tasks(agent.pid) if agent else {}), time.time(), status()
s0 = snap(); time.sleep(4.0); s1 = snap(); dt = s1[2]-s0[2]
def add(tot, a, b, prefix):
    for t, v in b.items():
        base = a.get(t, (v[0], 0, 0, 0))
        k = prefix + (v[0] if v[0].startswith("dfsched") else "workers")
        o = tot.setdefault(k, [0, 0, 0])
        for i in range(1, 4): o[i-1] += v[i] - base[i]
tot = {}
for a, b in zip(s0[0], s1[0]): add(tot, a, b, "")
add(tot, s0[1], s1[1], "agent:")
print(f"variant={variant} window {dt:.2f}s")
for k, v in sorted(tot.items()):
    print(f"  {k:24s} cpu {v[0]/1e6/dt:7.2f} ms/s  vol/s {v[1]/dt:6.1f}  invol/s {v[2]/dt:6.1f}")
if agent:
    c0, c1 = s0[3], s1[3]
    print("  agent counters/s:", {k: round((c1.get(k,0)-c0.get(k,0))/dt,1) for k in ("reports","scans","ticks","updates")})
    dfs = sum(v[0] for k, v in tot.items() if k.startswith("agent:") or k.startswith("dfsched"))
else:
    dfs = sum(v[0] for k, v in tot.items() if k.startswith("dfsched"))
print(f"  dfsched total {dfs/1e6/dt:.2f} ms/s")
res = [json.loads(w.communicate()[0].decode().strip().splitlines()[-1]) for w in ws]
print("  ops total", sum(sum(r["ops"]) for r in res))
if agent:
    subprocess.run([BIN, "agent", "--stop", "--socket", sock], capture_output=True, timeout=10); agent.wait(timeout=10)
import shutil; shutil.rmtree(d, ignore_errors=True)
