package tests

import (
	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store"
)

func storeTokenParams(org uuid.UUID) store.CreateAPITokenParams {
	return store.CreateAPITokenParams{Name: "scoped", Permissions: []string{"producer"}, OrganizationID: &org}
}
