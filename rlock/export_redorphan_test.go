package rlock

import "context"

// RedInstanceClientHolds is, for the instance of each Client, the holds the Client counts
// for the caller's owner and the orphans of its tenure (-1, -1: no hold), and whether a tenure
// of the owner lives there (its lease renewed or within its fixed end), read together.
func RedInstanceClientHolds(r *RedLock, ctx context.Context) (count, orphans map[*Client]int, tenure map[*Client]bool) {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return nil, nil, nil
	}
	count, orphans, tenure = make(map[*Client]int), make(map[*Client]int), make(map[*Client]bool)
	for _, m := range r.insts {
		h := m.instHold(owner)
		if h == nil {
			count[m.c], orphans[m.c] = -1, -1
			continue
		}
		h.mu.Lock()
		count[m.c], orphans[m.c], tenure[m.c] = h.count, h.orphans, h.cur != nil
		h.mu.Unlock()
	}
	return count, orphans, tenure
}

// RedOwnerField is the hash field of the caller's owner on r's instances ("" when invalid).
func RedOwnerField(r *RedLock, ctx context.Context) string {
	owner, _ := r.ownerOf(ctx)
	return owner
}

// HoldRedInstanceOpOf is HoldRedInstanceOp for the caller's owner (a context owner too).
func HoldRedInstanceOpOf(r *RedLock, ctx context.Context, c *Client) (release func(), ok bool) {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return nil, false
	}
	for _, m := range r.insts {
		if m.c != c {
			continue
		}
		h := m.instHold(owner)
		if h == nil || h.lockOp(context.Background()) != nil {
			return nil, false
		}
		return h.unlockOp, true
	}
	return nil, false
}
