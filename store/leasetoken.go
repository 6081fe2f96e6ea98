package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// leaseTokenBytes is the randomness of one lease token: 256 bits.
const leaseTokenBytes = 32

// leaseTokenHash is what the database stores and compares of a lease token:
// its SHA-256. The token itself is never stored, so whoever can read the
// database cannot present it.
func leaseTokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// leaseTokenHashes hashes the tokens of refs, in order.
func leaseTokenHashes(refs []AttemptRef) [][]byte {
	out := make([][]byte, len(refs))
	for i, r := range refs {
		out[i] = leaseTokenHash(r.LeaseToken)
	}
	return out
}

// newLeaseTokens makes n fresh lease tokens (hex) and their hashes, for a
// statement that may grant up to n leases: the n-th lease it grants gets
// the n-th token.
func newLeaseTokens(n int) (tokens []string, hashes [][]byte) {
	random := make([]byte, n*leaseTokenBytes)
	_, _ = rand.Read(random) // crypto/rand.Read never fails (it crashes the program instead)
	tokens, hashes = make([]string, n), make([][]byte, n)
	for i := range n {
		tokens[i] = hex.EncodeToString(random[i*leaseTokenBytes : (i+1)*leaseTokenBytes])
		hashes[i] = leaseTokenHash(tokens[i])
	}
	return tokens, hashes
}
