package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store/internal/history"
)

// What scans found and how it changed is the history domain's
// (store/internal/history): assets and their graph, threats, the changes
// between scans, threat exclusions. The Store embeds its Archive, so its
// verbs (ListAssets, ListAssetEdges, ListThreats, ListScanChanges,
// ListExposureChanges, CreateThreatExclusion, ListThreatExclusions,
// DeleteThreatExclusion) are the Store's, and its types are named here.
// Ingestion (ingest.go) is worker-facing and stays here, beside the result
// batches; so does a redrive's reopening of a scan (scanhistory.go), a
// part of RetryTask.
type (
	Asset                 = history.Asset
	AssetEdge             = history.AssetEdge
	AssetRef              = history.AssetRef
	Threat                = history.Threat
	Vulnerability         = history.Vulnerability
	AssetChange           = history.AssetChange
	ChangeFilter          = history.ChangeFilter
	ThreatExclusion       = history.ThreatExclusion
	ThreatExclusionParams = history.ThreatExclusionParams
)

// Change kinds.
const (
	ChangeAssetAppeared      = history.ChangeAssetAppeared
	ChangeAssetDisappeared   = history.ChangeAssetDisappeared
	ChangePortOpened         = history.ChangePortOpened
	ChangePortClosed         = history.ChangePortClosed
	ChangeCertificateChanged = history.ChangeCertificateChanged
	ChangeHTTPStatusChanged  = history.ChangeHTTPStatusChanged
)

// ChangeKinds lists every change kind.
var ChangeKinds = history.ChangeKinds

// findOrganization is the history domain's check of a listed organization
// (history.FindOrganization): GetOrganization's, as before.
func (s *Store) findOrganization(ctx context.Context, tenant Tenant, org uuid.UUID) error {
	_, err := s.GetOrganization(ctx, tenant, org)
	return err
}
