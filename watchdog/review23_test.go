package watchdog

import (
	"errors"
	"testing"
	"time"
)

// TestAdd_argumentErrorsWrapErrInvalid: ErrInvalid's godoc, "wrapped by the errors of New and
// Add that refuse an argument"; New refuses a nil Option since 6388195, Add(nil) panics.
func TestAdd_argumentErrorsWrapErrInvalid(t *testing.T) {
	w := newWD(t, &fakeRenewer{})
	l := &Lease{TTL: time.Minute, OnLost: func(*Lease, error) {}}
	if err := w.Add(l, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(l, time.Now()); !errors.Is(err, ErrInvalid) {
		t.Errorf("Add of a lease already registered: %v, want ErrInvalid", err)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Add(nil) panicked: %v", p)
			}
		}()
		if err := w.Add(nil, time.Now()); !errors.Is(err, ErrInvalid) {
			t.Errorf("Add(nil): %v, want ErrInvalid", err)
		}
	}()
}
