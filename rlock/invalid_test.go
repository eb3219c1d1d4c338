package rlock_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/rlock"
)

// invalidHandles are handles that are not made by a Client, or made by a nil or zero one:
// every method of each must return an error wrapping ErrInvalid (or, for a method without
// an error, its documented safe result) and never panic.
func invalidHandles() map[string]any {
	var nilClient *rlock.Client
	zeroClient := &rlock.Client{}
	var zeroRW rlock.RWMutex
	return map[string]any{
		"nil Mutex":                 (*rlock.Mutex)(nil),
		"zero Mutex":                &rlock.Mutex{},
		"nil FairMutex":             (*rlock.FairMutex)(nil),
		"zero FairMutex":            &rlock.FairMutex{},
		"FairMutex of zero Mutex":   &rlock.FairMutex{Mutex: &rlock.Mutex{}},
		"nil SpinMutex":             (*rlock.SpinMutex)(nil),
		"zero SpinMutex":            &rlock.SpinMutex{},
		"nil RWMutex":               (*rlock.RWMutex)(nil),
		"zero RWMutex":              &zeroRW,
		"nil ReadLocker":            (*rlock.ReadLocker)(nil),
		"zero ReadLocker":           &rlock.ReadLocker{},
		"RLocker of nil RWMutex":    (*rlock.RWMutex)(nil).RLocker(),
		"RLocker of zero RWMutex":   zeroRW.RLocker(),
		"nil Semaphore":             (*rlock.Semaphore)(nil),
		"zero Semaphore":            &rlock.Semaphore{},
		"nil PermitSemaphore":       (*rlock.PermitSemaphore)(nil),
		"zero PermitSemaphore":      &rlock.PermitSemaphore{},
		"nil CountDownLatch":        (*rlock.CountDownLatch)(nil),
		"zero CountDownLatch":       &rlock.CountDownLatch{},
		"nil MultiLock":             (*rlock.MultiLock)(nil),
		"zero MultiLock":            &rlock.MultiLock{},
		"MultiLock of no member":    rlock.NewMultiLock(),
		"MultiLock of a nil member": rlock.NewMultiLock(nil),
		"MultiLock of nil Mutex":    rlock.NewMultiLock((*rlock.Mutex)(nil)),
		"MultiLock of zero Mutex":   rlock.NewMultiLock(&rlock.Mutex{}),
		"nil Client":                nilClient,
		"zero Client":               zeroClient,
		"nil Client's Mutex":        nilClient.Mutex("x"),
		"nil Client's FairMutex":    nilClient.FairMutex("x"),
		"nil Client's SpinMutex":    nilClient.SpinMutex("x"),
		"nil Client's RWMutex":      nilClient.RWMutex("x"),
		"nil Client's RLocker":      nilClient.RWMutex("x").RLocker(),
		"nil Client's Semaphore":    nilClient.Semaphore("x"),
		"nil Client's permits":      nilClient.PermitSemaphore("x"),
		"nil Client's latch":        nilClient.CountDownLatch("x"),
		"nil Client's MultiLock":    nilClient.MultiLock("x", "y"),
		"zero Client's Mutex":       zeroClient.Mutex("x"),
		"zero Client's RWMutex":     zeroClient.RWMutex("x"),
		"zero Client's Semaphore":   zeroClient.Semaphore("x"),
		"zero Client's permits":     zeroClient.PermitSemaphore("x"),
		"zero Client's latch":       zeroClient.CountDownLatch("x"),
		"zero Client's MultiLock":   zeroClient.MultiLock("x"),
	}
}

// argFor returns a valid argument of type t, so that an error can come only from the
// receiver.
func argFor(t *testing.T, typ reflect.Type) reflect.Value {
	switch typ {
	case reflect.TypeFor[context.Context]():
		return reflect.ValueOf(context.Background())
	case reflect.TypeFor[time.Duration]():
		return reflect.ValueOf(50 * time.Millisecond)
	case reflect.TypeFor[rlock.Info]():
		return reflect.ValueOf(rlock.Info{Name: "x", Kind: rlock.KindMutex})
	}
	switch typ.Kind() {
	case reflect.Int, reflect.Int64:
		return reflect.ValueOf(1).Convert(typ)
	case reflect.String:
		return reflect.ValueOf("x")
	}
	t.Fatalf("no argument for %v", typ)
	return reflect.Value{}
}

// TestInvalidHandles calls every exported method of every kind of invalid handle.
func TestInvalidHandles(t *testing.T) {
	errType := reflect.TypeFor[error]()
	for name, h := range invalidHandles() {
		v := reflect.ValueOf(h)
		for i := range v.NumMethod() {
			method := v.Type().Method(i)
			what := name + "." + method.Name
			mt := method.Type // with the receiver as its first parameter
			args := []reflect.Value{}
			fixed := mt.NumIn() - 1
			if mt.IsVariadic() {
				fixed-- // call with no variadic argument
			}
			for j := 1; j <= fixed; j++ {
				args = append(args, argFor(t, mt.In(j)))
			}
			var out []reflect.Value
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("%s panicked: %v", what, p)
					}
				}()
				out = v.Method(i).Call(args)
			}()
			checkInvalidResult(t, what, method.Name, out, errType)
		}
	}
}

// checkInvalidResult checks what an invalid handle's method returned: an error wrapping
// ErrInvalid, or its documented safe result.
func checkInvalidResult(t *testing.T, what, method string, out []reflect.Value, errType reflect.Type) {
	t.Helper()
	if last := len(out) - 1; last >= 0 && out[last].Type() == errType {
		if method == "Close" {
			require.True(t, out[last].IsNil(), "%s: Close of a nil or zero Client does nothing", what)
			return
		}
		err, _ := out[last].Interface().(error)
		require.ErrorIs(t, err, rlock.ErrInvalid, what)
		for _, r := range out[:last] { // the other results are zero
			require.True(t, r.IsZero(), "%s: %v beside the error", what, r)
		}
		return
	}
	switch res := out[0].Interface().(type) {
	case string: // Name (as given, if given), Key, ID
		if method == "Name" && res == "x" {
			return
		}
		require.Empty(t, res, what)
	case <-chan struct{}: // Done
		select {
		case <-res:
		default:
			t.Fatalf("%s: Done's channel is not closed", what)
		}
	case context.Context:
		if method == "HoldContext" {
			require.Error(t, res.Err(), what)
			require.ErrorIs(t, context.Cause(res), rlock.ErrInvalid, what)
			out[1].Interface().(context.CancelFunc)()
			return
		}
		// WithNewOwner: a context whose owner is invalid.
		require.Equal(t, "WithNewOwner", method, what)
		id, ok := rlock.OwnerFrom(res)
		require.True(t, ok, what)
		require.Empty(t, id, what)
	default:
		// A handle (a Client's constructors, RLocker): itself invalid, checked as one of
		// invalidHandles, or here for the constructors of a nil or zero Client.
		require.False(t, out[0].IsNil(), "%s returned nil", what)
		if l, ok := res.(interface{ Lock(context.Context) error }); ok {
			require.ErrorIs(t, l.Lock(context.Background()), rlock.ErrInvalid, what)
		}
	}
}

// Do and TryDo on invalid handles return what Lock and TryLock do: an error wrapping
// ErrInvalid; fn does not run.
func TestInvalidHandles_Do(t *testing.T) {
	fn := func(context.Context) error { t.Fatal("fn ran"); return nil }
	for name, h := range invalidHandles() {
		l, ok := h.(rlock.Holder)
		if !ok {
			continue
		}
		require.ErrorIs(t, rlock.Do(bg, l, fn), rlock.ErrInvalid, name)
		ran, err := rlock.TryDo(bg, l, 0, 0, fn)
		require.ErrorIs(t, err, rlock.ErrInvalid, name)
		require.False(t, ran, name)
	}
	var nilMutex *rlock.Mutex
	require.ErrorIs(t, rlock.Do(bg, nilMutex, fn), rlock.ErrInvalid)
	err := rlock.Do(bg, nilMutex, fn)
	require.True(t, strings.HasPrefix(err.Error(), "rlock: invalid argument: nil lock handle"), err.Error())
	require.False(t, errors.Is(err, rlock.ErrNotHeld))
}
