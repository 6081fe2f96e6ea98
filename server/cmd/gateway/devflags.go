package main

import "log/slog"

const devShort = "start a complete development system (what make run runs)"

// devConfig is what `gateway dev` takes: a replica's flags and its own.
// Builds without the dev stack define them too, so a `make run` command
// line gets the message that says how to build it rather than a flag error.
type devConfig struct {
	stateDir, workerBin string
	serve               *serveConfig
}

func devFlags(fs *flagSet, level *slog.LevelVar) *devConfig {
	d := &devConfig{}
	fs.StringVar(&d.stateDir, "state-dir", ".dev", "where the dev system keeps its state")
	fs.alias("state-dir", "STATE_DIR")
	fs.StringVar(&d.workerBin, "worker-bin", "", "reference worker binary to start (empty: none)")
	fs.alias("worker-bin", "WORKER_BIN")
	d.serve = serveFlags(fs, level)
	// A development system's receivers run beside it, on loopback: its
	// webhook targets may be private (-webhooks-allow-private=false turns
	// that off). A served gateway delivers to public addresses only.
	d.serve.server.Webhooks.AllowPrivate = true
	return d
}

// devRecord is what `gateway dev` writes into <state>/dev.lock while it
// holds it, for the message a second one prints (and for tests).
type devRecord struct {
	PID     int    `json:"pid"`
	URL     string `json:"url,omitempty"`
	EnvFile string `json:"env_file,omitempty"`
}
