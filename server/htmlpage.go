package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/html"
)

// htmlPages serves HTML pages, and the assets they load, with the headers
// every page of the gateway gets: a Content-Security-Policy that lets a page
// load nothing but this origin's files (no CDN, no inline code except by
// hash, no framing), no MIME sniffing, no framing by old browsers, no
// Referer sent on. samples are pages as the handler serves them: their
// inline <script> and <style> elements are the only inline code allowed,
// by SHA-256, so a page whose inline code changed fails closed.
func htmlPages(next http.Handler, samples ...[]byte) (http.Handler, error) {
	var scripts, styles []string
	for _, page := range samples {
		s, st, err := inlineCodeHashes(page)
		if err != nil {
			return nil, err
		}
		scripts, styles = append(scripts, s...), append(styles, st...)
	}
	csp := pagePolicy(scripts, styles)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		noSniff(w)
		next.ServeHTTP(w, r)
	}), nil
}

// pagePolicy is the Content-Security-Policy of HTML pages. Images may be
// data: URIs (Swagger UI's stylesheet draws its icons with them); scripts
// and styles come from this origin or are the inline ones hashed.
func pagePolicy(scriptHashes, styleHashes []string) string {
	return strings.Join([]string{
		"default-src 'self'",
		"script-src " + strings.Join(append([]string{"'self'"}, scriptHashes...), " "),
		"style-src " + strings.Join(append([]string{"'self'"}, styleHashes...), " "),
		"img-src 'self' data:",
		"connect-src 'self'",
		"object-src 'none'",
		"base-uri 'none'",
		"form-action 'self'",
		"frame-ancestors 'none'",
	}, "; ")
}

// inlineCodeHashes returns the CSP hash sources ('sha256-…') of a page's
// inline scripts and inline styles.
func inlineCodeHashes(page []byte) (scripts, styles []string, err error) {
	z := html.NewTokenizer(bytes.NewReader(page))
	inline := "" // "script" or "style" while inside an inline one
	for {
		switch z.Next() {
		case html.ErrorToken:
			if errors.Is(z.Err(), io.EOF) {
				slices.Sort(scripts)
				slices.Sort(styles)
				return slices.Compact(scripts), slices.Compact(styles), nil
			}
			return nil, nil, fmt.Errorf("parse HTML page: %w", z.Err())
		case html.StartTagToken:
			name, hasAttr := z.TagName()
			inline = ""
			if tag := string(name); tag == "script" || tag == "style" {
				inline = tag
				for hasAttr {
					var key []byte
					key, _, hasAttr = z.TagAttr()
					if tag == "script" && string(key) == "src" {
						inline = ""
					}
				}
			}
		case html.TextToken:
			if inline == "" {
				continue
			}
			sum := sha256.Sum256(z.Text())
			source := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
			if inline == "script" {
				scripts = append(scripts, source)
			} else {
				styles = append(styles, source)
			}
		case html.EndTagToken:
			inline = ""
		}
	}
}
