package problem

import "errors"

// Text is a message a client may read (tailscale's vizerror idea). A
// constant converts to it implicitly; a string built at run time needs an
// explicit Text(...) conversion, which is where a reviewer checks that it
// holds no error text, secret or other tenant's data.
type Text string

// publicError carries Text through error chains; err, if any, is for logs.
type publicError struct {
	msg Text
	err error
}

func (e *publicError) Error() string {
	if e.err == nil {
		return string(e.msg)
	}
	// As fmt.Errorf("%w: reason") reads: the same log text as before Wrap.
	return e.err.Error() + ": " + string(e.msg)
}

func (e *publicError) Unwrap() error { return e.err }

// Public is an error whose whole text a client may read.
func Public(msg Text) error { return &publicError{msg: msg} }

// Wrap is an error that matches err (errors.Is, errors.As) but shows a
// client only msg: err may be a sentinel that decides the status, or a cause
// whose text must stay in the logs.
func Wrap(err error, msg Text) error { return &publicError{msg: msg, err: err} }

// PublicText is the text of the outermost Public or Wrap error in err's
// tree, if any.
func PublicText(err error) (Text, bool) {
	var p *publicError
	if errors.As(err, &p) {
		return p.msg, true
	}
	return "", false
}
