package console

import (
	"errors"
	"fmt"
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
