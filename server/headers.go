package server

import (
	"mime"
	"net/http"
	"slices"

	"github.com/getkin/kin-openapi/openapi3"
)

// secretExtension marks a schema property of openapi.yaml that holds a
// secret or a credential issued to the caller (an API token, an enrollment
// token, a lease token, a task's secrets, a webhook signing secret, an
// issued certificate, a presigned upload URL): `x-secret: true`. Fields
// whose names suggest a secret but hold none say `x-secret: false`.
const secretExtension = "x-secret"

// secretMark is the x-secret mark of a property: whether it holds a secret,
// and whether it says so at all. The mark may sit beside a $ref.
func secretMark(ref *openapi3.SchemaRef) (secret, marked bool) {
	if v, ok := ref.Extensions[secretExtension].(bool); ok {
		return v, true
	}
	if ref.Value != nil {
		if v, ok := ref.Value.Extensions[secretExtension].(bool); ok {
			return v, true
		}
	}
	return false, false
}

// secretAnswers are the operations (by operationId as the embedded contract
// spells them) any of whose answers can carry a field marked x-secret, at
// any depth. Such answers must never be stored by a cache: the request
// validator sets Cache-Control: no-store on them, so a new operation or
// field needs no list kept by hand. Problems are never stored either
// (writeProblem).
func secretAnswers(spec *openapi3.T) map[string]bool {
	out := map[string]bool{}
	for _, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			if op.Responses == nil {
				continue
			}
			for _, resp := range op.Responses.Map() {
				if resp.Value == nil {
					continue
				}
				for _, media := range resp.Value.Content {
					if media.Schema != nil && holdsSecret(media.Schema, map[*openapi3.Schema]bool{}) {
						out[op.OperationID] = true
					}
				}
			}
		}
	}
	return out
}

// holdsSecret reports whether a value of ref can carry a field marked
// x-secret: through properties, items, additional properties and
// compositions.
func holdsSecret(ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) bool {
	s := ref.Value
	if s == nil || seen[s] {
		return false
	}
	seen[s] = true
	for _, prop := range s.Properties {
		if secret, _ := secretMark(prop); secret || holdsSecret(prop, seen) {
			return true
		}
	}
	children := slices.Concat(s.AllOf, s.OneOf, s.AnyOf)
	if s.Items != nil {
		children = append(children, s.Items)
	}
	if s.AdditionalProperties.Schema != nil {
		children = append(children, s.AdditionalProperties.Schema)
	}
	if s.Not != nil {
		children = append(children, s.Not)
	}
	return slices.ContainsFunc(children, func(c *openapi3.SchemaRef) bool { return holdsSecret(c, seen) })
}

// noSniff makes browsers take every Content-Type as given.
func noSniff(w http.ResponseWriter) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// withNoSniff sets X-Content-Type-Options: nosniff on every response.
func withNoSniff(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noSniff(w)
		next.ServeHTTP(w, r)
	})
}

// servedArtifactTypes are the artifact content types served as the worker
// declared them: data formats that no browser runs as a page or a script.
// Every other declared type (text/html, image/svg+xml, application/xml,
// text/javascript, …) is served as application/octet-stream. Text types get
// a charset, so no browser guesses one.
var servedArtifactTypes = map[string]string{
	"application/json":         "application/json",
	"application/x-ndjson":     "application/x-ndjson",
	"text/plain":               "text/plain; charset=utf-8",
	"text/csv":                 "text/csv; charset=utf-8",
	"application/gzip":         "application/gzip",
	"application/zip":          "application/zip",
	"application/x-tar":        "application/x-tar",
	"application/pdf":          "application/pdf",
	"image/png":                "image/png",
	"image/jpeg":               "image/jpeg",
	"image/gif":                "image/gif",
	"image/webp":               "image/webp",
	"application/octet-stream": "application/octet-stream",
}

// artifactContentType is the content type an artifact that declared
// declared is served with (ParseMediaType lower-cases the media type).
func artifactContentType(declared string) string {
	mediaType, _, err := mime.ParseMediaType(declared)
	if err != nil {
		return "application/octet-stream"
	}
	if served, ok := servedArtifactTypes[mediaType]; ok {
		return served
	}
	return "application/octet-stream"
}

// setDownloadHeaders are the headers of every file download: saved, never
// displayed as a page; if displayed anyway, sandboxed with nothing allowed.
func setDownloadHeaders(w http.ResponseWriter, declaredType, filename string) {
	w.Header().Set("Content-Type", artifactContentType(declaredType))
	w.Header().Set("Content-Disposition", `attachment; filename="`+sanitizeFilename(filename)+`"`)
	w.Header().Set("Content-Security-Policy", "default-src 'none'; sandbox")
	noSniff(w)
}
