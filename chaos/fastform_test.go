package chaos

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/relock-go/relock/internal/redistest"
)

// TestLockHeld_fastForm: the fault tests' check that a lock is still held (lockHeld) reads a
// Mutex's fast form (docs/DESIGN.md section 5; written by hand: nothing writes it yet) as
// held and its ghost (its sequence number spent in the fence) as free, as relock's readers
// do. Before, those checks asked EXISTS: a ghost read held.
func TestLockHeld_fastForm(t *testing.T) {
	srv := redistest.Start(t)
	key := "{fastform}"
	if lockHeld(t, srv, key) {
		t.Fatal("no key: held")
	}
	srv.Do(t, "HSET", key, "token", "~h:a 7.3", "w", "1")
	srv.Do(t, "PEXPIRE", key, "10000")
	if !lockHeld(t, srv, key) {
		t.Fatal("a fast form: free")
	}
	tm := srv.Do(t, "TIME")
	now, err := tm.AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := strconv.ParseInt(now[0], 10, 64)
	srv.Do(t, "SET", key+":fence", fmt.Sprintf("1000/7.3/%d", sec*1000+60000), "PX", "60000")
	if lockHeld(t, srv, key) {
		t.Fatal("a ghost: held")
	}
	srv.Do(t, "HSET", key, "h:a", "1") // the owner's own count rules
	if !lockHeld(t, srv, key) {
		t.Fatal("a fast form with its owner's count: free")
	}
	srv.Do(t, "DEL", key)
	srv.Do(t, "SET", key, "user data")
	if !lockHeld(t, srv, key) {
		t.Fatal("a key of another type: free")
	}
}

// TestLockHeld_fastString: lockHeld reads a fast form written as a string (the fast grant's
// SET: "~<owner> <seq>") as its hash form: held, and free when the fence records its sequence
// number as spent (a string ghost); a user's string is held (another type). Before, every
// string read held.
func TestLockHeld_fastString(t *testing.T) {
	srv := redistest.Start(t)
	key := "{faststring}"
	srv.Do(t, "SET", key, "~h:a:1 c1.7", "PX", "30000")
	if !lockHeld(t, srv, key) {
		t.Fatal("a string fast form: free")
	}
	tm := srv.Do(t, "TIME")
	now, err := tm.AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := strconv.ParseInt(now[0], 10, 64)
	srv.Do(t, "SET", key+":fence", fmt.Sprintf("1000/c1.7/%d", sec*1000+60000), "PX", "60000")
	if lockHeld(t, srv, key) {
		t.Fatal("a string ghost: held")
	}
	srv.Do(t, "SET", key, "user data")
	if !lockHeld(t, srv, key) {
		t.Fatal("a user's string: free")
	}
}
