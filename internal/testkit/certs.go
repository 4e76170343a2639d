package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made by a test, so that TLS tests need no
// files from outside. Its keys are ECDSA P-256: quick to make and to use.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // the CA certificate, PEM
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

// NewCA makes a self-signed CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.KeyUsage |= x509.KeyUsageCertSign
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("making CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parsing CA %s: %v", name, err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is a certificate issued by a CA with its key.
type Leaf struct {
	TLS     tls.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Server issues a server certificate for 127.0.0.1, 127.0.0.2, ::1 and
// localhost.
func (ca *CA) Server(t testing.TB, name string) *Leaf {
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth)
}

// ServerFor issues a server certificate for the given DNS names only.
func (ca *CA) ServerFor(t testing.TB, name string, dnsNames ...string) *Leaf {
	return ca.issueWith(t, name, x509.ExtKeyUsageServerAuth, func(c *x509.Certificate) {
		c.IPAddresses, c.DNSNames = nil, dnsNames
	})
}

// ServerWith issues a server certificate as Server does, after edit has
// changed its template (a validity period, other names).
func (ca *CA) ServerWith(t testing.TB, name string, edit func(*x509.Certificate)) *Leaf {
	return ca.issueWith(t, name, x509.ExtKeyUsageServerAuth, edit)
}

// Client issues a client certificate with common name name.
func (ca *CA) Client(t testing.TB, name string) *Leaf {
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage) *Leaf {
	t.Helper()
	return ca.issueWith(t, name, usage, nil)
}

// issueWith issues a certificate whose template edit may change.
func (ca *CA) issueWith(t testing.TB, name string, usage x509.ExtKeyUsage, edit func(*x509.Certificate)) *Leaf {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	if edit != nil {
		edit(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("issuing %s: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("encoding the key of %s: %v", name, err)
	}
	l := &Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		t.Fatalf("key pair of %s: %v", name, err)
	}
	return l
}

// WriteFiles writes the leaf's certificate and key into dir as
// name.crt and name.key and returns their paths.
func (l *Leaf) WriteFiles(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	WriteFile(t, certFile, l.CertPEM)
	WriteFile(t, keyFile, l.KeyPEM)
	return certFile, keyFile
}

// WriteCA writes the CA certificate into dir as name.crt and returns its
// path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name+".crt")
	WriteFile(t, p, ca.PEM)
	return p
}

// WriteFile writes b to path or fails the test.
func WriteFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// template is a certificate named name, valid from an hour ago for a day,
// with a serial number of its own.
func template(name string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"lhrelay tests"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
