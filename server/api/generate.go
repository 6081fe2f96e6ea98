// Package api is generated from openapi.yaml by oapi-codegen; never edit it
// by hand — change the spec and run `make generate`.
package api

//go:generate go tool oapi-codegen -config cfg.yaml ../../openapi.yaml
