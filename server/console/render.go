package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// assetHandler serves the embedded stylesheet and scripts; anything else
// under assets/ (a directory, a missing file) is a not-found problem.
func (c *Console) assetHandler() http.Handler {
	sub, err := fs.Sub(assetFiles, "assets")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st, err := fs.Stat(sub, strings.TrimPrefix(r.URL.Path, "/")); err != nil || !st.Mode().IsRegular() {
			c.refuse(w, r, store.ErrNotFound, "There is no such file.")
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// pages holds one template set per page: the layout and the page's file.
type pages struct{ sets map[string]*template.Template }

func parsePages() (*pages, error) {
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{sets: map[string]*template.Template{}}
	for _, file := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(file, "templates/"), ".html")
		if name == "layout" || name == "partials" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/partials.html", file)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		p.sets[name] = t
	}
	return p, nil
}

// view is what the layout renders around a page's content.
type view struct {
	Title   string
	Section string
	Session *session
	Notice  string
	Data    any
	// Refresh is the htmx polling interval ("5s").
	Refresh string
}

// render writes a whole page: the layout around the page's "content".
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, s *session, title string, data any) {
	c.renderTemplate(w, r, status, page, "layout", s, title, data)
}

// fragment writes one named template of a page alone (htmx swaps).
func (c *Console) fragment(w http.ResponseWriter, r *http.Request, page, name string, s *session, data any) {
	c.renderTemplate(w, r, http.StatusOK, page, name, s, "", data)
}

func (c *Console) renderTemplate(w http.ResponseWriter, r *http.Request, status int, page, name string, s *session, title string, data any) {
	t := c.pages.sets[page]
	v := view{Title: title, Section: page, Session: s, Data: data, Notice: notices[r.URL.Query().Get("notice")],
		Refresh: fmt.Sprintf("%ds", max(int(c.cfg.RefreshEvery/time.Second), 1))}
	var buf bytes.Buffer
	if t == nil {
		c.fail(w, r, fmt.Errorf("console: no template %q", page))
		return
	}
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		c.fail(w, r, fmt.Errorf("console: render %s/%s: %w", page, name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// notices are the messages an action's redirect may show, by key, so no
// text from a URL reaches a page.
var notices = map[string]string{
	"cancelled":      "Cancellation requested.",
	"retried":        "The task is queued again.",
	"enabled":        "The worker is enabled.",
	"disabled":       "The worker is disabled: it gets no new leases.",
	"revoked":        "The worker is revoked.",
	"assigned":       "The worker is assigned.",
	"unassigned":     "The worker is unassigned.",
	"paused":         "The schedule is paused.",
	"resumed":        "The schedule is resumed.",
	"run":            "The schedule ran.",
	"deleted":        "The schedule is deleted: it fires no more; its runs stay.",
	"redriven":       "The tasks are queued again.",
	"bulk_cancelled": "Cancellation of the tasks is requested.",
	"signed_out":     "You are signed out.",
	"not_retried":    "Some tasks could not be queued again; see the list.",
}

// refuse answers a request the console itself turns down, as the API
// would: the sentinel decides the status and code (the API's one table,
// server/problem.go), detail is what the user reads.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, sentinel error, detail problem.Text) {
	c.fail(w, r, problem.Wrap(sentinel, detail))
}

// fail answers an error a handler or the store returned exactly as the API
// does: application/problem+json with the same status, code and detail.
// A page's script (assets/console.js) shows an htmx request's problem in
// the page's error region.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	c.cfg.WriteProblem(w, r, err)
}

// pathID parses a {name} path segment; a malformed one is a 404, as an
// unknown object is.
func (c *Console) pathID(w http.ResponseWriter, r *http.Request, name string) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue(name))
	if err != nil {
		c.refuse(w, r, store.ErrNotFound, "There is no such object.")
		return uuid.Nil, false
	}
	return id, true
}

// seeOther redirects after an action (post/redirect/get). A form htmx
// submitted is told to load the page whole (HX-Redirect), so the address
// bar shows it and its notice.
func seeOther(w http.ResponseWriter, r *http.Request, path, notice string) {
	if notice != "" {
		path += "?notice=" + notice
	}
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("HX-Redirect", path)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r, path, http.StatusSeeOther)
}

var funcs = template.FuncMap{
	"when": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil || v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return "—"
	},
	"iso": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format(time.RFC3339)
		case *time.Time:
			if v != nil {
				return v.UTC().Format(time.RFC3339)
			}
		}
		return ""
	},
	"str": func(s any) string {
		switch v := s.(type) {
		case *string:
			if v == nil || *v == "" {
				return "—"
			}
			return *v
		case string:
			if v == "" {
				return "—"
			}
			return v
		case fmt.Stringer:
			return v.String()
		}
		if s == nil {
			return "—"
		}
		return fmt.Sprint(s)
	},
	"id": func(s any) string {
		switch v := s.(type) {
		case uuid.UUID:
			return v.String()
		case *uuid.UUID:
			if v != nil {
				return v.String()
			}
		}
		return ""
	},
	"short": func(s any) string {
		var text string
		switch v := s.(type) {
		case uuid.UUID:
			text = v.String()
		case *uuid.UUID:
			if v == nil {
				return "—"
			}
			text = v.String()
		default:
			text = fmt.Sprint(s)
		}
		if len(text) > 8 {
			return text[:8]
		}
		return text
	},
	"json": func(v any) string {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return "—"
		}
		return string(b)
	},
	"pendingReason": pendingReasonText,
	"eligibility":   eligibilityText,
	"changeKind":    changeKindText,
	"jobsDone":      jobsDone,
	"pct": func(n, of int64) int64 {
		if of <= 0 {
			return 0
		}
		return min(100, n*100/of)
	},
	"bytes": func(n int64) string {
		switch {
		case n >= 1<<30:
			return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
}
