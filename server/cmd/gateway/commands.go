package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// execFunc runs a command with its positional arguments.
type execFunc func(ctx context.Context, args []string) error

// command is one row of the command table.
type command struct {
	name  string
	args  string // positional arguments, exactly these, for the usage line: "ORG WORKER"
	short string
	long  string
	// setup defines the flags and returns what runs once they are parsed.
	// A group's setup (optional) defines flags its subcommands share.
	setup func(fs *flagSet) execFunc
	sub   []*command
	// env gives the sources of environment variables, the process
	// environment when nil; subcommands inherit it.
	env func(chain []*flagSet) ([]lookupFunc, error)
}

// usageError is a command line mistake: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// errNoCommand is a group run without a subcommand: its usage, status 2.
var errNoCommand = errors.New("missing command")

// cli runs one command line.
type cli struct {
	stdout, stderr io.Writer
	level          *slog.LevelVar
	logger         *slog.Logger
	// isDefault: the logger is also slog's default (the real process, not
	// a test's cli).
	isDefault bool
	// The command last parsed: its path and usage, for help and errors.
	path  string
	usage func() string
}

func newCLI(stdout, stderr io.Writer) *cli {
	a := &cli{stdout: stdout, stderr: stderr, level: new(slog.LevelVar)}
	a.logger = slog.New(newLogHandler(stderr, "auto", a.level))
	return a
}

// run runs args (without the program name) and returns the exit status:
// 0, 1 when the command failed, 2 for a usage mistake.
func (a *cli) run(ctx context.Context, args []string) int {
	if isVersionFlag(args) {
		args = []string{"version"}
	}
	root := a.build(rootCommand(a), "gateway", nil, nil)
	err := root.Parse(args)
	parseErr := err != nil
	if err == nil {
		err = root.Run(ctx)
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(a.stdout, a.usage())
		return 0
	case errors.Is(err, errNoCommand):
		fmt.Fprint(a.stderr, a.usage())
		return 2
	case parseErr:
		// ff wraps the flag package's message; the message is enough.
		if u := errors.Unwrap(err); u != nil {
			err = u
		}
		fmt.Fprintf(a.stderr, "error: %s: %v\n(%s -h shows the flags)\n", a.path, err, a.path)
		return 2
	case errors.As(err, &ue):
		fmt.Fprintf(a.stderr, "error: %s\n(%s -h shows the usage)\n", ue.msg, a.path)
		return 2
	}
	fmt.Fprintln(a.stderr, "error:", err)
	return 1
}

// build turns a row of the table, and its subcommands, into an ffcli
// command; chain holds the flag sets of the groups above it.
func (a *cli) build(c *command, path string, chain []*flagSet, env func([]*flagSet) ([]lookupFunc, error)) *ffcli.Command {
	fs := newFlagSet(path)
	chain = append(slices.Clone(chain), fs)
	var exec execFunc
	if c.setup != nil {
		exec = c.setup(fs)
	}
	if c.env != nil {
		env = c.env
	}
	// No ff options: environment variables are applied by applyEnv, which
	// knows the older names and the ctl --env file.
	fc := &ffcli.Command{Name: c.name, ShortHelp: c.short, FlagSet: fs.FlagSet}
	for _, s := range c.sub {
		fc.Subcommands = append(fc.Subcommands, a.build(s, path+" "+s.name, chain, env))
	}
	usage := func() string { return commandUsage(c, path, chain) }
	// The flag package calls this for -h and for a bad flag.
	fc.UsageFunc = func(*ffcli.Command) string {
		a.path, a.usage = path, usage
		return ""
	}
	fc.Exec = func(ctx context.Context, args []string) error {
		a.path, a.usage = path, usage
		if len(c.sub) > 0 {
			return groupExec(path, c, args)
		}
		positional, err := parseInterleaved(fs.FlagSet, args)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{fmt.Sprintf("%s: %v", path, err)}
		}
		// A last argument named NAME... takes one or more.
		fields := strings.Fields(c.args)
		variadic := len(fields) > 0 && strings.HasSuffix(fields[len(fields)-1], "...")
		if len(positional) != len(fields) && (!variadic || len(positional) < len(fields)) {
			return usageError{fmt.Sprintf("usage: %s", strings.TrimSpace(path+" "+c.args))}
		}
		sources := []lookupFunc{osEnv}
		if env != nil {
			if sources, err = env(chain); err != nil {
				return err
			}
		}
		if err := applyEnv(chain, sources...); err != nil {
			return err
		}
		return exec(ctx, positional)
	}
	return fc
}

// groupExec runs when a group is named without a known subcommand.
func groupExec(path string, c *command, args []string) error {
	if len(args) == 0 {
		return errNoCommand
	}
	if args[0] == "help" {
		return flag.ErrHelp
	}
	names := make([]string, len(c.sub))
	for i, s := range c.sub {
		names[i] = s.name
	}
	msg := fmt.Sprintf("unknown command %q", path+" "+args[0])
	if s := suggest(args[0], names); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", path+" "+s)
	}
	return usageError{msg}
}

// suggest returns the candidate name most likely meant: at most two
// edits away, or begun by name; "" when none is.
func suggest(name string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		d := editDistance(name, c)
		if len(name) >= 2 && strings.HasPrefix(c, name) {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// commandUsage is what -h prints: the synopsis, the subcommands and every
// flag with its default and environment variables.
func commandUsage(c *command, path string, chain []*flagSet) string {
	var b strings.Builder
	if c.short != "" {
		fmt.Fprintf(&b, "%s\n\n", c.short)
	}
	b.WriteString("USAGE\n")
	switch {
	case len(c.sub) > 0:
		fmt.Fprintf(&b, "  %s <command> [flags]\n", path)
	default:
		fmt.Fprintf(&b, "  %s [flags]\n", strings.TrimSpace(path+" "+c.args))
	}
	if c.long != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(c.long, "\n"))
	}
	if len(c.sub) > 0 {
		b.WriteString("\nCOMMANDS\n")
		tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		for _, s := range c.sub {
			args := ""
			if len(s.sub) > 0 {
				args = " <command>"
			} else if s.args != "" {
				args = " " + s.args
			}
			fmt.Fprintf(tw, "  %s%s\t%s\n", s.name, args, s.short)
		}
		tw.Flush()
	}
	n := 0
	for _, fs := range chain {
		fs.VisitAll(func(*flag.Flag) { n++ })
	}
	if n > 0 {
		b.WriteString("\nFLAGS (each can also be set by the environment variables named)\n")
		writeFlagUsage(&b, chain)
	}
	if len(c.sub) > 0 {
		fmt.Fprintf(&b, "\nRun '%s <command> -h' for a command's flags.\n", path)
	}
	return b.String()
}
