package rlock

import (
	"errors"
	"fmt"
	"strings"
)

// The texts of rlock's errors carry one "rlock: " prefix, at the outermost layer: the
// sentinels' texts start with it (so that each reads well alone), and where an rlock error
// wraps another error of this module (a sentinel, a wrapped error, a watchdog or pubsub
// error), it shows that error's text without its package prefix. So a loss reads
// `rlock: lock "x": lock lost: lease gone`, not `rlock: lock "x": rlock: lock lost: watchdog:
// lease gone`. The wrapped errors keep their identity: errors.Is and errors.As see them.

// modulePrefixes are the prefixes of this module's packages' error texts.
var modulePrefixes = []string{"rlock: ", "watchdog: ", "pubsub: "}

// errorf is [fmt.Errorf] for rlock's own errors: the text is "rlock: " and format, with every
// error among args shown by its bare text (bareText); %w wraps the errors themselves.
func errorf(format string, args ...any) error {
	shown := make([]any, len(args))
	for i, a := range args {
		if e, ok := a.(error); ok && e != nil {
			shown[i] = bare{e}
		} else {
			shown[i] = a
		}
	}
	f := fmt.Errorf(format, shown...)
	msg := "rlock: " + f.Error()
	switch u := f.(type) {
	case interface{ Unwrap() error }:
		return &wrapError{msg: msg, err: unbare(u.Unwrap())}
	case interface{ Unwrap() []error }:
		ws := u.Unwrap()
		errs := make([]error, len(ws))
		for i, e := range ws {
			errs[i] = unbare(e)
		}
		return &wrapErrors{msg: msg, errs: errs}
	}
	return errors.New(msg)
}

// bare shows an error by its bare text in errorf.
type bare struct{ err error }

func (b bare) Error() string { return bareText(b.err) }

func unbare(err error) error {
	if b, ok := err.(bare); ok {
		return b.err
	}
	return err
}

// bareText is err's text without the package prefix of this module's errors; an
// [errors.Join] of errors is shown line by line so.
func bareText(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if _, ours := err.(*wrapErrors); !ours {
			var lines, bares []string
			for _, e := range j.Unwrap() {
				if e != nil {
					lines = append(lines, e.Error())
					bares = append(bares, bareText(e))
				}
			}
			if strings.Join(lines, "\n") == err.Error() {
				return strings.Join(bares, "\n")
			}
		}
	}
	s := err.Error()
	for _, p := range modulePrefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest
		}
	}
	return s
}

// wrapError and wrapErrors are errorf's errors: fmt's, with the text errorf made.
type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.err }

type wrapErrors struct {
	msg  string
	errs []error
}

func (e *wrapErrors) Error() string   { return e.msg }
func (e *wrapErrors) Unwrap() []error { return e.errs }
