#!/usr/bin/env python3
"""Count goroutine state transitions per cycle inside the last trace.Log "cycles" start/end
window of `go tool trace -d=parsed TRACE` (stdin). Usage:
  go tool trace -d=parsed trace.out | python3 trace_counts.py N
N: the cycles the window ran (the benchmark's b.N)."""
import re, sys, collections
n = int(sys.argv[1])
lines = sys.stdin.read().split('\n')
starts = [i for i, l in enumerate(lines) if 'Category="cycles" Message="start"' in l]
ends = [i for i, l in enumerate(lines) if 'Category="cycles" Message="end"' in l]
a, b = starts[-1], ends[-1]
ev = None
events = []
for l in lines[a:b]:
    if l.startswith('M='):
        ev = {'line': l, 'stack': [], 'tstack': [], 'cur': None}
        events.append(ev)
    elif l.startswith('Stack='):
        ev['cur'] = 'stack'
    elif l.startswith('TransitionStack='):
        ev['cur'] = 'tstack'
    elif l.startswith('\t') and not l.startswith('\t\t') and ev and ev['cur']:
        ev[ev['cur']].append(l.strip().split(' @ ')[0])
def site(stack):
    for f in stack:
        if 'relock' in f or ('rueidis' in f and 'Gosched' not in f):
            return f
    return stack[0] if stack else '(scheduler/netpoll: no stack)'
trans = collections.Counter(); unblock = collections.Counter(); block = collections.Counter(); created = collections.Counter()
for e in events:
    m = re.search(r'StateTransition .*GoID=(-?\d+) (\w+)->(\w+) Reason="([^"]*)"', e['line'])
    if not m:
        continue
    f, t, why = m.group(2), m.group(3), m.group(4)
    trans[f'{f}->{t}' + (f' ({why})' if why else '')] += 1
    if f == 'Waiting' and t == 'Runnable':
        unblock[f'woken by {site(e["stack"])}  | waiter at {site(e["tstack"])}'] += 1
    if f == 'Running' and t == 'Waiting':
        block[f'{why} at {site(e["tstack"] or e["stack"])}'] += 1
    if f == 'NotExist' and t == 'Runnable':
        created[site(e['stack'])] += 1
def show(title, c):
    print(title)
    for k, v in c.most_common(12):
        print(f'  {v/n:7.3f}/cycle  {k}')
show('transitions', trans); show('blocks (Running->Waiting)', block); show('unblocks (Waiting->Runnable: a hand-over)', unblock); show('goroutines created', created)
