//go:build !devstack

package main

import (
	"context"
	"errors"
)

// devCommand stands in for the dev stack, which installs and runs
// PostgreSQL and so stays out of production binaries.
func devCommand(a *cli) *command {
	return &command{name: "dev", short: devShort + " — not in this build", setup: func(fs *flagSet) execFunc {
		devFlags(fs, a.level)
		return func(context.Context, []string) error {
			return errors.New("this gateway binary was built without the dev stack: use `make run`, " +
				"or build it with `go build -tags devstack ./server/cmd/gateway`")
		}
	}}
}
