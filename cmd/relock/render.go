package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/relock-go/relock/rlock"
)

// writeText writes in for a reader: a block of fields, then the holders and waiters as
// tables.
func writeText(w io.Writer, in rlock.Info) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(k string, v any) { fmt.Fprintf(tw, "%-18s%v\n", k, v) }
	field("name", quoteName(in.Name))
	field("kind", kindText(in))
	field("key", quoteName(in.Key))
	field("ttl", formatTTL(in))
	switch in.Kind {
	case rlock.KindMutex, rlock.KindFairMutex, rlock.KindRWMutex, rlock.KindNone:
		field("token", holderTokenText(in))
		field("last token", tokenText(in.LastToken))
	case rlock.KindPermitSemaphore:
		field("permits", in.Count)
		// Lowered below the live permits (AddPermits), none is available until enough end.
		field("available", max(in.Count-int64(len(in.Holders)), 0))
	case rlock.KindSemaphore:
		field("available", in.Count)
	default:
		field("count", in.Count)
	}
	if in.Kind == rlock.KindMutex || in.Kind == rlock.KindFairMutex {
		field("contended", yesNo(in.Contended, "a waiter was refused during this tenure"))
	}
	field("subscribers", in.Subscribers)
	if in.Kind == rlock.KindRWMutex {
		field("read subscribers", in.ReadSubscribers)
	}
	field("server time", formatTime(in.ServerTime))
	if holdersRecorded(in) {
		field("holders", len(in.Holders))
	} else {
		field("holders", "not recorded in Redis for a "+string(in.Kind)+" (only the count above is)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(in.Holders) > 0 {
		fmt.Fprintln(tw, "  OWNER\tMODE\tHOLDS\tTTL\tSINCE\tCLIENT")
		for _, h := range in.Holders {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\n", quoteName(h.Owner), orDash(h.Mode), h.Holds, formatDur(h.TTL), formatTime(h.Since), describeClient(h.ClientID, h.Client))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch in.Kind {
	case rlock.KindFairMutex, rlock.KindRWMutex:
		field("waiters", len(in.Waiters))
	case rlock.KindNone:
		field("waiters", 0)
	default:
		field("waiters", "not recorded in Redis for a "+string(in.Kind)+" (see subscribers)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(in.Waiters) > 0 {
		fmt.Fprintln(tw, "  OWNER\tMODE\tAGE\tEXPIRES\tCLIENT")
		for _, wt := range in.Waiters {
			age := "-"
			if !wt.Since.IsZero() {
				age = formatDur(wt.Age)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", quoteName(wt.Owner), orDash(wt.Mode), age, formatDur(wt.Expires), describeClient(wt.ClientID, wt.Client))
		}
	}
	return tw.Flush()
}

func yesNo(b bool, why string) string {
	if b {
		return "yes: " + why
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// holderTokenText is in.Token as tokenText shows it, or, when it is unknown
// (tokenUnknown), a word that says so.
func holderTokenText(in rlock.Info) string {
	if tokenUnknown(in) {
		return "unknown (a fast grant: Redis learns it at the holder's next renewal)"
	}
	return tokenText(in.Token)
}

// tokenUnknown reports whether in is a Mutex or FairMutex held with no fencing token known:
// taken by a fast grant (docs/DESIGN.md section 5: Redis learns the token at the holder's
// next call, its first renewal at the latest). Its holder has a token; Info.Token is 0
// because Redis does not know it yet. (A read-write lock held for reading only has no
// token holder: its Token 0 is no token.)
func tokenUnknown(in rlock.Info) bool {
	return in.Token == 0 && len(in.Holders) > 0 && (in.Kind == rlock.KindMutex || in.Kind == rlock.KindFairMutex)
}

func tokenText(t int64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatInt(t, 10)
}

// describeClient is who a Client is: its record, or its id alone.
func describeClient(id string, c *rlock.ClientInfo) string {
	switch {
	case c != nil:
		// The record's texts are anyone's who may write the key: shown quoted when they
		// hold spaces or control characters, as names are.
		s := quoteName(c.App)
		if c.Version != "" {
			s += " " + quoteName(c.Version)
		}
		if c.Host != "" {
			s += " on " + quoteName(c.Host)
		}
		if c.PID != 0 {
			s += " pid " + strconv.Itoa(c.PID)
		}
		return strings.TrimSpace(s)
	case id != "":
		return "client " + id + " (no record: WithClientInfo)"
	}
	return "-"
}

// describeHolder is one line about a hold.
func describeHolder(h rlock.HolderInfo) string {
	s := quoteName(h.Owner)
	if h.Mode != "" {
		s += " (" + h.Mode + ")"
	}
	s += fmt.Sprintf(", %d hold(s), lease %s", h.Holds, formatDur(h.TTL))
	if !h.Since.IsZero() {
		s += ", since " + formatTime(h.Since)
	}
	if d := describeClient(h.ClientID, h.Client); d != "-" {
		s += ": " + d
	}
	return s
}

// heldBy is the list's summary of the holders.
func heldBy(in rlock.Info) string {
	if len(in.Holders) == 0 {
		return "-"
	}
	h := in.Holders[0]
	s := describeClient(h.ClientID, h.Client)
	if h.Client == nil {
		s = quoteName(h.Owner)
	}
	if len(in.Holders) > 1 {
		s += fmt.Sprintf(" +%d", len(in.Holders)-1)
	}
	return s
}

// holdersRecorded reports whether Redis records in's holders: not for a Semaphore or what
// may be one (KindCount), which keeps the count of available permits only, so that "0
// holders" would show a semaphore whose every permit is taken as one nobody holds.
func holdersRecorded(in rlock.Info) bool {
	return in.Kind != rlock.KindSemaphore && in.Kind != rlock.KindCount
}

// holderCount is list's HOLDERS column: "?" where Redis does not record them.
func holderCount(in rlock.Info) string {
	if !holdersRecorded(in) {
		return "?"
	}
	return strconv.Itoa(len(in.Holders))
}

func waiterCount(in rlock.Info) string {
	switch in.Kind {
	case rlock.KindFairMutex, rlock.KindRWMutex, rlock.KindNone:
		return strconv.Itoa(len(in.Waiters))
	}
	return "?"
}

// formatTTL is the key's time to live: "-" for no key, "none" for no expiry.
func formatTTL(in rlock.Info) string {
	switch {
	case in.Type == "none" || in.Type == "":
		return "-"
	case in.TTL < 0:
		return "none"
	}
	return formatDur(in.TTL)
}

// formatDur shows d to the millisecond below a second, to the tenth below a minute.
func formatDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 MST")
}

// quoteName shows a text from Redis (a name, an owner id, a Client's record) as it is, or
// quoted when it is empty or has spaces or unprintable bytes, so that no text can move the
// columns or send escape sequences to the terminal.
func quoteName(name string) string {
	q := strconv.Quote(name) // escapes every byte that is not printable (strconv.IsPrint)
	if name != "" && q[1:len(q)-1] == name && !strings.Contains(name, " ") {
		return name
	}
	return q
}

// kindText is in's kind, or what else its key holds.
func kindText(in rlock.Info) string {
	if in.Kind == "" {
		return "not relock's: a " + in.Type
	}
	return string(in.Kind)
}

// The JSON views: durations in milliseconds, times in RFC 3339. A text from Redis (a name, a
// key, an owner id) is any bytes, and a JSON string holds UTF-8 only (encoding/json writes
// U+FFFD for each byte that is not): a text that is not valid UTF-8 gets, beside its field as
// before, a field of its own with the suffix _base64 holding its exact bytes (standard base64,
// padded), which --base64 takes back as NAME. A valid UTF-8 text gets none.
type (
	jsonView struct {
		Name            string       `json:"name"`
		NameBase64      string       `json:"name_base64,omitempty"`
		Key             string       `json:"key"`
		KeyBase64       string       `json:"key_base64,omitempty"`
		Kind            string       `json:"kind"`
		Type            string       `json:"type"`
		TTLMs           int64        `json:"ttl_ms"` // -1: no expiry; 0: no key
		Token           *int64       `json:"token"`  // null: held, token unknown; 0: none
		LastToken       int64        `json:"last_token"`
		Count           int64        `json:"count"`
		Contended       bool         `json:"contended"`
		Subscribers     int64        `json:"subscribers"`
		ReadSubscribers int64        `json:"read_subscribers"`
		ServerTime      time.Time    `json:"server_time"`
		Holders         []jsonHolder `json:"holders"`
		Waiters         []jsonWaiter `json:"waiters"`
	}
	jsonHolder struct {
		Owner       string      `json:"owner"`
		OwnerBase64 string      `json:"owner_base64,omitempty"`
		Mode        string      `json:"mode,omitempty"`
		Holds       int64       `json:"holds"`
		TTLMs       int64       `json:"ttl_ms"`
		Since       *time.Time  `json:"since,omitempty"`
		ClientID    string      `json:"client_id,omitempty"`
		Client      *jsonClient `json:"client,omitempty"`
	}
	jsonWaiter struct {
		Owner       string      `json:"owner"`
		OwnerBase64 string      `json:"owner_base64,omitempty"`
		Mode        string      `json:"mode,omitempty"`
		Since       *time.Time  `json:"since,omitempty"`
		AgeMs       int64       `json:"age_ms"`
		ExpiresMs   int64       `json:"expires_ms"`
		ClientID    string      `json:"client_id,omitempty"`
		Client      *jsonClient `json:"client,omitempty"`
	}
	jsonClient struct {
		App     string    `json:"app"`
		Version string    `json:"version"`
		Host    string    `json:"host"`
		PID     int       `json:"pid"`
		Started time.Time `json:"started"`
	}
	jsonForced struct {
		Name       string       `json:"name"`
		NameBase64 string       `json:"name_base64,omitempty"`
		Kind       string       `json:"kind"`
		Freed      []jsonHolder `json:"freed"`
	}
)

func jsonInfo(in rlock.Info) jsonView {
	v := jsonView{Name: in.Name, NameBase64: base64IfNotUTF8(in.Name), Key: in.Key, KeyBase64: base64IfNotUTF8(in.Key), Kind: string(in.Kind), Type: in.Type, TTLMs: in.TTL.Milliseconds(),
		Token: &in.Token, LastToken: in.LastToken, Count: in.Count, Contended: in.Contended,
		Subscribers: in.Subscribers, ReadSubscribers: in.ReadSubscribers, ServerTime: in.ServerTime.UTC(),
		Holders: []jsonHolder{}, Waiters: []jsonWaiter{}}
	if in.TTL < 0 {
		v.TTLMs = -1
	}
	if tokenUnknown(in) {
		v.Token = nil // not 0, which says there is no token
	}
	for _, h := range in.Holders {
		v.Holders = append(v.Holders, jsonHolder{Owner: h.Owner, OwnerBase64: base64IfNotUTF8(h.Owner), Mode: h.Mode, Holds: h.Holds, TTLMs: h.TTL.Milliseconds(),
			Since: timePtr(h.Since), ClientID: h.ClientID, Client: clientJSON(h.Client)})
	}
	for _, w := range in.Waiters {
		v.Waiters = append(v.Waiters, jsonWaiter{Owner: w.Owner, OwnerBase64: base64IfNotUTF8(w.Owner), Mode: w.Mode, Since: timePtr(w.Since), AgeMs: w.Age.Milliseconds(),
			ExpiresMs: w.Expires.Milliseconds(), ClientID: w.ClientID, Client: clientJSON(w.Client)})
	}
	return v
}

// base64IfNotUTF8 is s in standard base64 when s is not valid UTF-8 (its JSON string loses
// bytes), else "" (no _base64 field).
func base64IfNotUTF8(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func clientJSON(c *rlock.ClientInfo) *jsonClient {
	if c == nil {
		return nil
	}
	return &jsonClient{App: c.App, Version: c.Version, Host: c.Host, PID: c.PID, Started: c.Started.UTC()}
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
