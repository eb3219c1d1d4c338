package rlock

import "context"

// RedInstanceClientHolds is, for the instance of each Client, the holds the Client counts
// for the caller's owner and the orphans of its tenure (-1, -1: no hold).
func RedInstanceClientHolds(r *RedLock, ctx context.Context) (count, orphans map[*Client]int) {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return nil, nil
	}
	count, orphans = make(map[*Client]int), make(map[*Client]int)
	for _, m := range r.insts {
		h := m.instHold(owner)
		if h == nil {
			count[m.c], orphans[m.c] = -1, -1
			continue
		}
		h.mu.Lock()
		count[m.c], orphans[m.c] = h.count, h.orphans
		h.mu.Unlock()
	}
	return count, orphans
}
