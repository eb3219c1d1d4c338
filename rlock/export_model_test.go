package rlock

import (
	"context"
	"time"
)

// Hooks for the model-based test (model_test.go): the Client's own view of an owner's holds
// and the size of its tables, read under the Client's locks. They change nothing.

// SetFastAlways makes c send every fresh acquire of a handle's that may go as a fast grant
// (fast.go) as one, not only those that follow an uncontended grant of the same handle within
// the fence counter's life: the model exercises the transaction under contention.
func SetFastAlways(c *Client, on bool) { c.fastAlways.Store(on) }

// ModelHold is a Client's view of one owner's holds on one lock (one side of a read-write
// lock), as the hold table has it.
type ModelHold struct {
	Present bool      // the hold table has an entry for (lock, owner)
	Count   int       // holds taken through this Client and not given back
	Held    bool      // a tenure is current
	Lost    error     // the loss that blocks re-entry until every hold is unlocked
	Orphans int       // holds Redis may count within the tenure that are nobody's (hold.orphans)
	Renew   bool      // the current tenure is in watchdog mode
	End     time.Time // the current tenure's conservative end (fixed leases)
	Token   int64     // the current tenure's fencing token
	Tenure  ModelTenure
}

// ModelTenure identifies one tenure (nil when none).
type ModelTenure struct{ t *tenure }

// Valid reports whether mt names a tenure.
func (mt ModelTenure) Valid() bool { return mt.t != nil }

// Same reports whether mt and o name the same tenure.
func (mt ModelTenure) Same(o ModelTenure) bool { return mt.t != nil && mt.t == o.t }

// Cause is why the tenure ended, nil while it lasts (or when mt names none).
func (mt ModelTenure) Cause() error {
	if mt.t == nil {
		return nil
	}
	mt.t.smu.Lock()
	defer mt.t.smu.Unlock()
	return mt.t.ended
}

// Token is the tenure's fencing token (0 when mt names none).
func (mt ModelTenure) Token() int64 {
	if mt.t == nil {
		return 0
	}
	return mt.t.token
}

func modelHold(m *Mutex, ctx context.Context) ModelHold {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return ModelHold{}
	}
	h := m.c.peek(m.keys, m.v, owner)
	if h == nil {
		return ModelHold{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	mh := ModelHold{Present: true, Count: h.count, Lost: h.lost, Held: h.cur != nil, Orphans: h.orphans}
	if t := h.cur; t != nil {
		mh.Renew, mh.End, mh.Token, mh.Tenure = t.renew, t.end, t.token, ModelTenure{t}
	}
	return mh
}

// ModelMutexHold is m's Client's view of the holds of ctx's owner on m.
func ModelMutexHold(m *Mutex, ctx context.Context) ModelHold { return modelHold(m, ctx) }

// ModelRWHold is the view of ctx's owner's write holds (read false) or read holds (read true).
func ModelRWHold(rw *RWMutex, ctx context.Context, read bool) ModelHold {
	if read {
		return modelHold(rw.r, ctx)
	}
	return modelHold(rw.w, ctx)
}

// ModelOwnerID is the owner id that an operation on m with ctx acts for, as Redis sees it.
func ModelOwnerID(m *Mutex, ctx context.Context) string {
	id, _ := m.ownerOf(ctx)
	return id
}

// ModelRWOwnerID is ModelOwnerID for a read-write lock.
func ModelRWOwnerID(rw *RWMutex, ctx context.Context) string { return ModelOwnerID(rw.w, ctx) }

// ModelEntry is one entry of a Client's hold table.
type ModelEntry struct {
	Lock, Owner string // the table key: lock key (+ side suffix) and owner id
	Refs, Count int
	Held        bool
	Lost        error
}

// ModelTables returns c's hold table and the number of locks with hand-off candidates.
func ModelTables(c *Client) (holds []ModelEntry, handoffs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, h := range c.holds {
		h.mu.Lock()
		holds = append(holds, ModelEntry{Lock: k.lock, Owner: k.owner, Refs: h.refs, Count: h.count, Held: h.cur != nil, Lost: h.lost})
		h.mu.Unlock()
	}
	return holds, len(c.handoffs)
}
