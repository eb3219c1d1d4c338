package chaos

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/relock-go/relock/chaos/internal/worker"
)

// section is one critical section as the resource saw it.
type section struct {
	Name, Owner     string
	Token           int64
	Start, End      int64 // worker.Mono
	ReadOK, WriteOK bool
}

// resource is the protected resource: per name, a counter that contenders increment by a
// read and a later write, each carrying the fencing token. It refuses any token lower than
// the highest it has seen for the name, and records every critical section.
type resource struct {
	mu    sync.Mutex
	names map[string]*resName
}

type resName struct {
	max      int64
	counter  int64
	open     map[string]*section
	sections []*section
}

func newResource() *resource { return &resource{names: map[string]*resName{}} }

func (r *resource) get(name string) *resName {
	n := r.names[name]
	if n == nil {
		n = &resName{open: map[string]*section{}}
		r.names[name] = n
	}
	return n
}

func secKey(owner string, token int64) string { return fmt.Sprintf("%s#%d", owner, token) }

func (r *resource) Read(name, owner string, token int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.get(name)
	s := &section{Name: name, Owner: owner, Token: token, Start: worker.Mono()}
	s.ReadOK = token >= n.max
	if s.ReadOK {
		n.max = token
	}
	n.open[secKey(owner, token)] = s
	return n.counter, s.ReadOK
}

func (r *resource) Write(name, owner string, token, value int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.get(name)
	k := secKey(owner, token)
	s := n.open[k]
	if s == nil {
		s = &section{Name: name, Owner: owner, Token: token, Start: worker.Mono()}
	}
	delete(n.open, k)
	s.End = worker.Mono()
	s.WriteOK = s.ReadOK && token >= n.max
	if s.WriteOK {
		n.max = token
		n.counter = value
	}
	n.sections = append(n.sections, s)
	return s.WriteOK
}

// recorder is a worker.Sink that keeps the history.
type recorder struct {
	mu   sync.Mutex
	ops  []worker.Op
	lost []worker.Lost
}

func (h *recorder) Op(o worker.Op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

func (h *recorder) Lost(l worker.Lost) {
	h.mu.Lock()
	h.lost = append(h.lost, l)
	h.mu.Unlock()
}

func (h *recorder) snapshot() ([]worker.Op, []worker.Lost) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]worker.Op(nil), h.ops...), append([]worker.Lost(nil), h.lost...)
}

// report is what the checker found in one run.
type report struct {
	Sections     int // critical sections the resource accepted
	Rejected     int // writes refused for a stale token
	Overlaps     int // accepted sections that overlapped (a violation)
	TokensBack   int // accepted tokens that did not rise (a violation)
	CounterOff   int // names whose counter differs from the accepted sections (a violation)
	HoldOverlaps int // holds that overlapped, neither holder told of a loss (a violation)
	ToldOverlaps int // holds that overlapped after one holder was told of its loss (allowed)
	Acquired     int // acquire ok
	Unknown      int // operations with an unknown outcome
	Lost         int // loss notices
	NotHeld      int // unlocks answered ErrNotHeld
	Problems     []string
	Linear       string // what the row says of linearizability (checkLinear); empty: not checked
}

func (r report) violations() int {
	return r.Overlaps + r.TokensBack + r.CounterOff + r.HoldOverlaps
}

func (r report) String() string {
	s := fmt.Sprintf("sections=%d rejected=%d overlaps=%d tokens_back=%d counter_off=%d hold_overlaps=%d told_overlaps=%d acquired=%d unknown=%d lost=%d notheld=%d",
		r.Sections, r.Rejected, r.Overlaps, r.TokensBack, r.CounterOff, r.HoldOverlaps, r.ToldOverlaps, r.Acquired, r.Unknown, r.Lost, r.NotHeld)
	if len(r.Problems) > 0 {
		s += "\n  " + strings.Join(r.Problems, "\n  ")
	}
	return s
}

// check inspects the resource and the history.
func check(res *resource, ops []worker.Op, lost []worker.Lost) report {
	var rep report
	res.mu.Lock()
	for name, n := range res.names {
		var acc []*section
		for _, s := range n.sections {
			if s.WriteOK {
				acc = append(acc, s)
			} else {
				rep.Rejected++
			}
		}
		rep.Sections += len(acc)
		if int64(len(acc)) != n.counter {
			rep.CounterOff++
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: counter %d after %d accepted sections (lost updates)", name, n.counter, len(acc)))
		}
		sort.Slice(acc, func(i, j int) bool { return acc[i].Start < acc[j].Start })
		var maxEnd int64
		var prev *section
		for i, s := range acc {
			if i > 0 && s.Start < maxEnd {
				rep.Overlaps++
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: section of %s (token %d) starts before an earlier one ends", name, s.Owner, s.Token))
			}
			if prev != nil && s.Token <= prev.Token {
				rep.TokensBack++
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: token %d after %d", name, s.Token, prev.Token))
			}
			maxEnd = max(maxEnd, s.End)
			prev = s
		}
	}
	res.mu.Unlock()

	// Holds: acquire return .. release call, cut short by a loss notice.
	type hold struct {
		name, owner string
		token       int64
		start, end  int64
		told        bool
	}
	lostAt := map[string]int64{}
	for _, l := range lost {
		lostAt[secKey(l.Owner, l.Token)] = l.At
	}
	rep.Lost = len(lost)
	open := map[string]*hold{}
	byName := map[string][]*hold{}
	const never = int64(1) << 62
	for _, o := range ops {
		if o.Out == worker.OutUnknown {
			rep.Unknown++
		}
		switch {
		case o.Kind == "acquire" && o.Out == worker.OutOK:
			rep.Acquired++
			h := &hold{name: o.Name, owner: o.Owner, token: o.Token, start: o.Return, end: never}
			open[secKey(o.Owner, o.Token)] = h
			byName[o.Name] = append(byName[o.Name], h)
		case o.Kind == "release":
			if o.Out == worker.OutNotHeld {
				rep.NotHeld++
			}
			if h := open[secKey(o.Owner, o.Token)]; h != nil {
				h.end = o.Call
				delete(open, secKey(o.Owner, o.Token))
			}
		}
	}
	for name, hs := range byName {
		for _, h := range hs {
			if at, ok := lostAt[secKey(h.owner, h.token)]; ok {
				h.told = true
				h.end = min(h.end, at)
			}
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
		for i := 1; i < len(hs); i++ {
			for j := 0; j < i; j++ {
				if hs[i].start < hs[j].end {
					if hs[i].told || hs[j].told {
						rep.ToldOverlaps++
					} else {
						rep.HoldOverlaps++
						if len(rep.Problems) < 20 {
							rep.Problems = append(rep.Problems, fmt.Sprintf("%s: hold of %s (token %d, %d..%d) began while %s (token %d, %d..%d) held it, neither told of a loss",
								name, hs[i].owner, hs[i].token, hs[i].start, hs[i].end, hs[j].owner, hs[j].token, hs[j].start, hs[j].end))
						}
					}
				}
			}
		}
	}
	return rep
}
