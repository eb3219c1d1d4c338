package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSOptions configures the certificates of a server started [WithTLS].
type TLSOptions struct {
	// ClientAuth makes the server require a client certificate signed by its CA
	// (--tls-auth-clients yes); [Server.TLSConfig] then carries one. Without it the server
	// runs with --tls-auth-clients no.
	ClientAuth bool
	// Expired gives the server a certificate that expired an hour ago (its CA stays valid),
	// so that clients verifying it fail. The helper's own connections (readiness probe, Do)
	// verify it as of a moment inside its validity.
	Expired bool
}

// WithTLS runs the server on TLS only: --tls-port on the server's port and --port 0, with a
// CA and a server certificate (ECDSA P-256, for 127.0.0.1, ::1 and localhost, valid for an
// hour or, with o.Expired, expired) made for the server and written to its temp dir. Get a
// client configuration with [Server.TLSConfig] (or the material with [Server.TLS]);
// [Server.Client] and Do use TLS by themselves. It cannot be combined with WithReplicaOf or
// WithSentinel.
func WithTLS(o TLSOptions) Option {
	return func(c *config) { c.tls = &o }
}

// WithPassword sets the default user's password (--requirepass pw; on a Sentinel, the
// password clients give the Sentinel itself). The helper's own
// connections (readiness probe, Do, and the defaults of [Server.Client]) authenticate with
// it; a replica of this server (WithReplicaOf) is given it as --masterauth, and a Sentinel
// monitoring it (WithSentinel) as "sentinel auth-pass". Further users are made with
// Do("ACL", "SETUSER", ...).
func WithPassword(pw string) Option {
	return func(c *config) { c.password = pw }
}

// Password returns the default user's password set by [WithPassword], or "".
func (s *Server) Password() string { return s.cfg.password }

// TLSMaterial is the certificates of a server started [WithTLS], as PEM files in its temp
// dir and in parsed form.
type TLSMaterial struct {
	// CAFile holds the CA certificate, the server's --tls-ca-cert-file.
	CAFile string
	// CertFile and KeyFile are the server's certificate and key.
	CertFile, KeyFile string
	// CAPool holds the CA certificate, for a client's RootCAs.
	CAPool *x509.CertPool
	// ClientCert is a client certificate signed by the CA (made with TLSOptions.ClientAuth,
	// else nil).
	ClientCert *tls.Certificate
	// NotBefore and NotAfter bound the server certificate's validity.
	NotBefore, NotAfter time.Time
}

// TLS returns the server's TLS material, or nil if it was not started [WithTLS].
func (s *Server) TLS() *TLSMaterial { return s.tlsMat }

// TLSConfig returns a new client configuration for the server: RootCAs is its CA pool, and
// with TLSOptions.ClientAuth, Certificates holds the client certificate. ServerName is left
// empty (Go then verifies the dialled address, 127.0.0.1, which the certificate names). It
// returns nil if the server was not started [WithTLS].
func (s *Server) TLSConfig() *tls.Config {
	m := s.tlsMat
	if m == nil {
		return nil
	}
	c := &tls.Config{RootCAs: m.CAPool, MinVersion: tls.VersionTLS12}
	if m.ClientCert != nil {
		c.Certificates = []tls.Certificate{*m.ClientCert}
	}
	return c
}

// adminTLSConfig is TLSConfig for the helper's own connections: it verifies the server's
// certificate as of the middle of its validity, so that an expired one (TLSOptions.Expired)
// still lets the helper probe and administer the server.
func (s *Server) adminTLSConfig() *tls.Config {
	c := s.TLSConfig()
	if c == nil {
		return nil
	}
	mid := s.tlsMat.NotBefore.Add(s.tlsMat.NotAfter.Sub(s.tlsMat.NotBefore) / 2)
	c.Time = func() time.Time { return mid }
	return c
}

// makeTLS creates the CA, the server certificate and, with o.ClientAuth, a client
// certificate, and writes the server's files into dir.
func makeTLS(dir string, o TLSOptions) (*TLSMaterial, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-3 * time.Hour),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	notBefore, notAfter := now.Add(-time.Minute), now.Add(time.Hour)
	if o.Expired {
		notBefore, notAfter = now.Add(-2*time.Hour), now.Add(-time.Hour)
	}
	srvDER, srvKey, err := leaf(ca, caKey, "localhost", notBefore, notAfter, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	m := &TLSMaterial{
		CAFile:    filepath.Join(dir, "ca.crt"),
		CertFile:  filepath.Join(dir, "server.crt"),
		KeyFile:   filepath.Join(dir, "server.key"),
		CAPool:    x509.NewCertPool(),
		NotBefore: notBefore,
		NotAfter:  notAfter,
	}
	m.CAPool.AddCert(ca)
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{
		{m.CAFile, "CERTIFICATE", caDER, 0o644},
		{m.CertFile, "CERTIFICATE", srvDER, 0o644},
		{m.KeyFile, "PRIVATE KEY", keyDER, 0o600},
	} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), f.mode); err != nil {
			return nil, err
		}
	}
	if o.ClientAuth {
		der, key, err := leaf(ca, caKey, "redistest client", now.Add(-time.Minute), now.Add(time.Hour), x509.ExtKeyUsageClientAuth)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		m.ClientCert = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	return m, nil
}

// leaf makes a certificate for 127.0.0.1, ::1 and localhost signed by ca.
func leaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, notBefore, notAfter time.Time, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	return der, key, err
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
