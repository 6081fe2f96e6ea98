package server

import (
	"mime"
	"net/http"
)

// secretAnswers are the operations whose answers carry a secret — a token,
// a lease's fencing token, a presigned upload URL, a worker's certificate —
// and so must never be stored by a cache (Cache-Control: no-store). They are
// named by operationId as the embedded contract spells them (oapi-codegen
// capitalises them: the handler method's name). Problems are never stored
// either (writeProblem).
var secretAnswers = map[string]bool{
	"CreateApiToken":        true, // the API token, shown once
	"CreateWorker":          true, // the one-time enrollment token
	"CreateEnrollmentToken": true,
	"Enroll":                true, // the enrolled certificate
	"RenewCertificate":      true,
	"AcquireLeases":         true, // lease tokens
	"OpenArtifactUpload":    true, // with s3, a presigned PUT URL
}

// markSecretAnswer keeps caches from storing the answer to an operation in
// secretAnswers.
func markSecretAnswer(w http.ResponseWriter, operationID string) {
	if secretAnswers[operationID] {
		w.Header().Set("Cache-Control", "no-store")
	}
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
