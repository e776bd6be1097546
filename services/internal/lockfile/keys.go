package lockfile

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Key files are PEM: the private key a PKCS #8 "PRIVATE KEY" block, a
// public key a PKIX "PUBLIC KEY" block, as OpenSSL writes them for
// ed25519 (openssl genpkey -algorithm ed25519; openssl pkey -pubout), so
// that keys can be made, kept and inspected with common tools. A file of
// trusted keys holds one or more public key blocks.

// GenerateKey makes a key pair and returns the private key's PEM and the
// public key's PEM.
func GenerateKey() (private, public []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pder, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), nil
}

// ParsePrivateKey reads an ed25519 private key in PEM (PKCS #8).
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	b, rest := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, coded.New(CodeKeyInvalid, "not a PEM \"PRIVATE KEY\" block (driftctl baseline keygen writes one)")
	}
	if len(trimSpace(rest)) > 0 {
		return nil, coded.New(CodeKeyInvalid, "more than one PEM block in a private key file")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, coded.Errorf(CodeKeyInvalid, "the private key does not parse: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, coded.Errorf(CodeKeyInvalid, "the private key is a %T, want ed25519", k)
	}
	return priv, nil
}

// ParsePublicKeys reads one or more ed25519 public keys in PEM (PKIX),
// each its own "PUBLIC KEY" block (text between blocks is ignored, as PEM has it; any other block is refused).
func ParsePublicKeys(data []byte) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			return nil, coded.Errorf(CodeKeyInvalid, "a PEM %q block where public keys are expected (give the .pub file, never the private key)", b.Type)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, coded.Errorf(CodeKeyInvalid, "public key %d does not parse: %w", len(out)+1, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, coded.Errorf(CodeKeyInvalid, "public key %d is a %T, want ed25519", len(out)+1, k)
		}
		out = append(out, pub)
	}
	if len(trimSpace(rest)) > 0 {
		return nil, coded.New(CodeKeyInvalid, "text after the public keys that is not a PEM block")
	}
	if len(out) == 0 {
		return nil, coded.New(CodeKeyInvalid, "no PEM \"PUBLIC KEY\" block")
	}
	return out, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}
