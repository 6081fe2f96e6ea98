// Package apiclient is the HTTP client generated from openapi.yaml: one type
// per schema and one method per operation. Workers use the runtime in
// package workerclient, which is built on it; control-plane tools call it
// directly.
package apiclient

//go:generate go tool oapi-codegen -config cfg.yaml ../../openapi.yaml
