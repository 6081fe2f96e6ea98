package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Secrets. A value is read from a file or from standard input, never from
// the command line, so it lands in no shell history and no ps listing.

// secretInput is where a value is read when no --from-file is given.
var secretInput io.Reader = os.Stdin

// secretValueFlags are the value and limits of create and replace.
type secretValueFlags struct {
	fromFile  *string
	taskTypes *string
	labels    *string
}

func defineSecretValueFlags(fs *flagSet) secretValueFlags {
	return secretValueFlags{
		fromFile:  fs.String("from-file", "", "read the value from this file (default: standard input); one trailing newline is dropped"),
		taskTypes: fs.String("task-types", "", "only tasks of these types receive it, comma-separated (scanner_plugin, ai)"),
		labels:    fs.String("worker-labels", "", "only workers with all these labels receive it: key=value, comma-separated"),
	}
}

// read returns the value and the limits as the API takes them.
func (f secretValueFlags) read() (string, *apiclient.SecretTaskTypes, *apiclient.SecretWorkerLabels, error) {
	var (
		data []byte
		err  error
	)
	if *f.fromFile != "" {
		data, err = os.ReadFile(*f.fromFile)
	} else {
		data, err = io.ReadAll(io.LimitReader(secretInput, 1<<20))
	}
	if err != nil {
		return "", nil, nil, err
	}
	value := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	if value == "" {
		return "", nil, nil, usageError{"the secret's value is empty: give it on standard input or with --from-file"}
	}
	var types *apiclient.SecretTaskTypes
	if *f.taskTypes != "" {
		t := apiclient.SecretTaskTypes{}
		for _, s := range strings.Split(*f.taskTypes, ",") {
			t = append(t, apiclient.TaskType(strings.TrimSpace(s)))
		}
		types = &t
	}
	var labels *apiclient.SecretWorkerLabels
	if *f.labels != "" {
		l := apiclient.SecretWorkerLabels{}
		for _, kv := range strings.Split(*f.labels, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || k == "" {
				return "", nil, nil, usageError{fmt.Sprintf("--worker-labels: %q is not key=value", kv)}
			}
			l[k] = v
		}
		labels = &l
	}
	return value, types, labels, nil
}

func secretsList(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id")
	return func(ctx context.Context, c *ctl, _ []string) error {
		orgID, err := optionalID("organization", *org)
		if err != nil {
			return err
		}
		res, err := c.api.ListSecretsWithResponse(ctx, &apiclient.ListSecretsParams{OrganizationId: orgID})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeSecretTable(w, res.JSON200.Items) })
	}
}

func secretsCreate(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id (required)")
	name := fs.String("name", "", "the secret's name (required): letters, digits and underscores")
	vf := defineSecretValueFlags(fs)
	return func(ctx context.Context, c *ctl, _ []string) error {
		orgID, err := optionalID("organization", *org)
		if err != nil {
			return err
		}
		if orgID == nil || *name == "" {
			return usageError{"secrets create needs --org and --name; the value comes from standard input or --from-file"}
		}
		value, types, labels, err := vf.read()
		if err != nil {
			return err
		}
		res, err := c.api.CreateSecretWithResponse(ctx, apiclient.CreateSecretRequest{
			OrganizationId: *orgID, Name: *name, Value: &value, TaskTypes: types, WorkerLabels: labels})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeSecretTable(w, []apiclient.Secret{*res.JSON201}) })
	}
}

// secretID resolves ID or NAME (with --org) to the secret's id.
func secretID(ctx context.Context, c *ctl, arg, org string) (uuid.UUID, error) {
	if id, err := uuid.Parse(arg); err == nil {
		return id, nil
	}
	orgID, err := optionalID("organization", org)
	if err != nil {
		return uuid.Nil, err
	}
	if orgID == nil {
		return uuid.Nil, usageError{"a secret named by its name needs --org"}
	}
	res, err := c.api.ListSecretsWithResponse(ctx, &apiclient.ListSecretsParams{OrganizationId: orgID})
	if err != nil {
		return uuid.Nil, err
	}
	if res.JSON200 == nil {
		return uuid.Nil, problemError(res.HTTPResponse.StatusCode, res.HTTPResponse.Header.Get("X-Request-Id"), res.Body)
	}
	i := slices.IndexFunc(res.JSON200.Items, func(s apiclient.Secret) bool { return s.Name == arg })
	if i < 0 {
		return uuid.Nil, fmt.Errorf("organization %s has no secret named %q", *orgID, arg)
	}
	return res.JSON200.Items[i].Id, nil
}

func secretsReplace(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id, when the secret is given by name")
	vf := defineSecretValueFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := secretID(ctx, c, args[0], *org)
		if err != nil {
			return err
		}
		value, types, labels, err := vf.read()
		if err != nil {
			return err
		}
		res, err := c.api.ReplaceSecretWithResponse(ctx, id, apiclient.ReplaceSecretRequest{Value: &value, TaskTypes: types, WorkerLabels: labels})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeSecretTable(w, []apiclient.Secret{*res.JSON200}) })
	}
}

func secretsDelete(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id, when the secret is given by name")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := secretID(ctx, c, args[0], *org)
		if err != nil {
			return err
		}
		res, err := c.api.DeleteSecretWithResponse(ctx, id)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeSecretTable(w, []apiclient.Secret{*res.JSON200}) })
	}
}

func writeSecretTable(w io.Writer, list []apiclient.Secret) {
	tw := newTable(w)
	row(tw, "ID", "ORGANIZATION", "NAME", "VERSION", "TASK TYPES", "WORKER LABELS", "UPDATED")
	for _, s := range list {
		types, labels := "", ""
		if s.TaskTypes != nil {
			types = strings.Join(mapStrings(*s.TaskTypes), ",")
		}
		if s.WorkerLabels != nil {
			var kv []string
			for k, v := range *s.WorkerLabels {
				kv = append(kv, k+"="+v)
			}
			slices.Sort(kv)
			labels = strings.Join(kv, ",")
		}
		row(tw, s.Id.String(), s.OrganizationId.String(), s.Name, fmt.Sprint(s.Version), types, labels, fmtTime(s.UpdatedAt))
	}
	tw.Flush()
}

func mapStrings[T ~string](in []T) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = string(v)
	}
	return out
}
