package main

// Bad and extreme input to the CLI (the boundshunt survey): each case records the exit code
// and output.

import (
	"strings"
	"testing"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

func TestBoundsHunt_cli(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []string{"\xff\xfe", "a\nb", "sp ace", "{t}x"} {
		if err := c.Mutex(n).Lock(bg); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Mutex("ctxowned").Lock(rlock.WithOwner(bg, "evil\nNAME  fake-line")); err != nil {
		t.Fatal(err)
	}
	cases := [][]string{
		{"inspect", "--url", url, "a\nb"},
		{"inspect", "--url", url, "ctxowned"},
		{"list", "--url", url, "ctx*"},
		{"inspect", "--url", url, ""},
		{"inspect", "--url", url, "--timeout", "0", "x"},
		{"inspect", "--url", url, "--timeout", "-1s", "x"},
		{"inspect", "--url", url, "--timeout", "2562047h", "x"},
		{"inspect", "--url", url, "--timeout", "1ns", "x"},
		{"inspect", "--url", url, "--prefix", "{", "x"},
		{"inspect", "--url", url, "--prefix", "", "x"},
		{"inspect", "--url", url, "--pubsub", "bogus", "x"},
		{"inspect", "--url", url, "x", "y"},
		{"inspect", "--url", "not a url", "x"},
		{"inspect", "--url", "redis://user:secret@127.0.0.1:1", "--timeout", "200ms", "x"},
		{"inspect", "--url", url, strings.Repeat("n", 1<<20)},
		{"inspect", "--url", url, "\xff\xfe"},
		{"inspect", "--url", url, "--json", "\xff\xfe"},
		{"list", "--url", url, "--json"},
		{"list", "--url", url},
		{"list", "--url", url, "["},
		{"list", "--url", url, "--walk-timeout", "-1s"},
		{"list", "--url", url, "a", "b"},
		{"watch", "--url", url, "--interval", "0", "x"},
		{"watch", "--url", url, "--count", "-1", "x"},
		{"watch", "--url", url, "--count", "1", "--interval", "2562047h", "x"},
		{"watch", "--url", url, "--count", "99999999999999999999", "x"},
		{"force-unlock", "--url", url, "x"},
		{"force-unlock", "--url", url, "--yes", "--json", "\xff\xfe"},
		{"bogus"},
		{},
	}
	for _, args := range cases {
		out, errOut, code := relock(t, "n\n", args...)
		show := strings.Join(args, " ")
		if len(show) > 120 {
			show = show[:120] + "..."
		}
		if len(out) > 400 {
			out = out[:400] + "..."
		}
		if i := strings.Index(errOut, "\nCommands"); i >= 0 {
			errOut = errOut[:i]
		}
		if len(errOut) > 300 {
			errOut = errOut[:300] + "..."
		}
		t.Logf("CASE %q -> code %d\n  stdout %q\n  stderr %q", show, code, out, errOut)
	}
}
