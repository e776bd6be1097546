// Package pkitest is for tests: a certificate authority of its own, a
// server certificate for 127.0.0.1 and a client certificate it issued, as
// PEM files (the proxy's client-certificate authentication, in its own
// tests and end to end).
package pkitest

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
	"testing"
	"time"
)

// PKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type PKI struct {
	CA, ServerCert, ServerKey string // files
	ClientCert, ClientKey     string // files
	Pool                      *x509.CertPool
	Client                    tls.Certificate
}

// New makes a PKI in a temporary directory whose client certificate's
// subject CN is client.
func New(t testing.TB, client string) *PKI {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mcpdrift test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, tmpl *x509.Certificate, base string) (string, string) {
		k := key()
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(base+".pem", "CERTIFICATE", der), write(base+"-key.pem", "PRIVATE KEY", kder)
	}
	p := &PKI{CA: write("ca.pem", "CERTIFICATE", caDER), Pool: x509.NewCertPool()}
	p.Pool.AddCert(ca)
	p.ServerCert, p.ServerKey = issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "proxy"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, "server")
	p.ClientCert, p.ClientKey = issue(3, &x509.Certificate{Subject: pkix.Name{CommonName: client},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, "client")
	if p.Client, err = tls.LoadX509KeyPair(p.ClientCert, p.ClientKey); err != nil {
		t.Fatal(err)
	}
	return p
}
