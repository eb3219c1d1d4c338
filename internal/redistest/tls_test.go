package redistest

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// ping dials a fresh rueidis client with o (DisableCache, ForceSingleClient) and returns the
// dial's or the PING's error.
func ping(t *testing.T, o rueidis.ClientOption) error {
	t.Helper()
	o.DisableCache, o.ForceSingleClient = true, true
	o.Dialer.Timeout = 5 * time.Second
	c, err := rueidis.NewClient(o)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(ctxT(t, 5*time.Second), c.B().Ping().Build()).Error()
}

func TestWithTLS(t *testing.T) {
	t.Parallel()
	s := Start(t, WithTLS(TLSOptions{}))
	msg := s.Do(t, "CONFIG", "GET", "port")
	cfg, err := msg.AsStrMap()
	if err != nil || cfg["port"] != "0" {
		t.Fatalf("CONFIG GET port = %v, %v; want 0 (no plain-text port)", cfg, err)
	}
	m := s.TLS()
	if m == nil || m.ClientCert != nil || !m.NotAfter.After(time.Now()) {
		t.Fatalf("TLS material = %+v", m)
	}
	c := s.Client(t)
	if err := c.Do(ctxT(t, 5*time.Second), c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	// By name as well as by address.
	if err := ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: &tls.Config{RootCAs: m.CAPool, ServerName: "localhost"}}); err != nil {
		t.Fatalf("PING over TLS with ServerName localhost: %v", err)
	}
	// Plain text is refused.
	if err := ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}); err == nil {
		t.Fatalf("a plain-text client reached a TLS-only server")
	}
	// Without the CA the certificate is not trusted.
	if err := ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: &tls.Config{}}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without the CA: %v; want a certificate error", err)
	}
}

func TestWithTLSClientAuth(t *testing.T) {
	t.Parallel()
	s := Start(t, WithTLS(TLSOptions{ClientAuth: true}))
	if s.TLS().ClientCert == nil || len(s.TLSConfig().Certificates) != 1 {
		t.Fatalf("no client certificate in %+v", s.TLS())
	}
	if err := ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: s.TLSConfig()}); err != nil {
		t.Fatalf("PING with the client certificate: %v", err)
	}
	if err := ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: &tls.Config{RootCAs: s.TLS().CAPool}}); err == nil {
		t.Fatalf("a client without a certificate reached a server that requires one")
	}
}

func TestWithTLSExpired(t *testing.T) {
	t.Parallel()
	s := Start(t, WithTLS(TLSOptions{Expired: true}))
	if !s.TLS().NotAfter.Before(time.Now()) {
		t.Fatalf("certificate not expired: %v", s.TLS().NotAfter)
	}
	// The helper still administers it.
	if got := mustString(t, s.Do(t, "PING")); got != "PONG" {
		t.Fatalf("admin PING = %q", got)
	}
	err := ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: s.TLSConfig()})
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a client verifying an expired certificate: %v; want an expiry error", err)
	}
}

func TestWithPassword(t *testing.T) {
	t.Parallel()
	s := Start(t, WithPassword("s3cret"))
	if s.Password() != "s3cret" {
		t.Fatalf("Password() = %q", s.Password())
	}
	if got := mustString(t, s.Do(t, "PING")); got != "PONG" {
		t.Fatalf("admin PING = %q", got)
	}
	c := s.Client(t)
	if err := c.Do(ctxT(t, 5*time.Second), c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
	if err := ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, Password: "wrong"}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v; want WRONGPASS", err)
	}
	// A replica authenticates to its master by itself.
	r := Start(t, WithReplicaOf(s))
	WaitFor(t, 20*time.Second, "the replica to sync with its password-protected master", func() bool {
		msg := r.Do(t, "INFO", "replication")
		info, _ := msg.ToString()
		return strings.Contains(info, "master_link_status:up")
	})
}

func TestWithTLSPassword(t *testing.T) {
	t.Parallel()
	s := Start(t, WithTLS(TLSOptions{}), WithPassword("pw"))
	if got := mustString(t, s.Do(t, "PING")); got != "PONG" {
		t.Fatalf("admin PING = %q", got)
	}
	if err := ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: s.TLSConfig(), Password: "pw"}); err != nil {
		t.Fatalf("PING over TLS with the password: %v", err)
	}
}
