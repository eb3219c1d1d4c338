package backoff

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestJitter_withinTheUpperHalfAndSpread(t *testing.T) {
	for _, d := range []time.Duration{2, 3, 10 * time.Millisecond, time.Second} {
		seen := map[time.Duration]bool{}
		for range 1000 {
			p := Jitter(d)
			if p < d/2 || p > d {
				t.Fatalf("Jitter(%v) = %v, outside [%v, %v]", d, p, d/2, d)
			}
			seen[p] = true
		}
		// 1000 draws of a uniform choice among at least 2 values: all the same is a
		// chance of 2^-999 (and certain without jitter).
		if len(seen) < 2 {
			t.Fatalf("Jitter(%v) drew one value in 1000 draws: no jitter", d)
		}
	}
	for _, d := range []time.Duration{-time.Second, 0, 1} {
		if p := Jitter(d); p != d {
			t.Fatalf("Jitter(%v) = %v, want it unchanged", d, p)
		}
	}
}

func TestExp_doublesToTheCeilingAndResets(t *testing.T) {
	b := New(10*time.Millisecond, 70*time.Millisecond)
	steps := []time.Duration{10, 20, 40, 70, 70}
	for round := range 2 {
		for i, s := range steps {
			s *= time.Millisecond
			if p := b.Next(); p < s/2 || p > s {
				t.Fatalf("round %d pause %d = %v, want within [%v, %v]", round, i, p, s/2, s)
			}
		}
		b.Reset()
	}
	low := New(time.Second, time.Millisecond)
	if p := low.Next(); p < time.Second/2 || p > time.Second {
		t.Fatalf("a ceiling below the floor: pause %v, want the floor's [500ms, 1s]", p)
	}
	var zero Exp
	if p := zero.Next(); p != 0 {
		t.Fatalf("zero Exp paused %v", p)
	}
}
