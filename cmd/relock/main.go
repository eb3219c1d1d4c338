package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/rlock"
)

// Exit codes (doc.go).
const (
	exitOK        = 0
	exitFailed    = 1
	exitUsage     = 2
	exitNothing   = 3
	exitAborted   = 4
	defaultURL    = "redis://127.0.0.1:6379"
	envURL        = "RELOCK_URL"
	usageCommands = `usage:
  relock inspect [flags] NAME
  relock list [flags] [PATTERN]
  relock watch [flags] NAME
  relock force-unlock [flags] NAME
run "relock COMMAND -h" for the flags; exit codes: 0 done, 1 failed, 2 bad usage,
3 nothing there, 4 not confirmed or changed hands since shown (nothing freed)`
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is what the flags say.
type config struct {
	url, prefix, pubsub string
	cacert              string
	json, yes           bool
	base64              bool // NAME (list: PATTERN) is given in standard base64
	timeout, interval   time.Duration
	walkTimeout         time.Duration // list: bound of the whole walk, 0 for none
	count               int
}

// env is one run of the command: its streams and the Redis it reads.
type env struct {
	cfg    config
	stdin  *bufio.Reader
	stdout io.Writer
	stderr io.Writer
	client *rlock.Client
}

// run runs the command line args (without the program's name) and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usageCommands)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	var nargs [2]int // least and most arguments
	switch cmd {
	case "inspect", "watch", "force-unlock":
		nargs = [2]int{1, 1}
	case "list":
		nargs = [2]int{0, 1}
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usageCommands)
		return exitOK
	default:
		fmt.Fprintf(stderr, "relock: unknown command %q\n%s\n", cmd, usageCommands)
		return exitUsage
	}
	e := &env{stdin: bufio.NewReader(stdin), stdout: stdout, stderr: stderr}
	pos, err := e.parse(cmd, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil && (len(pos) < nargs[0] || len(pos) > nargs[1]) {
		want := "one NAME"
		if cmd == "list" {
			want = "at most one PATTERN"
		}
		err = fmt.Errorf("%s takes %s, got %d arguments", cmd, want, len(pos))
	}
	if err == nil && e.cfg.base64 && len(pos) == 1 {
		b, derr := base64.StdEncoding.DecodeString(pos[0])
		if derr != nil {
			err = fmt.Errorf("--base64: %q is not standard base64: %v", pos[0], derr)
		}
		pos[0] = string(b)
	}
	if err == nil && pos != nil && cmd != "list" && pos[0] == "" {
		err = errors.New("empty NAME")
	}
	if err != nil {
		fmt.Fprintf(stderr, "relock %s: %v\n%s\n", cmd, err, usageCommands)
		return exitUsage
	}
	if code := e.connect(ctx); code != exitOK {
		return code
	}
	defer e.client.Close()
	switch cmd {
	case "inspect":
		return e.inspect(ctx, pos[0])
	case "list":
		pattern := ""
		if len(pos) == 1 {
			pattern = pos[0]
		}
		return e.list(ctx, pattern)
	case "watch":
		return e.watch(ctx, pos[0])
	default:
		return e.forceUnlock(ctx, pos[0])
	}
}

// parse parses the flags of cmd, which may come before, between or after its positional
// arguments, and returns those.
func (e *env) parse(cmd string, args []string) ([]string, error) {
	fs := flag.NewFlagSet("relock "+cmd, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	// The flag's default is empty and filled in after parsing: the usage (-h, a bad flag)
	// prints a flag's default, and $RELOCK_URL may hold a password.
	fs.StringVar(&e.cfg.url, "url", "", "the Redis to connect to: redis://[user:password@]host:port[/db], rediss:// for TLS, ?master_set=NAME for Sentinel (default $"+envURL+", else "+defaultURL+")")
	fs.StringVar(&e.cfg.cacert, "cacert", "", "PEM file of the CA that signed the server's certificate (rediss:// URLs; default: the system's)")
	fs.StringVar(&e.cfg.prefix, "prefix", rlock.DefaultKeyPrefix, "the key prefix of the Clients that made the locks")
	fs.StringVar(&e.cfg.pubsub, "pubsub", "auto", "the pub/sub mode of those Clients: auto, classic or sharded")
	fs.BoolVar(&e.cfg.json, "json", false, "machine-readable output (JSON; \"token\" is null for a holder whose token Redis does not know yet, a fast grant's, and 0 for none)")
	fs.BoolVar(&e.cfg.base64, "base64", false, "NAME (list: PATTERN) is given in standard base64, as --json's name_base64 shows a name that is not UTF-8")
	fs.DurationVar(&e.cfg.timeout, "timeout", 10*time.Second, "bound of the connection and of each command's work (list: each name's inspection: a name that takes longer is listed as not inspected, the others still are, exit code 1; watch: each refresh)")
	if cmd == "list" {
		fs.DurationVar(&e.cfg.walkTimeout, "walk-timeout", 0, "bound of the whole walk of the keyspace, its names' inspections included (0: none, until done or interrupted)")
	}
	if cmd == "watch" {
		fs.DurationVar(&e.cfg.interval, "interval", time.Second, "time between refreshes")
		fs.IntVar(&e.cfg.count, "count", 0, "stop after this many refreshes (0: until interrupted)")
	}
	if cmd == "force-unlock" {
		fs.BoolVar(&e.cfg.yes, "yes", false, "do not ask for confirmation (the force still frees only the holders read: a lock that changed hands meanwhile is left alone, exit code 4)")
	}
	// The flags and positional arguments may be interleaved, until "--": every argument
	// after it is positional (Go's flag package and POSIX), even one that looks like a flag.
	// flag.Parse stops at the first positional argument, so it is called again after each;
	// were "--" left to it, the arguments after the first positional one behind it would
	// be read as flags again.
	args, rest := splitAtTerminator(fs, args)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	pos = append(pos, rest...)
	if e.cfg.url == "" {
		e.cfg.url = os.Getenv(envURL)
	}
	if e.cfg.url == "" {
		e.cfg.url = defaultURL
	}
	switch {
	case e.cfg.timeout <= 0:
		return nil, fmt.Errorf("--timeout %v is not positive", e.cfg.timeout)
	case e.cfg.walkTimeout < 0:
		return nil, fmt.Errorf("--walk-timeout %v is negative", e.cfg.walkTimeout)
	case cmd == "watch" && e.cfg.interval <= 0:
		return nil, fmt.Errorf("--interval %v is not positive", e.cfg.interval)
	case e.cfg.count < 0:
		return nil, fmt.Errorf("--count %d is negative", e.cfg.count)
	}
	return pos, nil
}

// splitAtTerminator splits args at the "--" that ends the flags: the one where fs would
// read a flag (not the value of a flag before it, as in --prefix --), and returns the
// arguments before it and those after it (nil when there is none).
func splitAtTerminator(fs *flag.FlagSet, args []string) (flags, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return args[:i], args[i+1:]
		}
		if len(a) < 2 || a[0] != '-' {
			continue // a positional argument ("-" is one too)
		}
		name := strings.TrimPrefix(a[1:], "-")
		if strings.Contains(name, "=") {
			continue // -flag=value
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // an unknown flag: fs.Parse refuses it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		i++ // the flag's value, which may be "--"
	}
	return args, nil
}

// connect makes the Client, or reports why it cannot.
func (e *env) connect(ctx context.Context) int {
	opt, err := parseURL(e.cfg.url)
	if err != nil {
		// net/url's errors quote the whole URL: never echo its password.
		msg := strings.ReplaceAll(err.Error(), e.cfg.url, redactURL(e.cfg.url))
		fmt.Fprintf(e.stderr, "relock: --url: %s\n", msg)
		return exitUsage
	}
	if e.cfg.cacert != "" {
		if opt.TLSConfig == nil {
			fmt.Fprintf(e.stderr, "relock: --cacert needs a rediss:// URL\n")
			return exitUsage
		}
		pem, err := os.ReadFile(e.cfg.cacert)
		if err != nil {
			fmt.Fprintf(e.stderr, "relock: --cacert: %v\n", err)
			return exitUsage
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fmt.Fprintf(e.stderr, "relock: --cacert: no PEM certificate in %s\n", e.cfg.cacert)
			return exitUsage
		}
		opt.TLSConfig.RootCAs = pool
	}
	var mode rlock.PubSubMode
	switch e.cfg.pubsub {
	case "auto":
		mode = rlock.PubSubAuto
	case "classic":
		mode = rlock.PubSubClassic
	case "sharded":
		mode = rlock.PubSubSharded
	default:
		fmt.Fprintf(e.stderr, "relock: --pubsub %q is not auto, classic or sharded\n", e.cfg.pubsub)
		return exitUsage
	}
	var tw *tlsWatch
	if opt.TLSConfig != nil && opt.DialCtxFn == nil && opt.DialFn == nil {
		tw = &tlsWatch{unanswered: make(map[string]int)}
		opt.DialCtxFn = tw.dial
	}
	dctx, cancel := context.WithTimeout(ctx, e.cfg.timeout)
	defer cancel()
	c, err := rlock.DialContext(dctx, opt, rlock.WithKeyPrefix(e.cfg.prefix), rlock.WithPubSub(mode))
	if err != nil {
		if errors.Is(err, rlock.ErrInvalid) {
			fmt.Fprintf(e.stderr, "relock: %v\n", err)
			return exitUsage
		}
		if silent := tw.silent(); len(silent) > 0 && ctx.Err() == nil {
			// The bare "context deadline exceeded" does not say that the wait was for a
			// TLS handshake: a rediss:// URL of a plain Redis waits so.
			fmt.Fprintf(e.stderr, "relock: no answer to the TLS handshake from %s (%v): the server may not speak TLS: rediss:// is for a TLS port, a plain Redis takes redis://\n",
				strings.Join(silent, ", "), err)
			return exitFailed
		}
		fmt.Fprintf(e.stderr, "relock: %v\n", err)
		return exitFailed
	}
	e.client = c
	return exitOK
}

// fail reports err and returns its exit code.
func (e *env) fail(err error) int {
	fmt.Fprintf(e.stderr, "relock: %v\n", err)
	if errors.Is(err, rlock.ErrInvalid) {
		return exitUsage
	}
	return exitFailed
}

func (e *env) inspect(ctx context.Context, name string) int {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.timeout)
	defer cancel()
	in, err := e.client.Inspect(ctx, name)
	if err != nil {
		return e.fail(err)
	}
	if err := e.show(in); err != nil {
		return e.fail(err)
	}
	if holdsNothing(in) {
		return exitNothing
	}
	return exitOK
}

// holdsNothing reports whether in is "nothing there" (exit code 3): a name with no
// primitive, or a lock (a Mutex, FairMutex or RWMutex) that nobody holds, whatever Redis
// keeps of it besides (a fair lock's queue, a waiting writer's marker, holds whose leases
// have ended), as force-unlock finds it not held. A semaphore or a latch is there while its
// key is: its count or permits are its state, held or not.
func holdsNothing(in rlock.Info) bool {
	switch in.Kind {
	case rlock.KindNone:
		return true
	case rlock.KindMutex, rlock.KindFairMutex, rlock.KindRWMutex:
		return len(in.Holders) == 0
	}
	return false
}

// show writes in, as text or JSON.
func (e *env) show(in rlock.Info) error {
	if e.cfg.json {
		return writeJSON(e.stdout, jsonInfo(in))
	}
	return writeText(e.stdout, in)
}

// list walks the names matching pattern and inspects each. --timeout bounds each name's
// Inspect, not the walk (a large keyspace takes longer than any one bound): a name whose
// inspection runs out of it is listed as not inspected (and told on stderr), and the walk
// goes on, so that one slow name does not stall the listing; the exit code is then 1. The
// walk ends when SCAN is done, at --walk-timeout if set, or when interrupted; a server that
// stops answering fails it by the connection's own timeout (rueidis's ConnWriteTimeout).
func (e *env) list(parent context.Context, pattern string) int {
	ctx := parent
	if e.cfg.walkTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.walkTimeout)
		defer cancel()
	}
	// walkEnded reports a walk that its own bound or Ctrl-C ended: not the fault of the name
	// being read at that moment.
	walkEnded := func() int {
		if parent.Err() != nil {
			fmt.Fprintf(e.stderr, "relock: list: interrupted: the listing is incomplete\n")
		} else {
			fmt.Fprintf(e.stderr, "relock: list: --walk-timeout %v reached: the listing is incomplete (%v)\n", e.cfg.walkTimeout, ctx.Err())
		}
		return exitFailed
	}
	header := false
	code := exitOK
	for name, err := range e.client.List(ctx, pattern) {
		if err != nil {
			if ctx.Err() != nil {
				return walkEnded()
			}
			return e.fail(err)
		}
		ictx, cancel := context.WithTimeout(ctx, e.cfg.timeout)
		if testHookListName != nil {
			testHookListName(ictx, name)
		}
		in, err := e.client.Inspect(ictx, name)
		timedOut := err != nil && ictx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil && !timedOut && !errors.Is(err, rlock.ErrWrongType) {
			if ctx.Err() != nil {
				return walkEnded()
			}
			return e.fail(err)
		}
		if timedOut {
			// This name's bound, not the walk's: the others may answer in time.
			fmt.Fprintf(e.stderr, "relock: list: %s: not inspected within --timeout %v: %v\n", quoteName(name), e.cfg.timeout, err)
			code = exitFailed
		}
		if e.cfg.json {
			var v any = jsonInfo(in)
			if timedOut {
				v = jsonNotInspected{Name: name, NameBase64: base64IfNotUTF8(name), Error: fmt.Sprintf("not inspected within --timeout %v", e.cfg.timeout)}
			}
			if err := writeJSON(e.stdout, v); err != nil {
				return e.fail(err)
			}
			continue
		}
		if !header {
			fmt.Fprintf(e.stdout, listFormat, "NAME", "KIND", "TTL", "HOLDERS", "WAITERS", "HELD BY")
			header = true
		}
		if timedOut {
			fmt.Fprintf(e.stdout, listFormat, quoteName(name), "?", "?", "?", "?", fmt.Sprintf("(not inspected within --timeout %v)", e.cfg.timeout))
			continue
		}
		fmt.Fprintf(e.stdout, listFormat, quoteName(name), kindText(in), formatTTL(in), holderCount(in), waiterCount(in), heldBy(in))
	}
	return code
}

// jsonNotInspected is list's JSON line for a name whose inspection ran out of --timeout.
type jsonNotInspected struct {
	Name       string `json:"name"`
	NameBase64 string `json:"name_base64,omitempty"` // see jsonView
	Error      string `json:"error"`
}

const listFormat = "%-32s %-30s %-8s %-8v %-8v %s\n"

func (e *env) watch(ctx context.Context, name string) int {
	tty := isTerminal(e.stdout)
	t := time.NewTimer(0)
	defer t.Stop()
	for n := 0; e.cfg.count == 0 || n < e.cfg.count; n++ {
		select {
		case <-ctx.Done():
			return exitOK // Ctrl-C: the end of a watch
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, e.cfg.timeout)
		in, err := e.client.Inspect(rctx, name)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			return e.fail(err)
		}
		switch {
		case e.cfg.json:
		case tty:
			fmt.Fprint(e.stdout, "\x1b[H\x1b[2J") // home, clear the screen
			fmt.Fprintf(e.stdout, "every %v, Ctrl-C to stop\n\n", e.cfg.interval)
		case n > 0:
			fmt.Fprintln(e.stdout)
		}
		if err := e.show(in); err != nil {
			return e.fail(err)
		}
		t.Reset(e.cfg.interval)
	}
	return exitOK
}

func (e *env) forceUnlock(parent context.Context, name string) int {
	ctx, cancel := context.WithTimeout(parent, e.cfg.timeout)
	defer cancel()
	in, err := e.client.Inspect(ctx, name)
	if err != nil {
		return e.fail(err)
	}
	switch in.Kind {
	case rlock.KindMutex, rlock.KindFairMutex, rlock.KindRWMutex, rlock.KindNone:
	default:
		return e.fail(fmt.Errorf("force-unlock %q: a %s is not a lock: force-unlock frees locks only", name, in.Kind))
	}
	if holdsNothing(in) {
		return e.nothingFreed(name, in.Kind, fmt.Sprintf("%s is not held: nothing to free", quoteName(name)), exitNothing)
	}
	if !e.cfg.yes {
		// The question goes to stderr, so that stdout says only what was done.
		fmt.Fprintf(e.stderr, "%s (%s) is held by:\n", quoteName(name), in.Kind)
		for _, h := range in.Holders {
			fmt.Fprintf(e.stderr, "  %s\n", describeHolder(h))
		}
		fmt.Fprintf(e.stderr, "Free it and wake its waiters? The holders learn of the loss at their next renewal. [y/N] ")
		answer, answered := e.readAnswer(parent)
		if !answered {
			fmt.Fprintln(e.stderr) // end the question's line
			return e.nothingFreed(name, in.Kind, "interrupted before an answer: not confirmed: nothing freed", exitAborted)
		}
		answer = strings.ToLower(strings.TrimSpace(answer))
		if answer != "y" && answer != "yes" {
			return e.nothingFreed(name, in.Kind, "not confirmed: nothing freed", exitAborted)
		}
		// --timeout bounds the work, not the operator's reading: the force gets a bound of
		// its own.
		var cancelForce context.CancelFunc
		ctx, cancelForce = context.WithTimeout(parent, e.cfg.timeout)
		defer cancelForce()
	}
	if testHookBeforeForce != nil {
		testHookBeforeForce()
	}
	// The answer (or --yes) is for the holders shown, not for whoever holds the lock when
	// the force runs: the force frees nothing when a holder not shown, or another tenure
	// (fencing token), holds it then, in the same script as the check. (The fair lock's
	// force tells every waiter of every Client, and a Mutex's and a SpinMutex's waiters wake
	// to it as well.)
	freed, err := e.client.ForceUnlockSeen(ctx, in)
	if errors.Is(err, rlock.ErrConflict) {
		return e.nothingFreed(name, in.Kind, fmt.Sprintf("%s changed hands since it was shown: nothing freed (run force-unlock again)", quoteName(name)), exitAborted)
	}
	if errors.Is(err, rlock.ErrWrongType) {
		// It was read as a lock of in.Kind a moment ago: it was freed and the name taken
		// since as another kind (a read-write lock for a mutex, a semaphore...).
		return e.nothingFreed(name, in.Kind, fmt.Sprintf("%s changed hands since it was shown (it is no longer a %s): nothing freed (run force-unlock again)", quoteName(name), in.Kind), exitAborted)
	}
	if err != nil {
		return e.fail(err)
	}
	if !freed {
		return e.nothingFreed(name, in.Kind, fmt.Sprintf("%s was freed meanwhile: nothing to free", quoteName(name)), exitNothing)
	}
	if e.cfg.json {
		return jsonCode(e, writeJSON(e.stdout, jsonForced{Name: name, NameBase64: base64IfNotUTF8(name), Kind: string(in.Kind), Freed: jsonInfo(in).Holders}))
	}
	token := ""
	if in.Token != 0 {
		token = fmt.Sprintf(", token %d", in.Token)
	}
	fmt.Fprintf(e.stdout, "freed %s (%s%s), held by:\n", quoteName(name), in.Kind, token)
	for _, h := range in.Holders {
		fmt.Fprintf(e.stdout, "  %s\n", describeHolder(h))
	}
	fmt.Fprintf(e.stdout, "its waiters were told (Clients subscribed: %d)\n", in.Subscribers+in.ReadSubscribers)
	return exitOK
}

// readAnswer reads the operator's answer, a line of standard input, and reports false when
// ctx ends first: Ctrl-C or SIGTERM (main's context), which would otherwise leave the command
// at the question until a line came or standard input closed. The read itself cannot be
// interrupted: it goes on in a goroutine of its own, which ends with the line or the input's
// end (a command exits right after).
func (e *env) readAnswer(ctx context.Context) (string, bool) {
	got := make(chan string, 1)
	go func() {
		s, _ := e.stdin.ReadString('\n')
		got <- s
	}()
	select {
	case s := <-got:
		return s, true
	case <-ctx.Done():
		return "", false
	}
}

// testHookListName, when set (by tests only), runs for each name list found, before it
// inspects it, with the context of the name's inspection (bounded by --timeout).
var testHookListName func(ctx context.Context, name string)

// testHookBeforeForce, when set (by tests only), runs after the holders were shown and the
// force confirmed, just before the force is sent.
var testHookBeforeForce func()

// nothingFreed ends a force-unlock that freed nothing with code: msg on stdout, or with
// --json the JSON object of a force-unlock with no holder freed on stdout and msg on
// stderr, so that stdout stays JSON in every outcome.
func (e *env) nothingFreed(name string, kind rlock.Kind, msg string, code int) int {
	if !e.cfg.json {
		fmt.Fprintln(e.stdout, msg)
		return code
	}
	fmt.Fprintln(e.stderr, msg)
	if err := writeJSON(e.stdout, jsonForced{Name: name, NameBase64: base64IfNotUTF8(name), Kind: string(kind), Freed: []jsonHolder{}}); err != nil {
		return e.fail(err)
	}
	return code
}

// parseURL is rueidis.ParseURL(s), except that an empty database path, "redis://host:6379/"
// (a trailing slash, as many tools print a URL), is read as no path: database 0, or the one
// ?db= gives. Any other path that is not "/" and a database number is still refused.
func parseURL(s string) (rueidis.ClientOption, error) {
	if u, err := url.Parse(s); err == nil && u.Scheme != "unix" && u.Opaque == "" && u.Path == "/" {
		u.Path, u.RawPath = "", ""
		s = u.String()
	}
	return rueidis.ParseURL(s)
}

// redactURL is u with the password of its user info, if any, replaced by "xxxxx". It
// works on text that net/url may have refused to parse.
func redactURL(u string) string {
	i := strings.Index(u, "://")
	if i < 0 {
		return u
	}
	rest := u[i+3:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return u
	}
	colon := strings.Index(rest[:at], ":")
	if colon < 0 {
		return u
	}
	return u[:i+3] + rest[:colon+1] + "xxxxx" + rest[at:]
}

func jsonCode(e *env, err error) int {
	if err != nil {
		return e.fail(err)
	}
	return exitOK
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
