// Package migrations_test applies the migrations to a real PostgreSQL the
// way an upgrade does: under a held lock on a hot table, and the contract
// step after the expand one. (The lint of the migration files is in
// package migrations and needs no database.)
package migrations_test

import (
	"testing"

	"github.com/worker-gateway/gateway/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }
