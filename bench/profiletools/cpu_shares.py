#!/usr/bin/env python3
"""Shares of CPU samples by where they go, from `go tool pprof -traces BIN PROFILES...` (stdin).
Samples whose stack holds the benchmark's setup (redistest, newClient, script loading before
ResetTimer) are dropped. Each sample goes to the first class that matches, in this order."""
import sys, re, collections
text = sys.stdin.read()
blocks = text.split('-----------+-------------------------------------------------------')[1:]
def ms(v):
    m = re.match(r'([\d.]+)(ms|s|us)', v)
    x = float(m.group(1))
    return x * {'ms': 1, 's': 1000, 'us': 0.001}[m.group(2)]
classes = [
    ('sched: stack growth of a fresh goroutine (newstack/copystack)', lambda s: 'runtime.newstack' in s),
    ('sched: netpoll/epoll', lambda s: any(f in ('runtime.netpoll',) for f in s)),
    ('sched: thread sleep/wake (futex)', lambda s: any(f.startswith('runtime.futex') for f in s)),
    ('sched: goroutine switch/create/exit, run queues', lambda s: any(f in ('runtime.schedule', 'runtime.findRunnable', 'runtime.park_m', 'runtime.goexit0', 'runtime.newproc', 'runtime.newproc1', 'runtime.goready', 'runtime.ready', 'runtime.wakep', 'runtime.startm', 'runtime.gopark', 'runtime.mcall', 'runtime.gosched_m', 'runtime.runqgrab', 'runtime.stealWork', 'runtime.execute') for f in s)),
    ('socket read/write syscalls (kernel loopback TCP)', lambda s: any(f in ('syscall.write', 'syscall.read') for f in s)),
    ('GC + allocation', lambda s: any(f.startswith(('runtime.gcBgMarkWorker', 'runtime.gcDrain', 'runtime.bgsweep', 'runtime.mallocgc', 'runtime.gcAssist', 'runtime.(*mcache)', 'runtime.(*mheap)', 'runtime.bgscavenge', 'runtime.gcStart', 'runtime.markroot', 'runtime.scanobject', 'runtime.sweepone', 'runtime.(*sweepLocked)')) for f in s)),
    ('timers (runtime)', lambda s: any(f.startswith(('runtime.(*timers)', 'runtime.(*timer)')) for f in s)),
    ('relock code (leaf in rlock/watchdog)', lambda s: 'relock-go/relock/rlock' in s[0] or 'relock-go/relock/watchdog' in s[0]),
    ('rueidis code (leaf in rueidis)', lambda s: 'redis/rueidis' in s[0]),
    ('other, under relock frames, no rueidis frame (chan/select/sync/context/strconv...)', lambda s: any('relock-go/relock/rlock' in f for f in s) and not any('redis/rueidis' in f for f in s)),
    ('other, under rueidis frames (bufio, sync, runtime...)', lambda s: any('redis/rueidis' in f for f in s)),
    ('other', lambda s: True),
]
tot = collections.Counter(); n = 0.0; dropped = 0.0
incl = collections.Counter()
for b in blocks:
    ls = [l for l in b.strip('\n').split('\n') if l.strip()]
    if not ls:
        continue
    v, leaf = ls[0].split(None, 1)
    stack = [leaf.strip()] + [l.strip() for l in ls[1:]]
    stack = [re.sub(r' \(inline\)$', '', f) for f in stack]
    w = ms(v)
    if any(k in f for f in stack for k in ('redistest', 'bench.newClient', 'rueidis.NewClient', 'rlock.New', 'ResetStats', 'CommandStats', 'rlock.(*Client).Close', 'redistest.')):
        dropped += w; continue
    n += w
    for name, pred in classes:
        if pred(stack):
            tot[name] += w; break
    rl = any('relock-go/relock/rlock' in f for f in stack); ru = any('redis/rueidis' in f for f in stack)
    incl['stack holds rueidis frames (rueidis + the I/O it does)' if ru else 'stack holds relock frames, no rueidis' if rl else 'neither (scheduler, netpoll, GC workers, harness)'] += w
print(f'samples: {n:.0f} ms (dropped as setup: {dropped:.0f} ms)')
for k, v in tot.most_common():
    print(f'  {100*v/n:5.1f}%  {k}')
print('by stack:')
for k, v in incl.most_common():
    print(f'  {100*v/n:5.1f}%  {k}')
