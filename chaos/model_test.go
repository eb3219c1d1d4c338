package chaos

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/relock-go/relock/chaos/internal/worker"
)

// The lock model for porcupine. Inputs are lockInput, outputs lockOutput; the state is
// lockState (comparable, so porcupine's == works). Operations of one name form a partition.
//
//   - acquire ok(t): the lock is free (possibly after an expiry, see below), and t is higher
//     than every token granted before in the linearization; the caller now holds it.
//   - acquire fail: someone holds the lock.
//   - acquire noop: an error relock says had no effect: nothing changes.
//   - acquire unknown: either nothing changed, or the caller now holds a ghost hold (one
//     nobody will unlock, which expires by its lease).
//   - release ok: the caller held the lock (nobody was granted it since its acquire); free.
//   - release notheld: the caller did not hold it (it was lost or had expired).
//   - release unknown: either.
//
// A lease can run out: a ghost hold may expire at any time, and when the model allows
// expiry (faults that can end leases), so may any hold. Without it the model is a strict
// mutex: a hold ends only by its release.
type lockInput struct {
	release bool
	client  int
}

type lockOutput struct {
	out   string
	token int64
}

type lockState struct {
	holder int // -1 when free
	ghost  bool
	last   int64 // highest token granted so far in the linearization
}

func lockModel(allowExpiry bool) porcupine.NondeterministicModel {
	// expired returns the states s can be in after leases ran out (s itself included).
	expired := func(s lockState) []lockState {
		if s.holder >= 0 && (s.ghost || allowExpiry) {
			return []lockState{s, {holder: -1, last: s.last}}
		}
		return []lockState{s}
	}
	return porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range h {
				n := op.Metadata.(string)
				if _, ok := by[n]; !ok {
					order = append(order, n)
				}
				by[n] = append(by[n], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, n := range order {
				out = append(out, by[n])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{lockState{holder: -1}} },
		Step: func(st, in, out interface{}) []interface{} {
			s, i, o := st.(lockState), in.(lockInput), out.(lockOutput)
			var next []interface{}
			for _, s := range expired(s) {
				if !i.release {
					switch o.out {
					case worker.OutOK:
						if s.holder < 0 && o.token > s.last {
							next = append(next, lockState{holder: i.client, last: o.token})
						}
					case worker.OutFail:
						if s.holder >= 0 && s.holder != i.client {
							next = append(next, s)
						}
					case worker.OutNoop:
						next = append(next, s)
					case worker.OutUnknown:
						next = append(next, s)
						if s.holder < 0 {
							next = append(next, lockState{holder: i.client, ghost: true, last: s.last})
						}
					}
					continue
				}
				held := s.holder == i.client && !s.ghost
				switch o.out {
				case worker.OutOK:
					if held {
						next = append(next, lockState{holder: -1, last: s.last})
					}
				case worker.OutNotHeld:
					if !held {
						next = append(next, s)
					}
				default: // unknown
					next = append(next, s)
					if held {
						next = append(next, lockState{holder: -1, last: s.last})
					}
				}
			}
			return dedupe(next)
		},
		DescribeOperation: func(in, out interface{}) string {
			i, o := in.(lockInput), out.(lockOutput)
			verb := "acquire"
			if i.release {
				verb = "release"
			}
			return fmt.Sprintf("c%d %s -> %s %d", i.client, verb, o.out, o.token)
		},
		DescribeState: func(st interface{}) string { return fmt.Sprintf("%+v", st.(lockState)) },
	}
}

func dedupe(states []interface{}) []interface{} {
	seen := map[lockState]bool{}
	out := states[:0]
	for _, s := range states {
		if !seen[s.(lockState)] {
			seen[s.(lockState)] = true
			out = append(out, s)
		}
	}
	return out
}

// history turns recorded operations into porcupine operations. An operation with an
// unknown outcome may take effect any time after its call: its return is put at infinity.
func history(ops []worker.Op) []porcupine.Operation {
	clients := map[string]int{}
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		id, ok := clients[o.Owner]
		if !ok {
			id = len(clients)
			clients[o.Owner] = id
		}
		ret := o.Return
		if o.Out == worker.OutUnknown {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{
			ClientId: id,
			Input:    lockInput{release: o.Kind == "release", client: id},
			Call:     o.Call,
			Output:   lockOutput{out: o.Out, token: o.Token},
			Return:   ret,
			Metadata: o.Name,
		})
	}
	return out
}

// linearizable checks ops against the lock model; "Unknown" means the checker timed out.
func linearizable(ops []worker.Op, allowExpiry bool) porcupine.CheckResult {
	m := lockModel(allowExpiry)
	return porcupine.CheckOperationsTimeout(m.ToModel(), history(ops), 60*time.Second)
}
