// Package problem names the stable codes of the gateway's RFC 9457 problems
// and the type of text a client may be shown. It imports only the standard
// library, so the server, its tests and worker clients can all compare codes
// against the same constants; openapi.yaml lists the same set.
package problem
