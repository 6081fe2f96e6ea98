package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// envPrefix is the one prefix of the gateway binary's environment
// variables: flag -database-url is also GATEWAY_DATABASE_URL.
const envPrefix = "GATEWAY_"

// flagSet is a flag.FlagSet that knows each flag's environment variables:
// GATEWAY_<NAME> for every flag, then the names earlier releases read,
// kept as aliases so existing deployments go on working.
type flagSet struct {
	*flag.FlagSet
	aliases map[string][]string
}

func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors and help itself
	return &flagSet{FlagSet: fs, aliases: map[string][]string{}}
}

// alias adds older environment variable names for a defined flag.
func (f *flagSet) alias(flagName string, envNames ...string) {
	if f.Lookup(flagName) == nil {
		panic("alias for undefined flag " + flagName)
	}
	f.aliases[flagName] = append(f.aliases[flagName], envNames...)
}

// envNames are a flag's environment variables, the one that wins first.
func (f *flagSet) envNames(flagName string) []string {
	return append([]string{envVarName(flagName)}, f.aliases[flagName]...)
}

func envVarName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// lookupFunc reads one source of variables: the environment, an env file.
type lookupFunc func(name string) (string, bool)

// applyEnv sets every flag of chain (a command and the groups above it)
// that the command line did not set from its first variable found, looking
// in each source in turn. Flags defined on several sets of the chain share
// their variable and are set once.
func applyEnv(chain []*flagSet, sources ...lookupFunc) error {
	done := map[string]bool{}
	for _, fs := range chain {
		fs.Visit(func(f *flag.Flag) { done[f.Name] = true })
	}
	for _, fs := range chain {
		var err error
		fs.VisitAll(func(f *flag.Flag) {
			if err != nil || done[f.Name] {
				return
			}
			done[f.Name] = true
			for _, lookup := range sources {
				for _, name := range fs.envNames(f.Name) {
					if v, ok := lookup(name); ok && v != "" {
						if e := fs.Set(f.Name, v); e != nil {
							err = usageError{fmt.Sprintf("invalid value %q for $%s (flag -%s): %v", v, name, f.Name, e)}
						}
						return
					}
				}
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// osEnv is the process environment as a lookupFunc.
func osEnv(name string) (string, bool) { return os.LookupEnv(name) }

// writeFlagUsage lists the flags with their defaults and environment
// variables.
func writeFlagUsage(w io.Writer, chain []*flagSet) {
	seen := map[string]bool{}
	// The command's own flags first, then the ones it shares with its group.
	for i := len(chain) - 1; i >= 0; i-- {
		fs := chain[i]
		fs.VisitAll(func(f *flag.Flag) {
			if seen[f.Name] {
				return
			}
			seen[f.Name] = true
			argName, usage := flag.UnquoteUsage(f)
			line := "  -" + f.Name
			if argName != "" {
				line += " " + argName
			}
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
				line += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintln(w, line)
			fmt.Fprintf(w, "        %s\n", usage)
			fmt.Fprintf(w, "        env: %s\n", strings.Join(fs.envNames(f.Name), ", "))
		})
	}
}

// parseInterleaved parses flags that may come before, between and after
// positional arguments (the flag package stops at the first positional).
// After a "--" everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
