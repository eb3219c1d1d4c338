package lua

// The scripts of the counting semaphore (rlock.Semaphore) and of the semaphore of expirable
// permits (rlock.PermitSemaphore). Their contracts are in the headers of the .lua files. Every
// script that changes something takes a request id and remembers the ids it applied for a
// while, so that a request whose reply was lost can be sent again and answered, not applied
// twice; a permit semaphore's acquire is made idempotent by its permit id instead.
var (
	// SemSet sets a semaphore's permits if it does not exist (sem_set.lua).
	SemSet = load("sem_set")
	// SemAcquire takes n permits of a semaphore, all at once or none (sem_acquire.lua).
	SemAcquire = load("sem_acquire")
	// SemRelease adds n permits to a semaphore and wakes its waiters (sem_release.lua).
	SemRelease = load("sem_release")
	// SemDrain takes every available permit of a semaphore (sem_drain.lua); its answer is
	// an integer below 2^53 and a bulk reply of the count's digits from 2^53 on (AsInt64
	// reads both).
	SemDrain = load("sem_drain")
	// SemDelete deletes a semaphore (sem_delete.lua).
	SemDelete = load("sem_delete")

	// PsemSet sets a permit semaphore's permits if it does not exist (psem_set.lua).
	PsemSet = load("psem_set")
	// PsemAdd adds to a permit semaphore's permits (psem_add.lua).
	PsemAdd = load("psem_add")
	// PsemAcquire takes one permit of a permit semaphore with a lease (psem_acquire.lua).
	PsemAcquire = load("psem_acquire")
	// PsemRelease gives back one permit of a permit semaphore (psem_release.lua).
	PsemRelease = load("psem_release")
	// PsemExtend sets a new lease on a live permit (psem_extend.lua).
	PsemExtend = load("psem_extend")
	// PsemState reads a permit semaphore: its permits, those held, a permit's lease
	// (psem_state.lua).
	PsemState = load("psem_state")
	// PsemDelete deletes a permit semaphore and its leases (psem_delete.lua).
	PsemDelete = load("psem_delete")
)
