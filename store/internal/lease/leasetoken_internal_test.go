package lease

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
)

func TestNewLeaseTokens(t *testing.T) {
	tokens, hashes := newLeaseTokens(3)
	seen := map[string]bool{}
	for i, tok := range tokens {
		raw, err := hex.DecodeString(tok)
		if err != nil || len(raw) != leaseTokenBytes {
			t.Fatalf("token %q is not %d bytes of hex", tok, leaseTokenBytes)
		}
		if want := sha256.Sum256([]byte(tok)); string(hashes[i]) != string(want[:]) {
			t.Fatalf("hash %d is not the SHA-256 of its token", i)
		}
		if seen[tok] {
			t.Fatalf("token %q made twice", tok)
		}
		seen[tok] = true
	}
}

// BenchmarkNewLeaseTokens is what a poll spends in Go on its tokens, by
// max_tasks.
func BenchmarkNewLeaseTokens(b *testing.B) {
	for _, n := range []int{1, 4, 100, 1000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				newLeaseTokens(n)
			}
		})
	}
}

// BenchmarkLeaseTokenHash is what a fenced call spends hashing its token.
func BenchmarkLeaseTokenHash(b *testing.B) {
	tokens, _ := newLeaseTokens(1)
	for b.Loop() {
		TokenHash(tokens[0])
	}
}
