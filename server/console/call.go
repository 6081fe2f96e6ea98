package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// errUnexpected is an answer the console does not know (a 500).
var errUnexpected = errors.New("console: unexpected answer")

// answer takes an API handler's answer as the success variant T; a handler
// reports every failure as an error, which passes through.
func answer[T any](resp any, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	v, ok := resp.(T)
	if !ok {
		return zero, fmt.Errorf("%w %T", errUnexpected, resp)
	}
	return v, nil
}

// pageQuery is a list page's query as the API reads it: a page of pageSize
// from the cursor the request names, and the named filters it carries.
func pageQuery(r *http.Request, filters ...string) url.Values {
	q := url.Values{"limit": {strconv.Itoa(pageSize)}}
	for _, name := range append(filters, "cursor") {
		if v := r.URL.Query()[name]; len(v) > 0 {
			q[name] = v
		}
	}
	return q
}
