// Package api is generated from openapi.yaml by oapi-codegen; never edit it
// by hand — change the spec and run `make generate`. guard.gen.go wraps the
// strict interface so that in-process callers pass the same permission
// check as HTTP requests (tools/strictguard).
package api

//go:generate go tool oapi-codegen -config cfg.yaml ../../openapi.yaml
//go:generate go run ../../tools/strictguard -in api.gen.go -out guard.gen.go
