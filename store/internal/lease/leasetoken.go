package lease

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// leaseTokenBytes is the randomness of one lease token: 256 bits.
const leaseTokenBytes = 32

// TokenHash is what the database stores and compares of a lease token:
// its SHA-256. The token itself is never stored, so whoever can read the
// database cannot present it.
func TokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// TokenHashes hashes the tokens of refs, in order.
func TokenHashes(refs []AttemptRef) [][]byte {
	out := make([][]byte, len(refs))
	for i, r := range refs {
		out[i] = TokenHash(r.LeaseToken)
	}
	return out
}

// newLeaseTokens makes n fresh lease tokens (hex) and their hashes, for a
// statement that may grant up to n leases: the n-th lease it grants gets
// the n-th token. A poll makes them whether or not it leases anything, so
// they share a few allocations however many there are.
func newLeaseTokens(n int) (tokens []string, hashes [][]byte) {
	random := make([]byte, n*leaseTokenBytes)
	_, _ = rand.Read(random) // crypto/rand.Read never fails (it crashes the program instead)
	const size = 2 * leaseTokenBytes
	text := make([]byte, n*size)
	hex.Encode(text, random)
	all := string(text)
	sums := make([]byte, n*sha256.Size)
	tokens, hashes = make([]string, n), make([][]byte, n)
	for i := range n {
		tokens[i] = all[i*size : (i+1)*size]
		sum := sha256.Sum256(text[i*size : (i+1)*size])
		hashes[i] = sums[i*sha256.Size : (i+1)*sha256.Size : (i+1)*sha256.Size]
		copy(hashes[i], sum[:])
	}
	return tokens, hashes
}
